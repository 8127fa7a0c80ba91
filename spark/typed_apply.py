"""Typed reads, the executors' side: a record batch's binary key/value columns replaced by
the decoded columns of the reader schemas, and the `_error` column added.

Decoding is `skiff.fileformat.values` (no metadata access: the task carries its schemas,
`spark.typed.TypedTask`). Decoders are kept per schema set in a small per-process cache
(Spark reuses its Python workers, so a query's tasks build each decoder once per worker).

With `onDecodeError=column`, `_error` is null on rows that decoded and otherwise says why,
prefixed by the side (`value: schema id 9 is not one of the subject's schemas`; both
sides' reasons joined by `; `), and the typed column is null there. With `fail`, the first
such row fails the task with one line naming topic, partition and offset.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from skiff.fileformat.values import RowDecoder, build_decoder
from skiff.spark.planner import SkiffSourceError
from skiff.spark.typed import SideSpec, TypedTask
from skiff.spark.typed_options import ERROR_COLUMN

MAX_CACHED_DECODERS = 16
_decoders: OrderedDict[SideSpec, RowDecoder] = OrderedDict()


def decoder_for(spec: SideSpec) -> RowDecoder:
    found = _decoders.get(spec)
    if found is not None:
        _decoders.move_to_end(spec)
        return found
    built = build_decoder(
        spec.schema_type, spec.reader, dict(spec.writers), protobuf_message=spec.protobuf_message
    )
    _decoders[spec] = built
    while len(_decoders) > MAX_CACHED_DECODERS:
        _decoders.popitem(last=False)
    return built


def apply_typed(batch: pa.RecordBatch, task: TypedTask, topic: str, partition: int) -> pa.RecordBatch:
    names = batch.schema.names
    columns = list(batch.columns)
    fields = list(batch.schema)
    errors: pa.Array | None = None
    for spec in task.sides:
        at = names.index(spec.side)
        decoded = decoder_for(spec).decode(columns[at])
        if decoded.error_count:
            if task.fail_on_error:
                row = int(np.flatnonzero(decoded.errors.is_valid().to_numpy(zero_copy_only=False))[0])
                offset = batch.column(names.index("offset"))[row].as_py()
                raise SkiffSourceError(
                    f"cannot decode the {spec.side} of {topic}-{partition} at offset {offset}:"
                    f" {decoded.errors[row].as_py()} (onDecodeError=fail)"
                )
            side_errors = pc.binary_join_element_wise(f"{spec.side}: ", decoded.errors, "")
            errors = side_errors if errors is None else _join(errors, side_errors)
        columns[at] = decoded.values
        fields[at] = pa.field(spec.side, decoded.values.type)
    if not task.fail_on_error:
        columns.append(errors if errors is not None else pa.nulls(batch.num_rows, pa.string()))
        fields.append(pa.field(ERROR_COLUMN, pa.string()))
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields))


def _join(first: pa.Array, second: pa.Array) -> pa.Array:
    both = pc.and_(first.is_valid(), second.is_valid())
    return pc.if_else(both, pc.binary_join_element_wise(first, second, "; "), pc.coalesce(first, second))
