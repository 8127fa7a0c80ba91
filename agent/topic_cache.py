"""A small cache of topic lookups (name -> Topic, id -> Topic, the full list), with invalidation.

Every Produce, Fetch, ListOffsets and Metadata request needs the topic behind a name or
an id; asking metadata each time would put a round trip on every request. Entries are
kept for `ttl_ms` (the bound on how stale another agent's change can look here: a
topic created elsewhere is found at once, because misses are never cached, but a
deletion or a new partition count made through another agent shows up within the TTL).
Changes made through this agent call `put`/`invalidate` and are visible immediately.

Topics are immutable values (`metadata.types.Topic`), so a cached entry can be handed
out without copying. The full topic list (Metadata for all topics) is cached under the
same TTL and loaded single-flight: concurrent callers share one `list_topics` call.
Lookups by name and by id are single-flight too: a caller that misses a name (or id)
another caller is already loading waits for that load instead of starting its own. Without
this, an entry expiring under load (thousands of produce requests a second for one topic)
sent one `describe_topics` per request until the first answer came back: measured as a
third of the agent's CPU at 6,000 small produce requests/s.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

from skiff.metadata.types import Topic
from skiff.metadata.wire.operations import AgentClient

K = TypeVar("K", str, uuid.UUID)


class TopicCache:
    def __init__(
        self,
        metadata: AgentClient,
        ttl_ms: int = 5_000,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._metadata = metadata
        self._ttl_s = ttl_ms / 1000.0
        self._now = monotonic
        self._by_name: dict[str, tuple[float, Topic]] = {}
        self._by_id: dict[uuid.UUID, tuple[float, Topic]] = {}
        self._all: tuple[float, list[Topic]] | None = None
        self._all_loading: asyncio.Future[list[Topic]] | None = None  # the single-flight load
        # in-flight lookups by key: each future answers for a set of keys, absent = not found
        self._name_loads: dict[str, asyncio.Future[dict[str, Topic]]] = {}
        self._id_loads: dict[uuid.UUID, asyncio.Future[dict[uuid.UUID, Topic]]] = {}
        self._generation = 0  # bumped by invalidations, so a load racing one is not cached
        self.hits = 0
        self.misses = 0

    # --- reads --------------------------------------------------------------------------

    def _fresh(self, stamp: float) -> bool:
        return self._now() - stamp < self._ttl_s

    async def get_by_name(self, names: Iterable[str]) -> dict[str, Topic]:
        """The topics that exist among `names` (missing names are absent from the result)."""
        out: dict[str, Topic] = {}
        missing: list[str] = []
        for name in dict.fromkeys(names):
            entry = self._by_name.get(name)
            if entry is not None and self._fresh(entry[0]):
                out[name] = entry[1]
                self.hits += 1
            else:
                missing.append(name)
        if missing:
            out.update(await _single_flight(missing, self._name_loads, self._load_names, self))
        return out

    def fresh(self, name: str) -> Topic | None:
        """The cached topic without awaiting (the Produce handler's synchronous path), or None.

        A fresh entry is answered as `get_by_name` would. An entry expired for less than
        another TTL is answered too, and its reload started in the background (one load in
        flight per name, as for `get_by_name`), so that requests on the synchronous path do
        not all wait for a reload every TTL: a topic's change is then seen up to one reload
        later than `get_by_name` would see it. None (nothing started) otherwise."""
        entry = self._by_name.get(name)
        if entry is None:
            return None
        age_s = self._now() - entry[0]
        if age_s < self._ttl_s:
            self.hits += 1
            return entry[1]
        if age_s >= 2 * self._ttl_s:
            return None
        if name not in self._name_loads:
            self.misses += 1
            started = asyncio.ensure_future(self._load_names([name]))
            started.add_done_callback(_retrieve)
            started.add_done_callback(lambda f: _forget(self._name_loads, [name], f))
            self._name_loads[name] = started
        return entry[1]

    async def _load_names(self, names: list[str]) -> dict[str, Topic]:
        gen = self._generation
        found = await self._metadata.describe_topics(names)
        if gen == self._generation:
            for topic in found.values():
                self._store(topic)
            self.invalidate_quietly(names=[n for n in names if n not in found])
        return found

    async def get(self, name: str) -> Topic | None:
        return (await self.get_by_name([name])).get(name)

    async def get_by_id(self, topic_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, Topic]:
        out: dict[uuid.UUID, Topic] = {}
        missing: list[uuid.UUID] = []
        for tid in dict.fromkeys(topic_ids):
            entry = self._by_id.get(tid)
            if entry is not None and self._fresh(entry[0]):
                out[tid] = entry[1]
                self.hits += 1
            else:
                missing.append(tid)
        if missing:
            out.update(await _single_flight(missing, self._id_loads, self._load_ids, self))
        return out

    async def _load_ids(self, topic_ids: list[uuid.UUID]) -> dict[uuid.UUID, Topic]:
        gen = self._generation
        found = await self._metadata.topics_by_id(topic_ids)
        if gen == self._generation:
            for topic in found.values():
                self._store(topic)
            self.invalidate_quietly(topic_ids=[t for t in topic_ids if t not in found])
        return found

    async def all_topics(self) -> list[Topic]:
        """Every topic, sorted by name."""
        if self._all is not None and self._fresh(self._all[0]):
            self.hits += 1
            return self._all[1]
        if self._all_loading is None:
            self.misses += 1
            self._all_loading = asyncio.ensure_future(self._load_all())
            self._all_loading.add_done_callback(_retrieve)
        # shield: one caller giving up must not cancel the load the others wait for
        return await asyncio.shield(self._all_loading)

    async def _load_all(self) -> list[Topic]:
        gen = self._generation
        try:
            topics = sorted(await self._metadata.list_topics(), key=lambda t: t.name)
        finally:
            self._all_loading = None
        if gen == self._generation:
            stamp = self._now()
            self._all = (stamp, topics)
            for topic in topics:
                self._store(topic, stamp)
        return topics

    def cached(self, name: str) -> Topic | None:
        """A cached topic regardless of age (for fallbacks when metadata is unreachable)."""
        entry = self._by_name.get(name)
        return entry[1] if entry is not None else None

    def cached_all(self) -> list[Topic] | None:
        return self._all[1] if self._all is not None else None

    # --- writes -------------------------------------------------------------------------

    def _store(self, topic: Topic, stamp: float | None = None) -> None:
        stamp = self._now() if stamp is None else stamp
        old = self._by_name.get(topic.name)
        if old is not None and old[1].topic_id != topic.topic_id:
            self._by_id.pop(old[1].topic_id, None)
        self._by_name[topic.name] = (stamp, topic)
        self._by_id[topic.topic_id] = (stamp, topic)

    def put(self, topic: Topic) -> None:
        """Record a topic this agent just created or changed."""
        self._generation += 1
        self._store(topic)
        self._all = None

    def invalidate(self, names: Sequence[str] = (), topic_ids: Sequence[uuid.UUID] = ()) -> None:
        """Forget the given topics (and the full list); with no arguments, forget everything."""
        self._generation += 1
        self._all = None
        if not names and not topic_ids:
            self._by_name.clear()
            self._by_id.clear()
            return
        self.invalidate_quietly(names, topic_ids)

    def invalidate_quietly(self, names: Sequence[str] = (), topic_ids: Sequence[uuid.UUID] = ()) -> None:
        """Drop entries metadata says no longer exist (no generation bump: nothing changed here)."""
        for name in names:
            entry = self._by_name.pop(name, None)
            if entry is not None:
                self._by_id.pop(entry[1].topic_id, None)
        for tid in topic_ids:
            entry_id = self._by_id.pop(tid, None)
            if entry_id is not None:
                self._by_name.pop(entry_id[1].name, None)


async def _single_flight(
    keys: list[K],
    loads: dict[K, asyncio.Future[dict[K, Topic]]],
    load: Callable[[list[K]], Awaitable[dict[K, Topic]]],
    cache: TopicCache,
) -> dict[K, Topic]:
    """Join the loads in flight for `keys`, start one load for the rest, and collect the answers."""
    waits: dict[asyncio.Future[dict[K, Topic]], list[K]] = {}
    fresh = [k for k in keys if k not in loads]
    for k in keys:
        if k in loads:
            waits.setdefault(loads[k], []).append(k)
    if fresh:
        cache.misses += len(fresh)
        started: asyncio.Future[dict[K, Topic]] = asyncio.ensure_future(load(fresh))
        started.add_done_callback(_retrieve)
        started.add_done_callback(lambda f: _forget(loads, fresh, f))
        for k in fresh:
            loads[k] = started
        waits[started] = fresh
    out: dict[K, Topic] = {}
    for fut, wanted in waits.items():
        # shield: one caller giving up must not cancel a load the others wait for
        found = await asyncio.shield(fut)
        out.update((k, found[k]) for k in wanted if k in found)
    return out


def _forget(
    loads: dict[K, asyncio.Future[dict[K, Topic]]], keys: list[K], done: asyncio.Future[dict[K, Topic]]
) -> None:
    for k in keys:
        if loads.get(k) is done:
            del loads[k]


def _retrieve(fut: asyncio.Future[Any]) -> None:
    """Mark a load's exception as seen even if every waiter has gone away."""
    if not fut.cancelled():
        fut.exception()
