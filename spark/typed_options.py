"""The typed-read options: which of key and value to decode, through which subject and
version of the schema registry, and what a record that does not decode does.

- `valueFormat` / `keyFormat`: `raw` (the default: binary, as Spark's Kafka source), `avro`,
  `json` or `protobuf` (case-insensitive): the column becomes the reader schema's type
  (a struct for a record, an object, a message);
- `valueSubject` / `keySubject`: the subject holding the schemas (default Confluent's
  TopicNameStrategy: `<topic>-value` / `<topic>-key`, each topic its own);
- `valueSchemaVersion` / `keySchemaVersion`: the reader schema's version, a number
  (default `latest`, the subject's latest version when the query is planned);
- `valueProtobufMessage` / `keyProtobufMessage`: the reader message's full name
  (`package.Message`; default the first message of the reader schema's file);
- `onDecodeError`: `column` (the default: a `_error` string column says why, and the typed
  column is null) or `fail` (the task fails naming topic, partition and offset).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from skiff.fileformat.values import AVRO, JSON, PROTOBUF

FORMATS = {"avro": AVRO, "json": JSON, "protobuf": PROTOBUF}
ERROR_COLUMN = "_error"
SIDES = ("key", "value")


class TypedOptionError(ValueError):
    """A typed-read option is malformed (the message names it)."""


@dataclass(frozen=True)
class SideOptions:
    """How to decode one of key and value."""

    side: str  # "key" or "value"
    schema_type: str  # AVRO, JSON, PROTOBUF
    subject: str | None  # None: <topic>-<side>
    version: int  # -1: latest
    protobuf_message: str | None = None

    def subject_of(self, topic: str) -> str:
        return self.subject or f"{topic}-{self.side}"


@dataclass(frozen=True)
class TypedOptions:
    key: SideOptions | None
    value: SideOptions | None
    fail_on_error: bool

    @property
    def sides(self) -> tuple[SideOptions, ...]:
        return tuple(s for s in (self.key, self.value) if s is not None)


def _side(opts: Mapping[str, str], side: str) -> SideOptions | None:
    raw = opts.get(f"{side}format", "raw").strip().lower()
    if raw == "raw":
        for extra, name in (
            ("subject", "Subject"),
            ("schemaversion", "SchemaVersion"),
            ("protobufmessage", "ProtobufMessage"),
        ):
            if opts.get(f"{side}{extra}"):
                raise TypedOptionError(f"option {side}{name} needs {side}Format avro, json or protobuf")
        return None
    if raw not in FORMATS:
        raise TypedOptionError(f"option {side}Format must be raw, avro, json or protobuf, got {raw!r}")
    version_text = opts.get(f"{side}schemaversion", "latest").strip().lower()
    if version_text == "latest":
        version = -1
    else:
        try:
            version = int(version_text)
        except ValueError:
            version = 0
        if version < 1:
            raise TypedOptionError(
                f"option {side}SchemaVersion must be latest or a version number, got {version_text!r}"
            )
    message = opts.get(f"{side}protobufmessage") or None
    if message and raw != "protobuf":
        raise TypedOptionError(f"option {side}ProtobufMessage needs {side}Format protobuf")
    return SideOptions(side, FORMATS[raw], opts.get(f"{side}subject") or None, version, message)


def parse_typed(opts: Mapping[str, str]) -> TypedOptions | None:
    """The typed-read options from lower-cased keys; None when key and value are both raw."""
    key, value = _side(opts, "key"), _side(opts, "value")
    on_error = opts.get("ondecodeerror", "column").strip().lower()
    if on_error not in ("column", "fail"):
        raise TypedOptionError(f"option onDecodeError must be column or fail, got {on_error!r}")
    if key is None and value is None:
        return None
    return TypedOptions(key, value, on_error == "fail")
