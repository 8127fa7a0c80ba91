"""The typed-read options (spark.typed_options through spark.options.parse_options): formats,
subjects (TopicNameStrategy by default), versions, the Protobuf message, onDecodeError, and the
messages naming a malformed option. No Spark session."""

from __future__ import annotations

import pytest
from skiff.spark.options import SkiffOptionError, parse_options
from skiff.spark.typed_options import SideOptions, TypedOptions

BASE = {"metadata.url": "http://127.0.0.1:1", "subscribe": "orders"}


def test_raw_by_default() -> None:
    assert parse_options(BASE).typed is None
    assert parse_options({**BASE, "valueFormat": "RAW"}).typed is None


def test_sides_subjects_versions() -> None:
    opts = parse_options(
        {
            **BASE,
            "valueFormat": "Avro",
            "keyFormat": "protobuf",
            "keySubject": "keys",
            "keySchemaVersion": "3",
            "keyProtobufMessage": "t.Key",
            "onDecodeError": "FAIL",
        }
    )
    assert opts.typed == TypedOptions(
        key=SideOptions("key", "PROTOBUF", "keys", 3, "t.Key"),
        value=SideOptions("value", "AVRO", None, -1),
        fail_on_error=True,
    )
    assert opts.typed.value is not None and opts.typed.value.subject_of("orders") == "orders-value"
    assert opts.typed.key is not None and opts.typed.key.subject_of("orders") == "keys"


def test_schema_time_parse_accepts_batch_and_stream_options() -> None:
    # schema() parses before Spark says batch or stream: neither's own checks apply
    assert parse_options({**BASE, "startingOffsets": "latest", "valueFormat": "json"}, streaming=None).typed


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"valueFormat": "xml"}, "option valueFormat must be raw, avro, json or protobuf, got 'xml'"),
        (
            {"valueFormat": "avro", "valueSchemaVersion": "0"},
            "option valueSchemaVersion must be latest or a version number",
        ),
        ({"valueFormat": "avro", "valueSchemaVersion": "two"}, "option valueSchemaVersion must be latest"),
        ({"valueSubject": "x"}, "option valueSubject needs valueFormat avro, json or protobuf"),
        ({"keySchemaVersion": "1"}, "option keySchemaVersion needs keyFormat"),
        (
            {"valueFormat": "avro", "valueProtobufMessage": "a.B"},
            "option valueProtobufMessage needs valueFormat protobuf",
        ),
        ({"valueFormat": "avro", "onDecodeError": "skip"}, "option onDecodeError must be column or fail"),
    ],
)
def test_malformed(options: dict[str, str], message: str) -> None:
    with pytest.raises(SkiffOptionError, match=message):
        parse_options({**BASE, **options})
