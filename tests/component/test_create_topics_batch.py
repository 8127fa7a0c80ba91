"""`create_topics` (many topics in one metadata call and one transaction) answers each topic exactly
as `create_topic` does, on SQLite and PostgreSQL, through the in-process and the HTTP client."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest
from skiff.metadata.errors import INVALID_REQUEST, MetadataError
from skiff.metadata.server.app import create_app
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService
from skiff.metadata.topic_admin import MAX_PARTITIONS_PER_TOPIC
from skiff.metadata.types import (
    MAX_PARTITIONS_PER_CREATE_BATCH,
    MAX_TOPICS_PER_CREATE_BATCH,
    NewTopic,
    PartitionKey,
    TopicCreation,
    create_batches,
)
from skiff.metadata.wire.http_client import HttpMetadataClient
from skiff.metadata.wire.operations import MetadataClient

# Every way a topic can fail, between topics that succeed.
CASES = [
    NewTopic("ok-1", 3, {}),
    NewTopic("exists", 1, {}),  # created before
    NewTopic("bad-config", 1, {"retention.ms": "soon"}),
    NewTopic("unknown-config", 1, {"no.such.config": "1"}),
    NewTopic("bad/name", 1, {}),
    NewTopic("zero-partitions", 0, {}),
    NewTopic("too-many-partitions", MAX_PARTITIONS_PER_TOPIC + 1, {}),
    NewTopic("ok-2", 2, {"cleanup.policy": "compact", "retention.ms": "1000"}),
    NewTopic("twice", 1, {}),
    NewTopic("twice", 2, {}),  # the second copy of a name finds it taken
]


@pytest.fixture
def svc(db_url: str) -> Iterator[MetadataService]:
    s = MetadataService.from_url(db_url)
    s.create_topic("exists", 1, {})
    yield s
    s.close()


def _client(svc: MetadataService, kind: str) -> MetadataClient:
    if kind == "local":
        return LocalMetadataClient(svc)
    return HttpMetadataClient("http://x", transport=httpx.ASGITransport(app=create_app(svc)))


def _singly(svc: MetadataService, new: list[NewTopic]) -> list[TopicCreation]:
    out = []
    for t in new:
        try:
            out.append(TopicCreation(t.name, svc.create_topic(t.name, t.partition_count, t.configs)))
        except MetadataError as e:
            out.append(TopicCreation(t.name, None, e.error_code, e.message))
    return out


def _comparable(results: list[TopicCreation]) -> list[tuple[object, ...]]:
    return [
        (
            r.name,
            r.error_code,
            r.message,
            None if r.topic is None else (r.topic.partition_count, r.topic.configs),
        )
        for r in results
    ]


@pytest.mark.parametrize("kind", ["local", "http"])
def test_a_batch_answers_each_topic_as_single_creates_do(svc: MetadataService, kind: str) -> None:
    singly = _singly(svc, CASES)
    for r in singly:
        if r.topic is not None:
            svc.delete_topic(r.name)

    async def go() -> list[TopicCreation]:
        md = _client(svc, kind)
        try:
            return await md.create_topics(CASES)
        finally:
            await md.close()

    batch = asyncio.run(go())
    assert _comparable(batch) == _comparable(singly)
    assert [r.error_code == 0 for r in batch] == [
        True, False, False, False, False, False, False, True, True, False,
    ]  # fmt: skip
    created = svc.describe_topics(["ok-1", "ok-2", "twice"])
    assert {n: (t.topic_id, t.partition_count) for n, t in created.items()} == {
        r.name: (r.topic.topic_id, r.topic.partition_count) for r in batch if r.topic is not None
    }
    states = svc.partition_states([PartitionKey(created["ok-1"].topic_id, p) for p in range(3)])
    assert [(s.log_start_offset, s.high_watermark) for s in states] == [(0, 0)] * 3


def test_a_batch_over_the_bound_is_refused_whole(svc: MetadataService) -> None:
    new = [NewTopic(f"n{i}", 1, {}) for i in range(MAX_TOPICS_PER_CREATE_BATCH + 1)]
    with pytest.raises(MetadataError) as e:
        svc.create_topics(new)
    assert e.value.error_code == INVALID_REQUEST
    assert svc.describe_topics(["n0"]) == {}


def test_batches_are_cut_by_count_partitions_and_bytes() -> None:
    many = [NewTopic(f"t{i}", 1, {}) for i in range(2 * MAX_TOPICS_PER_CREATE_BATCH + 1)]
    assert [len(b) for b in create_batches(many)] == [MAX_TOPICS_PER_CREATE_BATCH] * 2 + [1]
    wide = [NewTopic(f"w{i}", MAX_PARTITIONS_PER_CREATE_BATCH // 2 + 1, {}) for i in range(3)]
    assert [len(b) for b in create_batches(wide)] == [1, 1, 1]
    big = [NewTopic(f"b{i}", 1, {"x": "v" * 400_000}) for i in range(5)]
    assert [len(b) for b in create_batches(big)] == [2, 2, 1]
    assert [t for b in create_batches(many) for t in b] == many
