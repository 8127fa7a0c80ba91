"""The row loop every format without a vectorised path shares, and the assembly of the
decoded Python values into one Arrow array.

`RowDecoder.decode` frames the batch (`wire.frame_batch`), then per payload looks its
schema id up among the writers and calls the format's `decode_body` on the body bytes: a
Python value (a dict for a record/object/message) or an exception, which becomes that row's
error. `assemble` converts the values with one `pa.array` call (C++ walking the Python
values); if that refuses (a value that does not fit the reader type: a JSON string where
the schema says integer), each row is converted alone to find the ones that do not fit,
which become error rows too.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from skiff.fileformat.values import wire
from skiff.fileformat.values.model import Decoded, error_text

NOT_FRAMED = "not in Confluent's wire format (no magic byte 0 and schema id)"
_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError)


def unknown_id(schema_id: int) -> str:
    return f"schema id {schema_id} is not one of the subject's schemas"


class RowDecoder(ABC):
    """A format's decoder: `arrow_type`, and per writer id what `decode_body` needs (or
    the reason that writer cannot be used, a string)."""

    arrow_type: pa.DataType
    protobuf_framing = False

    def __init__(self, writers: Mapping[int, object]) -> None:
        self.writers = dict(writers)

    @abstractmethod
    def decode_body(self, writer: Any, body: bytes, indexes: tuple[int, ...] | None) -> Any:
        """The body as a Python value of the reader type; raises when it does not decode."""

    def decode(self, payloads: pa.Array) -> Decoded:
        frames = wire.frame_batch(payloads, protobuf=self.protobuf_framing)
        n = len(payloads)
        rows: list[Any] = [None] * n
        errors: list[str | None] = [None] * n
        self.decode_rows(frames, rows, errors)
        return assemble(rows, errors, self.arrow_type)

    def decode_rows(self, frames: wire.Frames, rows: list[Any], errors: list[str | None]) -> None:
        data = frames.data
        starts, ends = frames.body_start.tolist(), frames.body_end.tolist()
        indexes = frames.message_indexes or [None] * len(starts)
        for i, schema_id in enumerate(frames.schema_id.tolist()):
            if schema_id == wire.NULL:
                continue
            if schema_id == wire.NOT_FRAMED:
                errors[i] = NOT_FRAMED
                continue
            writer = self.writers.get(schema_id)
            if writer is None:
                errors[i] = unknown_id(schema_id)
                continue
            if isinstance(writer, str):
                errors[i] = writer
                continue
            try:
                rows[i] = self.decode_body(writer, data[starts[i] : ends[i]], indexes[i])
            except Exception as exc:  # boundary: the decoders raise many types on hostile bytes; one payload never fails the batch
                errors[i] = error_text(f"schema id {schema_id}", f"{type(exc).__name__}: {exc}")


def assemble(rows: list[Any], errors: list[str | None], arrow_type: pa.DataType) -> Decoded:
    try:
        values = pa.array(rows, type=arrow_type)
    except _ARROW_ERRORS:
        for i, row in enumerate(rows):
            if row is None:
                continue
            try:
                pa.array([row], type=arrow_type)
            except _ARROW_ERRORS as exc:
                rows[i] = None
                errors[i] = error_text("does not fit the reader schema", exc)
        values = pa.array(rows, type=arrow_type)
    return Decoded(values, pa.array(errors, type=pa.string()))
