"""Broker-side schema validation (agent.schema_validation, agent.schema_cache): the topic configs,
the wire-format header and Protobuf message indexes, the three subject name strategies with the
record names of real parsed schemas, the verdict with Kafka's per-record errors, the cache's
TTL, refresh rate limit, single flight and bounds on an injected clock, and a real agent over
TCP refusing and accepting batches on a topic that validates (registry in the same process)."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from skiff.agent.config import AgentConfig
from skiff.agent.runtime import RunningAgent, start_agent
from skiff.agent.schema_cache import SchemaIdCache
from skiff.agent.schema_validation import (
    Lookups,
    Refusal,
    SchemaNames,
    SchemaRules,
    check_batch,
    message_indexes,
    names_of,
    record_heads,
    rules_from_configs,
    subject_name,
)
from skiff.fileformat.batch_header import BATCH_HEADER_SIZE, Compression
from skiff.fileformat.objectstore import open_async_store
from skiff.fileformat.record_build import build_batch
from skiff.fileformat.record_decode import Record
from skiff.metadata.configs import (
    RECORD_NAME_STRATEGY,
    TOPIC_NAME_STRATEGY,
    TOPIC_RECORD_NAME_STRATEGY,
    ConfigError,
    effective_configs,
    validate_configs,
)
from skiff.metadata.errors import MetadataError, MetadataUnavailable
from skiff.metadata.schemas.formats import parse_schema
from skiff.metadata.schemas.types import RegisteredSchema, SchemaReference, SchemaSpec, StoredSchema
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService

from tests.component.fake_metadata import FlakyMetadataClient
from tests.support.kafka_wire import produce_request, send_request

AVRO_ORDER = '{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"string"}]}'
JSON_ORDER = '{"title":"shop.Order","type":"object","properties":{"id":{"type":"string"}}}'
PROTO = """syntax = "proto3";
package shop;
message Order { string id = 1; message Line { int32 qty = 1; } }
message Refund { string id = 1; }
"""


def framed(schema_id: int, payload: bytes = b"payload", indexes: bytes = b"") -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + indexes + payload


def batch(values: list[bytes | None], keys: list[bytes | None] | None = None, **kw: Any) -> bytes:
    keys = keys if keys is not None else [b"k"] * len(values)
    return build_batch(
        [
            Record(i, 1_700_000_000_000, k, v, (("h", b"x"),))
            for i, (k, v) in enumerate(zip(keys, values, strict=True))
        ],
        **kw,
    )


# --- configs -------------------------------------------------------------------------------


def test_topic_configs_are_known_normalized_and_described() -> None:
    stored = validate_configs(
        {
            "confluent.value.schema.validation": "TRUE",
            "confluent.key.schema.validation": "false",
            "confluent.value.subject.name.strategy": "RecordNameStrategy",
            "confluent.key.subject.name.strategy": TOPIC_RECORD_NAME_STRATEGY,
        }
    )
    assert stored == {
        "confluent.value.schema.validation": "true",
        "confluent.key.schema.validation": "false",
        "confluent.value.subject.name.strategy": RECORD_NAME_STRATEGY,
        "confluent.key.subject.name.strategy": TOPIC_RECORD_NAME_STRATEGY,
    }
    described = effective_configs({})
    assert described["confluent.value.schema.validation"] == ("false", True)
    assert described["confluent.value.subject.name.strategy"] == (TOPIC_NAME_STRATEGY, True)
    for bad in (
        {"confluent.value.schema.validation": "yes"},
        {"confluent.key.subject.name.strategy": "io.confluent.Other"},
    ):
        with pytest.raises(ConfigError, match="Invalid value"):
            validate_configs(bad)
    assert rules_from_configs({}) is None
    assert rules_from_configs(stored) == SchemaRules(None, RECORD_NAME_STRATEGY)


# --- headers and strategies ------------------------------------------------------------------


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD, Compression.GZIP, Compression.LZ4])
def test_record_heads_of_keys_and_values_with_headers_and_nulls(codec: Compression) -> None:
    from skiff.agent.schema_validation import batch_records

    raw = batch([framed(1), None, b"x" * 300], keys=[None, b"key", b"k2"], compression=codec)
    data, pos, count = batch_records(raw)
    assert count == 3 and (pos == BATCH_HEADER_SIZE) == (codec == Compression.NONE)
    assert record_heads(data, pos, count, is_key=True) == [None, b"key", b"k2"]
    spans: list[tuple[int, int]] = []
    assert record_heads(data, pos, count, is_key=False, spans=spans) == [framed(1)[:5], None, b"xxxxx"]
    assert [data[a:b] for a, b in spans] == [framed(1), b"", b"x" * 300]


def test_the_fast_value_walk_agrees_with_the_general_one() -> None:
    """value_heads reads two-byte varints inline and infers offset delta sizes: check it on
    lengths and offsets around every varint size boundary, nulls, headers, timestamps apart."""
    from skiff.agent.schema_validation import batch_records, value_heads

    rng = random.Random(7)
    for n in (1, 5, 64, 65, 300, 8193):
        records = [
            Record(
                i,
                1_700_000_000_000 + rng.choice([0, 63, 64, 100_000]),
                rng.choice([None, b"", rng.randbytes(rng.choice([1, 70, 200]))]),
                rng.choice(
                    [None, b"", b"\x00\x01", rng.randbytes(rng.choice([3, 5, 63, 64, 8191, 8192, 20_000]))]
                ),
                rng.choice([(), (("a", b"x"),)]),
            )
            for i in range(n)
        ]
        for codec in (Compression.NONE, Compression.ZSTD):
            data, pos, count = batch_records(build_batch(records, compression=codec))
            expected = [None if r.value is None else r.value[:5] for r in records]
            assert value_heads(data, pos, count) == record_heads(data, pos, count, False) == expected


def test_message_indexes() -> None:
    assert message_indexes(b"\x00", 0, 1) == (0,)
    assert message_indexes(b"\x04\x02\x04", 0, 3) == (1, 2)  # zigzag: count 2, then 1, 2
    for bad in (b"", b"\x04\x02", b"\x03", b"\x80\x02" + b"\x00" * 64):
        with pytest.raises(ValueError):
            message_indexes(bad, 0, len(bad))


def test_subject_names_and_record_names_of_parsed_schemas() -> None:
    assert subject_name(TOPIC_NAME_STRATEGY, "orders", False, None) == "orders-value"
    assert subject_name(TOPIC_NAME_STRATEGY, "orders", True, None) == "orders-key"
    assert subject_name(RECORD_NAME_STRATEGY, "orders", False, "shop.Order") == "shop.Order"
    assert subject_name(TOPIC_RECORD_NAME_STRATEGY, "orders", True, "shop.Order") == "orders-shop.Order"
    avro = names_of("AVRO", parse_schema("AVRO", AVRO_ORDER).parsed)
    assert avro.record_name(()) == "shop.Order"
    assert names_of("AVRO", parse_schema("AVRO", '"string"').parsed).record_name(()) == "string"
    assert names_of("JSON", parse_schema("JSON", JSON_ORDER).parsed).record_name(()) == "shop.Order"
    with pytest.raises(ValueError, match="JSON schema has no title to name the subject by"):
        names_of("JSON", parse_schema("JSON", '{"type":"object"}').parsed).record_name(())
    proto = names_of("PROTOBUF", parse_schema("PROTOBUF", PROTO).parsed)
    assert proto.record_name((0,)) == "shop.Order"
    assert proto.record_name((0, 0)) == "shop.Order.Line"
    assert proto.record_name((1,)) == "shop.Refund"
    with pytest.raises(ValueError, match="name no message"):
        proto.record_name((2,))


# --- the verdict ----------------------------------------------------------------------------


def test_check_batch_by_topic_name() -> None:
    registered = {("orders-value", 7)}
    asked: list[tuple[str, int]] = []

    def known(subject: str, schema_id: int) -> bool:
        asked.append((subject, schema_id))
        return (subject, schema_id) in registered

    rules = SchemaRules(None, TOPIC_NAME_STRATEGY)
    ok = batch([framed(7), None, framed(7, b"other")])
    assert check_batch("orders", rules, ok, known, lambda _: None) is None
    assert asked == [("orders-value", 7)]  # one lookup per distinct header in a batch
    bad = batch([framed(7), b"plain json", b"\x00\x00", framed(8), None], compression=Compression.ZSTD)
    verdict = check_batch("orders", rules, bad, known, lambda _: None)
    assert isinstance(verdict, Refusal)
    assert verdict.record_errors == (
        (1, "value has no schema id: it starts with byte 112, not the magic byte 0"),
        (2, "value of 2 bytes has no schema id (the wire format starts with 5 bytes)"),
        (3, "value schema id 8 is not registered under subject 'orders-value'"),
    )
    assert verdict.message.startswith("One or more records have been rejected due to 3 record errors")
    assert "RecordError(batchIndex=1, message='value has no schema id" in verdict.message


def test_check_batch_keys_and_lookups() -> None:
    rules = SchemaRules(TOPIC_NAME_STRATEGY, None)
    raw = batch([b"plain"], keys=[framed(3)])
    assert check_batch("t", rules, raw, lambda s, i: None, lambda _: None) == Lookups(
        frozenset({"t-key"}), frozenset()
    )
    assert check_batch("t", rules, raw, lambda s, i: s == "t-key", lambda _: None) is None
    refused = check_batch("t", rules, batch([b"v"], keys=[b"plain-key"]), lambda s, i: True, lambda _: None)
    assert isinstance(refused, Refusal) and refused.record_errors[0][1].startswith("key has no schema id")


def test_check_batch_by_record_name() -> None:
    proto = names_of("PROTOBUF", parse_schema("PROTOBUF", PROTO).parsed)
    names = {5: proto, 6: SchemaNames("", error="no schema has this id in the registry")}
    registered = {("shop.Order", 5), ("shop.Order.Line", 5)}
    rules = SchemaRules(None, RECORD_NAME_STRATEGY)
    ok = batch([framed(5, indexes=b"\x00"), framed(5, indexes=b"\x04\x00\x00")])
    assert check_batch("t", rules, ok, lambda s, i: (s, i) in registered, names.get) is None
    bad = batch([framed(5, indexes=b"\x02\x02"), framed(6), framed(9), framed(5, indexes=b"\x05")])
    verdict = check_batch("t", rules, bad, lambda s, i: (s, i) in registered, names.get)
    assert verdict == Lookups(frozenset(), frozenset({9}))  # id 9 must be fetched first
    names[9] = names_of("AVRO", parse_schema("AVRO", AVRO_ORDER).parsed)
    verdict = check_batch("t", rules, bad, lambda s, i: (s, i) in registered, names.get)
    assert isinstance(verdict, Refusal)
    assert [m for _, m in verdict.record_errors] == [
        "value schema id 5 is not registered under subject 'shop.Refund'",
        "value schema id 6: no schema has this id in the registry",
        "value schema id 9 is not registered under subject 'shop.Order'",
        "value with schema id 5 has malformed Protobuf message indexes (message index count -3)",
    ]
    by_topic_record = SchemaRules(None, TOPIC_RECORD_NAME_STRATEGY)
    avro_only = batch([framed(9)])
    assert check_batch("t", by_topic_record, avro_only, lambda s, i: s == "t-shop.Order", names.get) is None


# --- the cache --------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


class FakeRegistry:
    """The registry's lookups over dicts, counting calls; `down` makes every call fail."""

    def __init__(self) -> None:
        self.subjects: dict[str, list[int]] = {}
        self.schemas: dict[int, StoredSchema] = {}
        self.versions: dict[tuple[str, int], RegisteredSchema] = {}
        self.calls: list[tuple[str, object]] = []
        self.down = False
        self.gate: asyncio.Event | None = None

    async def _enter(self, what: str, arg: object) -> None:
        self.calls.append((what, arg))
        if self.gate is not None:
            await self.gate.wait()
        if self.down:
            raise MetadataUnavailable("connection refused (test)")

    async def schema_subject_ids(self, subject: str) -> list[int]:
        await self._enter("subject", subject)
        return list(self.subjects.get(subject, []))

    async def schema_by_id(self, schema_id: int, fmt: str | None = None) -> StoredSchema:
        await self._enter("id", schema_id)
        if schema_id not in self.schemas:
            raise MetadataError(40403, "Schema not found")
        return self.schemas[schema_id]

    async def schema_version(self, subject: str, version: int, deleted: bool = False) -> RegisteredSchema:
        await self._enter("version", (subject, version))
        return self.versions[(subject, version)]


def _cache(registry: FakeRegistry, clock: FakeClock, **kw: Any) -> SchemaIdCache:
    return SchemaIdCache(registry, monotonic=clock, **kw)  # type: ignore[arg-type]


async def test_cache_ttl_and_the_refresh_rate_limit() -> None:
    registry, clock = FakeRegistry(), FakeClock()
    registry.subjects["t-value"] = [1]
    cache = _cache(registry, clock)
    assert cache.registered("t-value", 1) is None  # nothing cached yet
    assert await cache.fetch(Lookups(frozenset({"t-value"}), frozenset())) is None
    assert cache.registered("t-value", 1) is True
    assert cache.registered("t-value", 2) is False  # refreshed less than a second ago
    clock.now_s += 1.5
    assert cache.registered("t-value", 1) is True  # known ids need no refresh within the TTL
    assert cache.registered("t-value", 2) is None  # an unknown id may refresh once a second
    registry.subjects["t-value"] = [1, 2]
    await cache.fetch(Lookups(frozenset({"t-value"}), frozenset()))
    assert cache.registered("t-value", 2) is True
    registry.subjects["t-value"] = [2]  # version 1 deleted
    clock.now_s += 30.0
    assert cache.registered("t-value", 1) is None  # the TTL ran out: refreshed
    await cache.fetch(Lookups(frozenset({"t-value"}), frozenset()))
    assert cache.registered("t-value", 1) is False
    assert [c for c in registry.calls] == [("subject", "t-value")] * 3
    assert cache.hits["subject"] == 5 and cache.misses["subject"] == 3


async def test_cache_single_flight_bounds_and_failures() -> None:
    registry, clock = FakeRegistry(), FakeClock()
    cache = _cache(registry, clock, max_subjects=2, max_schemas=1)
    registry.gate = asyncio.Event()
    one = Lookups(frozenset({"a"}), frozenset())
    waiting = [asyncio.ensure_future(cache.fetch(one)) for _ in range(5)]
    await asyncio.sleep(0)
    registry.gate.set()
    assert await asyncio.gather(*waiting) == [None] * 5
    assert registry.calls == [("subject", "a")]  # five requests, one call
    registry.gate = None
    await cache.fetch(Lookups(frozenset({"b", "c"}), frozenset({1, 2})))
    assert cache.registered("a", 1) is None  # evicted: least recently used of three
    assert cache.names(1) is None and cache.names(2) is not None  # one schema kept
    assert cache.names(2).error == "no schema has this id in the registry"  # type: ignore[union-attr]
    clock.now_s += 1.0
    assert cache.names(2) is None  # "no such id" is kept a second only
    registry.down = True
    failure = await cache.fetch(Lookups(frozenset({"d"}), frozenset()))
    assert failure == "metadata service unavailable: connection refused (test)"
    assert cache.fetch_failures == 1 and cache.fetches == 6


async def test_record_names_resolve_references() -> None:
    registry, clock = FakeRegistry(), FakeClock()
    line = '{"type":"record","name":"Line","namespace":"shop","fields":[{"name":"qty","type":"int"}]}'
    order = (
        '{"type":"record","name":"Order","namespace":"shop",'
        '"fields":[{"name":"lines","type":{"type":"array","items":"shop.Line"}}]}'
    )
    ref = SchemaReference("shop.Line", "line-value", 1)
    registry.schemas[4] = StoredSchema(4, "AVRO", order, (ref,))
    registry.versions[("line-value", 1)] = RegisteredSchema("line-value", 1, 3, "AVRO", line)
    cache = _cache(registry, clock)
    await cache.fetch(Lookups(frozenset(), frozenset({4})))
    assert cache.names(4) == SchemaNames("AVRO", name="shop.Order")
    assert ("version", ("line-value", 1)) in registry.calls


# --- through a real agent ----------------------------------------------------------------------


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[tuple[RunningAgent, FlakyMetadataClient]]:
    service = MetadataService.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    md = FlakyMetadataClient(LocalMetadataClient(service, owns_service=True))
    store = open_async_store(f"memory://schemas-{uuid.uuid4().hex}")
    cfg = AgentConfig.from_env({}, agent_id="a1", host="127.0.0.1", port=0, flush_interval_ms=20)
    running = await start_agent(cfg, md, store)  # type: ignore[arg-type]
    await md.create_topic("orders", 1, {"confluent.value.schema.validation": "true"})
    await md.create_topic("plain", 1, {})
    try:
        yield running, md
    finally:
        await running.close()


def _answer(bootstrap: str, topic: str, raw: bytes) -> Any:
    return send_request(bootstrap, produce_request(topic, {0: raw}), timeout_s=30).parse()


async def test_an_agent_refuses_records_without_a_registered_id(agent: Any) -> None:
    running, md = agent
    bootstrap = f"127.0.0.1:{running.port}"
    spec = SchemaSpec(AVRO_ORDER, "AVRO")
    schema_id = (await md.schema_register("orders-value", spec)).id
    other_id = (await md.schema_register("elsewhere-value", SchemaSpec('"string"', "AVRO"))).id
    answer = await asyncio.to_thread(_answer, bootstrap, "orders", batch([b"plain", framed(schema_id)]))
    part = answer.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.invalid_record
    assert [(int(e.batch_index), e.batch_index_error_message) for e in part.record_errors] == [
        (0, "value has no schema id: it starts with byte 112, not the magic byte 0")
    ]
    assert "1 record errors" in part.error_message
    wrong = await asyncio.to_thread(_answer, bootstrap, "orders", batch([framed(other_id)]))
    assert (
        "not registered under subject 'orders-value'"
        in wrong.responses[0].partition_responses[0].error_message
    )
    ok = await asyncio.to_thread(_answer, bootstrap, "orders", batch([framed(schema_id), None]))
    assert ok.responses[0].partition_responses[0].error_code == ErrorCode.none
    plain = await asyncio.to_thread(_answer, bootstrap, "plain", batch([b"anything"]))
    assert plain.responses[0].partition_responses[0].error_code == ErrorCode.none
    # the registry out of reach: a retriable refusal that says why, never a silent accept
    md.down = True
    running.context.schemas._subjects.clear()
    down = await asyncio.to_thread(_answer, bootstrap, "orders", batch([framed(schema_id)]))
    part = down.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.request_timed_out
    assert part.error_message.startswith("schema registry unavailable, records not validated:")
    schemas = running.context.schemas
    assert schemas.refused_records == {"orders": 2}  # skiff_schema_validation_refused_records_total
    assert schemas.fetch_failures == 1 and schemas.hits["subject"] >= 2 and schemas.misses["subject"] >= 2
