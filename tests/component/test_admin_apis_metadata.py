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


# --- __consumer_offsets: committed offsets as a log (metadata.groups.offsets_log) -------------------------


def test_group_partitions_are_kafkas() -> None:
    from skiff.metadata.groups.offsets_log import java_hash, partition_for

    # the values Java's String.hashCode gives (31*h+c wrapping at 32 bits)
    assert java_hash("my-group") == -1906497762 and partition_for("my-group") == 12
    assert java_hash("") == 0 and java_hash("polygenelubricants") == -(2**31)
    assert partition_for("polygenelubricants") == 0  # Utils.abs(Integer.MIN_VALUE) is 0
    assert java_hash("\U0001f600") == 1772899  # over UTF-16 code units


async def test_commits_are_read_back_in_commit_order_with_no_gap_missed(md: LocalMetadataClient) -> None:
    from skiff.metadata.groups.offsets_log import partition_for
    from skiff.metadata.types import GroupOffset, OffsetsLogQuery

    await md.create_topic("orders", 2, {})
    group = "log-reader"
    p = partition_for(group)
    (start,) = await md.read_offsets_log([OffsetsLogQuery(p)])
    base = start.high_watermark
    await md.commit_offsets(group, [GroupOffset("orders", 0, 5, "m"), GroupOffset("orders", 1, 7)])
    await md.commit_offsets(group, [GroupOffset("orders", 0, 9, None, 3)])  # moves (orders, 0)
    (page,) = await md.read_offsets_log([OffsetsLogQuery(p, base, 100)])
    assert page.high_watermark == base + 3
    got = [(e.log_offset - base, e.group_id, e.topic, e.partition, e.committed_offset) for e in page.entries]
    assert got == [(1, group, "orders", 1, 7), (2, group, "orders", 0, 9)]  # offset 0 was overwritten
    assert page.entries[1].leader_epoch == 3 and page.entries[0].metadata is None
    # resuming after what was read sees only what comes next
    await md.commit_offsets(group, [GroupOffset("orders", 1, 8)])
    (more,) = await md.read_offsets_log([OffsetsLogQuery(p, page.high_watermark, 100)])
    assert [(e.log_offset - base, e.committed_offset) for e in more.entries] == [(3, 8)]
    (at,) = await md.read_offsets_log([OffsetsLogQuery(p, timestamp=0)])
    assert at.offset_for_timestamp >= 0 and at.entries == ()
    (none,) = await md.read_offsets_log([OffsetsLogQuery(p, timestamp=2**62)])
    assert none.offset_for_timestamp == -1
