"""Typed reads, the driver's side: reader and writer schemas from the registry, shipped in
the plan (executors never ask metadata; `spark.typed_apply` decodes with them).

For each typed side (key, value) and each topic of the query, the subject is the side's
option or `<topic>-<side>` (TopicNameStrategy). The reader schema is the subject's version
named by the options (default: the latest), asked once, when Spark first asks the schema
(or the reader is built), and pinned for the query's life, so a streaming query keeps one
DataFrame schema. The writer schemas are every schema id registered under the subject
(`schema_subject_ids`, soft-deleted versions included: data written with them still
decodes) with its text (`schema_by_id`; PROTOBUF as the
serialized descriptor), asked each time tasks are planned (a batch query once, a stream
each micro-batch, new ids only), so records written with a version registered mid-stream
decode in the next micro-batch. References are followed and shipped with the schema that
names them (dependencies first).

One query has one Arrow type per side: the topics' reader schemas must map to the same
type (each topic still decodes with its own subject's schemas); a topic whose reader type
differs is refused with the subjects and versions named.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from skiff.fileformat.values import PROTOBUF, SchemaError, SchemaSource, build_decoder
from skiff.metadata.schemas.errors import SUBJECT_NOT_FOUND, VERSION_NOT_FOUND, RegistryError
from skiff.metadata.wire.http_client import SyncHttpMetadataClient
from skiff.spark.options import SourceOptions
from skiff.spark.planner import SkiffSourceError
from skiff.spark.typed_options import SideOptions, TypedOptions

MAX_REFERENCE_DEPTH = 32


@dataclass(frozen=True)
class SideSpec:
    """What an executor needs to decode one side of one topic's records."""

    side: str
    schema_type: str
    reader: SchemaSource
    writers: tuple[tuple[int, SchemaSource], ...]
    protobuf_message: str | None = None


@dataclass(frozen=True)
class TypedTask:
    key: SideSpec | None
    value: SideSpec | None
    fail_on_error: bool

    @property
    def sides(self) -> tuple[SideSpec, ...]:
        return tuple(s for s in (self.key, self.value) if s is not None)


@dataclass(frozen=True)
class ReaderSchema:
    subject: str
    version: int
    source: SchemaSource
    arrow_type: pa.DataType


def topics_of(client: SyncHttpMetadataClient, opts: SourceOptions) -> list[str]:
    """The topics the options name (a pattern: those that match now)."""
    if opts.subscribe is not None:
        return list(opts.subscribe)
    if opts.assign is not None:
        return sorted({t for t, _ in opts.assign})
    assert opts.subscribe_pattern is not None
    regex = re.compile(opts.subscribe_pattern)
    return sorted(t.name for t in client.list_topics() if regex.fullmatch(t.name))


class TypedPlanner:
    """The driver's schemas for one query: readers pinned at first use, writers by id."""

    def __init__(self, typed: TypedOptions) -> None:
        self.typed = typed
        self.readers: dict[tuple[str, str], ReaderSchema] = {}  # (side, topic)
        self.types: dict[str, pa.DataType] = {}  # side -> the query's Arrow type
        self._sources: dict[int, SchemaSource] = {}

    def arrow_types(self, client: SyncHttpMetadataClient, topics: list[str]) -> dict[str, pa.DataType]:
        """Each typed side's Arrow type (reader schemas asked for topics not seen yet)."""
        for side in self.typed.sides:
            if not topics and side.subject is None and side.side not in self.types:
                raise SkiffSourceError(
                    f"no topic matches the query, so the {side.side} subject cannot be named after one:"
                    f" set option {side.side}Subject"
                )
            for topic in topics:
                self._reader(client, side, topic)
            if not topics and side.subject is not None:
                self._reader(client, side, "")
        return dict(self.types)

    def _reader(self, client: SyncHttpMetadataClient, side: SideOptions, topic: str) -> ReaderSchema:
        key = (side.side, topic if side.subject is None else "")
        known = self.readers.get(key)
        if known is not None:
            return known
        subject = side.subject_of(topic)
        try:
            registered = client.schema_version(subject, side.version)
        except RegistryError as exc:
            raise _missing(side, subject, exc) from None
        if registered.schema_type != side.schema_type:
            raise SkiffSourceError(
                f"subject {subject} version {registered.version} is a {registered.schema_type} schema,"
                f" but option {side.side}Format is {side.schema_type.lower()}"
            )
        source = self.source(client, registered.id, registered.schema_type)
        where = f"the {side.side} reader schema (subject {subject} version {registered.version})"
        try:
            decoder = build_decoder(side.schema_type, source, {}, protobuf_message=side.protobuf_message)
        except SchemaError as exc:
            raise SkiffSourceError(f"{where}: {exc}") from None
        reader = ReaderSchema(subject, registered.version, source, decoder.arrow_type)
        first = next((r for (s, _), r in self.readers.items() if s == side.side), None)
        if first is not None and first.arrow_type != reader.arrow_type:
            raise SkiffSourceError(
                f"one query reads one {side.side} type: {where} differs from subject {first.subject}"
                f" version {first.version} ({reader.arrow_type} vs {first.arrow_type}); read the topics"
                f" in separate queries, or set option {side.side}Subject"
            )
        self.readers[key] = reader
        self.types[side.side] = reader.arrow_type
        return reader

    def source(
        self, client: SyncHttpMetadataClient, schema_id: int, schema_type: str, depth: int = 0
    ) -> SchemaSource:
        """The schema with this id, its references resolved (cached by id)."""
        known = self._sources.get(schema_id)
        if known is not None:
            return known
        if depth > MAX_REFERENCE_DEPTH:
            raise SkiffSourceError(f"schema {schema_id}: references nest deeper than {MAX_REFERENCE_DEPTH}")
        stored = client.schema_by_id(schema_id, "serialized" if schema_type == PROTOBUF else None)
        refs: dict[str, str] = {}
        for ref in stored.references:
            registered = client.schema_version(ref.subject, ref.version)
            dep = self.source(client, registered.id, registered.schema_type, depth + 1)
            for name, text in dep.references:
                refs.setdefault(name, text)
            refs.setdefault(ref.name, dep.text)
        source = SchemaSource(stored.schema_type, stored.schema, tuple(refs.items()))
        self._sources[schema_id] = source
        return source

    def task_specs(self, client: SyncHttpMetadataClient, topics: list[str]) -> dict[str, TypedTask]:
        """Each topic's decoding spec: its readers and the writer schemas registered now."""
        self.arrow_types(client, topics)
        out = {}
        for topic in topics:
            specs: dict[str, SideSpec] = {}
            for side in self.typed.sides:
                reader = self._reader(client, side, topic)
                try:
                    ids = client.schema_subject_ids(reader.subject, deleted=True)
                except RegistryError as exc:
                    raise _missing(side, reader.subject, exc) from None
                writers = tuple((i, self.source(client, i, side.schema_type)) for i in sorted(ids))
                specs[side.side] = SideSpec(
                    side.side, side.schema_type, reader.source, writers, side.protobuf_message
                )
            out[topic] = TypedTask(specs.get("key"), specs.get("value"), self.typed.fail_on_error)
        return out


def _missing(side: SideOptions, subject: str, exc: RegistryError) -> SkiffSourceError:
    if exc.error_code == SUBJECT_NOT_FOUND:
        return SkiffSourceError(
            f"no schema is registered under the subject {subject} (option {side.side}Format decodes"
            f" with it): produce with a schema registry serializer, or set option {side.side}Subject"
        )
    if exc.error_code == VERSION_NOT_FOUND:
        return SkiffSourceError(
            f"subject {subject} has no version {side.version} (option {side.side}SchemaVersion)"
        )
    return SkiffSourceError(f"the schema registry refused subject {subject}: {exc}")


def spark_type(arrow_type: pa.DataType) -> Any:
    """Spark's type for an Arrow type (a naive timestamp is TIMESTAMP_NTZ)."""
    from pyspark.sql.pandas.types import from_arrow_type

    return from_arrow_type(arrow_type, prefer_timestamp_ntz=True)
