"""The agent's cache of the schema registry, for broker-side validation (agent.schema_validation).

Two bounded LRU maps in front of the registry (the metadata service's `schema_*` operations):

- subject -> the ids of its live versions (`schema_subject_ids`), fresh for `ttl_s` (30 s):
  within that a record is checked without a call. An id the fresh list lacks refreshes the
  subject, but at most once per `min_refresh_s` (1 s) per subject: a producer sending ids that
  were never registered costs the registry one call a second, not one per record; an id
  registered a moment ago is admitted after at most that second. Soft-deleted versions leave
  the list at the next refresh (so their ids stop passing within `ttl_s`).
- schema id -> `SchemaNames` (the record name(s) the record-name strategies need), parsed once
  by `metadata.schemas.formats.parse_schema` with its references resolved; an id names one
  schema for good, so only the LRU bound evicts, except "no such id" which is kept
  `min_refresh_s`.

Fetches are single-flight per subject and per id (concurrent requests wait on one call). A
registry out of reach (or refusing the agent) is never read as "accept": the produce answers
the retriable REQUEST_TIMED_OUT (what the agent answers whenever metadata is unreachable) with
the reason, and a one-line warning is logged at most every `WARN_INTERVAL_S`.

Counters for the metrics (read at scrape time, agent.metrics): lookups answered from the cache
and not, per map (one per distinct header per batch, not per record); fetches and failed
fetches; records refused per topic (the first `MAX_REFUSED_TOPICS` topics by name, the rest
under one label).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, NamedTuple

from skiff.agent.schema_validation import Lookups, Refusal, SchemaNames, check_batch, names_of, topic_rules
from skiff.metadata.errors import MetadataError, MetadataUnavailable
from skiff.metadata.schemas.errors import SCHEMA_NOT_FOUND
from skiff.metadata.schemas.types import MAX_REFERENCES, SchemaReference
from skiff.metadata.types import Topic
from skiff.metadata.wire.schema_operations import SchemaLookups

log = logging.getLogger(__name__)

TTL_S = 30.0
MIN_REFRESH_S = 1.0
MAX_SUBJECTS = 10_000
MAX_SCHEMAS = 10_000
MAX_REFUSED_TOPICS = 1_000
OTHER_TOPICS = "_other"
MAX_FETCHES_PER_ROUND = 32  # a batch naming many unknown ids fetches them in rounds of this
MAX_ROUNDS = 4  # names, then subjects, then what is left of a large batch
MAX_REFERENCE_DEPTH = 32
WARN_INTERVAL_S = 10.0


class Unavailable(NamedTuple):
    """The registry could not answer: the batch is refused with a retriable error."""

    message: str


class ReferenceLimit(ValueError):
    """A schema whose references are too many or nested too deep to resolve here."""


class SchemaIdCache:
    """See the module doc. `monotonic` is injectable (tests drive the TTLs)."""

    def __init__(
        self,
        metadata: SchemaLookups,
        *,
        monotonic: Callable[[], float],
        ttl_s: float = TTL_S,
        min_refresh_s: float = MIN_REFRESH_S,
        max_subjects: int = MAX_SUBJECTS,
        max_schemas: int = MAX_SCHEMAS,
    ) -> None:
        self._metadata = metadata
        self._monotonic = monotonic
        self.ttl_s = ttl_s
        self.min_refresh_s = min_refresh_s
        self.max_subjects = max_subjects
        self.max_schemas = max_schemas
        self._subjects: OrderedDict[str, tuple[frozenset[int], float]] = OrderedDict()
        self._schemas: OrderedDict[int, tuple[SchemaNames, float | None]] = OrderedDict()
        self._inflight: dict[str | int, asyncio.Task[str | None]] = {}
        self._warned_s = float("-inf")
        self.hits = {"subject": 0, "schema": 0}
        self.misses = {"subject": 0, "schema": 0}
        self.fetches = 0
        self.fetch_failures = 0
        self.refused_records: dict[str, int] = {}

    # --- the synchronous answers (agent.schema_validation's Registered and NamesById) -----

    def registered(self, subject: str, schema_id: int) -> bool | None:
        """Is `schema_id` a live version's id of `subject`? None: fetch the subject first."""
        entry = self._subjects.get(subject)
        if entry is not None:
            ids, fetched_s = entry
            age_s = self._monotonic() - fetched_s
            if age_s < self.ttl_s and (schema_id in ids or age_s < self.min_refresh_s):
                self._subjects.move_to_end(subject)
                self.hits["subject"] += 1
                return schema_id in ids
        self.misses["subject"] += 1
        return None

    def names(self, schema_id: int) -> SchemaNames | None:
        """The names of a schema id (an `error` when it is not in the registry); None: fetch it."""
        entry = self._schemas.get(schema_id)
        if entry is not None:
            names, expires_s = entry
            if expires_s is None or self._monotonic() < expires_s:
                self._schemas.move_to_end(schema_id)
                self.hits["schema"] += 1
                return names
        self.misses["schema"] += 1
        return None

    # --- deciding a batch ------------------------------------------------------------------

    def check(self, topic: Topic, batch: bytes) -> None | Refusal | Lookups:
        """`check_batch` from the cache alone (the produce handler's synchronous path)."""
        rules = topic_rules(topic)
        if rules is None:
            return None
        verdict = check_batch(topic.name, rules, batch, self.registered, self.names)
        if isinstance(verdict, Refusal):
            self._count_refused(topic.name, len(verdict.record_errors))
        return verdict

    async def check_fetching(self, topic: Topic, batch: bytes) -> None | Refusal | Unavailable:
        """`check`, fetching what the cache lacks first (the handler's awaiting path)."""
        for _ in range(MAX_ROUNDS):
            verdict = self.check(topic, batch)
            if not isinstance(verdict, Lookups):
                return verdict
            failure = await self.fetch(verdict)
            if failure is not None:
                return Unavailable(f"schema registry unavailable, records not validated: {failure}")
        return Unavailable(
            f"schema registry lookups for the batch did not settle in {MAX_ROUNDS} rounds (too many unknown"
            " schema ids at once); retry"
        )

    def _count_refused(self, topic: str, records: int) -> None:
        refused = self.refused_records
        if topic not in refused and len(refused) >= MAX_REFUSED_TOPICS:
            topic = OTHER_TOPICS
        refused[topic] = refused.get(topic, 0) + records

    # --- fetching ----------------------------------------------------------------------------

    async def fetch(self, lookups: Lookups) -> str | None:
        """Fetch what `lookups` names (at most MAX_FETCHES_PER_ROUND of them); the first
        failure's message, or None when every fetch answered."""
        keys: list[str | int] = [*sorted(lookups.subjects), *sorted(lookups.schema_ids)]
        tasks = [self._task(k) for k in keys[:MAX_FETCHES_PER_ROUND]]
        failures = [f for f in await asyncio.gather(*tasks) if f is not None]
        return failures[0] if failures else None

    def _task(self, key: str | int) -> asyncio.Task[str | None]:
        task = self._inflight.get(key)
        if task is None:
            coro = self._fetch_subject(key) if isinstance(key, str) else self._fetch_names(key)
            task = self._inflight[key] = asyncio.get_running_loop().create_task(self._guarded(key, coro))
        return task

    async def _guarded(self, key: str | int, coro: Coroutine[Any, Any, None]) -> str | None:
        what = f"subject {key!r}" if isinstance(key, str) else f"schema id {key}"
        self.fetches += 1
        try:
            await coro
            return None
        except MetadataUnavailable as e:
            message = f"metadata service unavailable: {e}"
        except MetadataError as e:
            message = f"the registry refused the lookup of {what}: {e.message}"
        except Exception as e:  # boundary: any failure refuses the batch (retriable), never admits it
            log.exception("schema validation: looking up %s failed", what)
            message = f"{type(e).__name__}: {e}"
        finally:
            self._inflight.pop(key, None)
        self.fetch_failures += 1
        now_s = self._monotonic()
        if now_s - self._warned_s >= WARN_INTERVAL_S:
            self._warned_s = now_s
            log.warning("schema validation: cannot look up %s: %s", what, message)
        return message

    async def _fetch_subject(self, subject: str) -> None:
        ids = await self._metadata.schema_subject_ids(subject)
        self._subjects[subject] = (frozenset(ids), self._monotonic())
        self._subjects.move_to_end(subject)
        while len(self._subjects) > self.max_subjects:
            self._subjects.popitem(last=False)

    async def _fetch_names(self, schema_id: int) -> None:
        # The formats (Avro, JSON Schema, protoc) load only when a record-name strategy is used.
        from skiff.metadata.schemas.formats import InvalidSchema, parse_schema

        expires_s: float | None = None
        try:
            stored = await self._metadata.schema_by_id(schema_id)
        except MetadataError as e:
            if e.error_code != SCHEMA_NOT_FOUND:
                raise
            names = SchemaNames("", error="no schema has this id in the registry")
            expires_s = self._monotonic() + self.min_refresh_s
        else:
            try:
                references = await self._reference_texts(stored.references)
                parsed = parse_schema(stored.schema_type, stored.schema, references)
            except (InvalidSchema, ReferenceLimit) as e:
                names = SchemaNames(stored.schema_type, error=f"its schema does not parse here: {e}")
            else:
                names = names_of(stored.schema_type, parsed.parsed)
        self._schemas[schema_id] = (names, expires_s)
        self._schemas.move_to_end(schema_id)
        while len(self._schemas) > self.max_schemas:
            self._schemas.popitem(last=False)

    async def _reference_texts(self, references: Sequence[SchemaReference]) -> dict[str, str]:
        """Reference name -> schema text, the transitive closure in dependency order (what
        `parse_schema` takes), bounded in count and depth."""
        out: dict[str, str] = {}
        seen: set[tuple[str, int]] = set()

        async def visit(refs: Sequence[SchemaReference], depth: int) -> None:
            for ref in refs:
                if (ref.subject, ref.version) in seen:
                    continue
                if len(seen) >= MAX_REFERENCES or depth >= MAX_REFERENCE_DEPTH:
                    raise ReferenceLimit(
                        f"more than {MAX_REFERENCES} references, or nested deeper than {depth}"
                    )
                seen.add((ref.subject, ref.version))
                version = await self._metadata.schema_version(ref.subject, ref.version)
                await visit(version.references, depth + 1)
                out[ref.name] = version.schema

        await visit(references, 0)
        return out
