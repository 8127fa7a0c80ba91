"""The metadata operations behind DescribeLogDirs and DescribeProducers (metadata.log_info),
on SQLite and PostgreSQL, through the in-process and the HTTP client."""

from __future__ import annotations

import uuid

import pytest
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.types import ActiveProducer, PartitionKey

from tests.component.test_metadata_service import B, commit

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_partition_sizes_are_the_bytes_of_their_chunks(md: LocalMetadataClient) -> None:
    t = await md.create_topic("sizes", 3, {})
    tid = t.topic_id
    await commit(md, [(tid, 0, [B(size=70), B(size=90)]), (tid, 2, [B(size=100)])])
    await commit(md, [(tid, 0, [B(size=80)])])
    keys = [PartitionKey(tid, p) for p in (2, 0, 1, 7)] + [PartitionKey(uuid.uuid4(), 0)]
    assert await md.partition_sizes(keys) == [100, 240, 0, 0, 0]
    assert await md.partition_sizes([]) == []


async def test_describe_producers_reports_each_producers_last_batch(md: LocalMetadataClient) -> None:
    t = await md.create_topic("producers", 2, {})
    other = await md.create_topic("elsewhere", 1, {})
    tid = t.topic_id
    await commit(md, [(tid, 0, [B(n=3, pid=7, epoch=1, seq=0)]), (other.topic_id, 0, [B(pid=8, seq=0)])])
    await commit(md, [(tid, 0, [B(n=2, pid=7, epoch=1, seq=3), B(pid=9, epoch=0, seq=0)])])
    got = await md.describe_producers([PartitionKey(tid, 0), PartitionKey(tid, 1)])
    assert [
        (p.partition, p.producer_id, p.producer_epoch, p.last_sequence, p.txn_start_offset) for p in got
    ] == [
        (0, 7, 1, 4, -1),
        (0, 9, 0, 0, -1),
    ]
    assert all(isinstance(p, ActiveProducer) and p.topic_id == tid and p.last_commit_ms > 0 for p in got)
    assert await md.describe_producers([PartitionKey(tid, 1)]) == []
