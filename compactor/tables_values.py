"""Typed table values and keys: a topic's record values (and keys) decoded through the
schema registry into the table's `value` (and `key`) column (a struct for a record schema),
and the records that do not decode split off for the dead-letter table (`compactor.tables`).

Schemas (`value_schemas`, `key_schemas`): when the subject `<topic>-value` (`<topic>-key`;
TopicNameStrategy) has a version, the reader schema is its latest version as of the run's
start and the writer schemas are every id registered under the subject, soft-deleted ones
included (data written with them still decodes), references resolved; decoding is
`skiff.fileformat.values` (Avro resolves each writer to the reader schema, JSON and
Protobuf read into the reader's type). No subject: the value (key) stays raw bytes.

Keys are decoded for delete-policy topics only: a compacted topic's table holds one row per
key as Kafka's compaction keeps one record per key, and both go by the key's bytes (the
upsert's `key IN (...)` in tables_commit), so its `key` stays raw.

Evolution: the table's `value` type is the reader schema's Arrow type when the table is
created; when a later run's reader type differs, the commit that first writes rows of it
also evolves the table (`tables_commit.commit_batch`, pyiceberg's `union_by_name`: new
fields are added as optional columns, types widened as Iceberg allows, int to long and
float to double; an incompatible change fails the commit, one line in the log, and the
topic waits for an operator). A table created with raw values keeps them.

Dead letters (`split_dead_letters`): a record whose value or key does not decode (not
framed, an unknown schema id, a body that does not parse) is not written to the table; it
goes, raw, with its offset and the one-line error (`key: ` before a key's), to
`skiff.<table>_dead_letters` (`DEAD_LETTER_SCHEMA`), and the rest of the topic goes on.
The dead-letter table records the offsets it covers in its own snapshots, so a rerun after
a crash between its commit and the table's skips the rows it already holds.

Authorization: the materializer reads the registry with its metadata token; the schema
lookups admit the `compactor` role (metadata.wire.schema_operations, SCHEMA_READ).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from skiff.fileformat.values import PROTOBUF, SchemaSource, build_decoder
from skiff.metadata.schemas.errors import SUBJECT_NOT_FOUND, RegistryError

MAX_REFERENCE_DEPTH = 32
DEAD_LETTER_SCHEMA = pa.schema(
    [
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("error", pa.string(), nullable=False),
    ]
)


@dataclass(frozen=True)
class ValueSchemas:
    subject: str
    version: int
    schema_type: str
    reader: SchemaSource
    writers: tuple[tuple[int, SchemaSource], ...]

    def decoder(self) -> Any:
        return build_decoder(self.schema_type, self.reader, dict(self.writers))

    def arrow_type(self) -> pa.DataType:
        arrow_type: pa.DataType = self.decoder().arrow_type
        return arrow_type


async def value_schemas(md: Any, topic: str) -> ValueSchemas | None:
    """The topic's value schemas from the registry, or None when `<topic>-value` has no
    version (or the client has no registry operations)."""
    return await subject_schemas(md, f"{topic}-value")


async def key_schemas(md: Any, topic: str) -> ValueSchemas | None:
    """The topic's key schemas (`<topic>-key`), as `value_schemas`."""
    return await subject_schemas(md, f"{topic}-key")


async def subject_schemas(md: Any, subject: str) -> ValueSchemas | None:
    """The subject's latest version as reader and every id under it as writers, or None."""
    if not hasattr(md, "schema_version"):
        return None
    try:
        latest = await md.schema_version(subject, -1)
    except RegistryError as exc:
        if exc.error_code == SUBJECT_NOT_FOUND:
            return None
        raise
    sources: dict[int, SchemaSource] = {}
    ids = await md.schema_subject_ids(subject, deleted=True)
    writers = tuple([(i, await _source(md, i, latest.schema_type, sources, 0)) for i in sorted(ids)])
    reader = await _source(md, latest.id, latest.schema_type, sources, 0)
    return ValueSchemas(subject, latest.version, latest.schema_type, reader, writers)


async def _source(
    md: Any, schema_id: int, schema_type: str, known: dict[int, SchemaSource], depth: int
) -> SchemaSource:
    """The schema with this id, its references resolved (as spark.typed does)."""
    if schema_id in known:
        return known[schema_id]
    if depth > MAX_REFERENCE_DEPTH:
        raise ValueError(f"schema {schema_id}: references nest deeper than {MAX_REFERENCE_DEPTH}")
    stored = await md.schema_by_id(schema_id, "serialized" if schema_type == PROTOBUF else None)
    refs: dict[str, str] = {}
    for ref in stored.references:
        registered = await md.schema_version(ref.subject, ref.version)
        dep = await _source(md, registered.id, registered.schema_type, known, depth + 1)
        for name, text in dep.references:
            refs.setdefault(name, text)
        refs.setdefault(ref.name, dep.text)
    known[schema_id] = SchemaSource(stored.schema_type, stored.schema, tuple(refs.items()))
    return known[schema_id]


def split_dead_letters(data: pa.Table, decoders: Mapping[str, Any]) -> tuple[pa.Table, pa.Table]:
    """(the rows with each column of `decoders` (`value`, `key`) decoded, in the table's
    order; the dead letters, raw, in `DEAD_LETTER_SCHEMA`). A row is dead when any of its
    columns fails; the error is the value's, else the key's prefixed `key: `."""
    typed, error = data, pa.nulls(data.num_rows, pa.string())
    for column in sorted(decoders, reverse=True):  # "value" first: its error wins
        decoded = decoders[column].decode(data.column(column).combine_chunks())
        at = typed.schema.get_field_index(column)
        typed = typed.set_column(at, pa.field(column, decoded.values.type), decoded.values)
        errors = (
            decoded.errors if column == "value" else pc.binary_join_element_wise("key: ", decoded.errors, "")
        )
        error = pc.coalesce(error, errors)
    bad = error.is_valid()
    dead = data.filter(bad).select(["partition", "offset", "timestamp", "key", "value"])
    dead = dead.append_column("error", error.filter(bad)).cast(DEAD_LETTER_SCHEMA)
    return typed.filter(pc.invert(bad)), dead


def table_column_is_raw(table: Any, column: str) -> bool:
    """A table created before its topic had a value (key) schema keeps raw values (keys)."""
    from pyiceberg.types import BinaryType

    return isinstance(table.schema().find_field(column).field_type, BinaryType)
