"""The commit feed (metadata.commits.feed): a long poll answered by commits.

`wait_for_commits` answers at once when a watched watermark is already past the known one,
is woken by a commit (not by its timeout) otherwise, answers [] after its timeout, reports
deleted partitions, refuses too many partitions; over HTTP (uvicorn on a real port) and
across two metadata services on one PostgreSQL (pg_notify / LISTEN).
"""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest
from skiff.metadata.commits import feed as commit_feed
from skiff.metadata.errors import MetadataError
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService
from skiff.metadata.types import BatchSpec, ChunkSpec, FileSpec, PartitionWatermark
from skiff.metadata.wire.http_client import HttpMetadataClient

from tests.component.test_metadata_http import ServerThread
from tests.support.spies import partition_reads

WAIT_MS = 20_000  # long: a test that passes only by timing out would take this long and fail


def commit(svc: MetadataService, topic_id: uuid.UUID, partition: int, records: int = 3) -> None:
    spec = ChunkSpec(topic_id, partition, (BatchSpec(0, 100, records, records, 1),))
    (result,) = svc.commit_file(FileSpec(f"f/{uuid.uuid4().hex}", 100, 0, "a"), [spec])
    assert result.error_code == 0


@pytest.fixture
def sqlite_service(tmp_path: os.PathLike[str]) -> MetadataService:
    svc = MetadataService.from_url(f"sqlite:///{os.fspath(tmp_path)}/m.db")
    yield svc  # type: ignore[misc]
    svc.close()


async def test_answers_at_once_when_already_moved(sqlite_service: MetadataService) -> None:
    t = sqlite_service.create_topic("t", 2, {})
    commit(sqlite_service, t.topic_id, 1)
    md = LocalMetadataClient(sqlite_service)
    try:
        known = [PartitionWatermark(t.topic_id, 0, 0), PartitionWatermark(t.topic_id, 1, 0)]
        moved = await asyncio.wait_for(md.wait_for_commits(known, WAIT_MS), 10)
        assert moved == [PartitionWatermark(t.topic_id, 1, 3, last_stable_offset=3)]
    finally:
        await md.close()


async def test_woken_by_a_commit_not_by_the_timeout(sqlite_service: MetadataService) -> None:
    t = sqlite_service.create_topic("t", 2, {})
    md = LocalMetadataClient(sqlite_service)
    try:
        known = [PartitionWatermark(t.topic_id, 0, 0), PartitionWatermark(t.topic_id, 1, 0)]
        with partition_reads(sqlite_service) as reads:
            waiting = asyncio.ensure_future(md.wait_for_commits(known, WAIT_MS))
            # subscribed, and its first read of the states is done: only a wake answers now
            await asyncio.to_thread(reads.wait_for, 1)
        assert not waiting.done()
        assert sqlite_service.commit_feed.subscriptions == 1
        await asyncio.to_thread(commit, sqlite_service, t.topic_id, 0)
        moved = await asyncio.wait_for(waiting, 10)
        assert moved == [PartitionWatermark(t.topic_id, 0, 3, last_stable_offset=3)]
        assert sqlite_service.commit_feed.subscriptions == 0
    finally:
        await md.close()


async def test_timeout_answers_nothing_and_deleted_partitions_are_reported(
    sqlite_service: MetadataService,
) -> None:
    t = sqlite_service.create_topic("t", 1, {})
    md = LocalMetadataClient(sqlite_service)
    try:
        assert await md.wait_for_commits([PartitionWatermark(t.topic_id, 0, 0)], 100) == []
        sqlite_service.delete_topic("t")
        (gone,) = await md.wait_for_commits([PartitionWatermark(t.topic_id, 0, 0)], WAIT_MS)
        assert gone.error_code == 3
    finally:
        await md.close()


async def test_too_many_partitions_is_refused(sqlite_service: MetadataService) -> None:
    md = LocalMetadataClient(sqlite_service)
    try:
        known = [PartitionWatermark(uuid.uuid4(), 0, 0)] * (commit_feed.MAX_WATCHED_PARTITIONS + 1)
        with pytest.raises(MetadataError):
            await md.wait_for_commits(known, 100)
    finally:
        await md.close()


def test_notify_payload_round_trip_and_overflow() -> None:
    keys = [(uuid.uuid4(), p) for p in range(5)]
    assert commit_feed.parse_payload(commit_feed.notify_payload(keys)) == keys
    many = [(uuid.uuid4(), p) for p in range(1000)]
    assert commit_feed.notify_payload(many) == "*"
    assert commit_feed.parse_payload("*") is None
    assert commit_feed.parse_payload("garbage") is None


async def test_over_http(sqlite_service: MetadataService) -> None:
    t = sqlite_service.create_topic("t", 1, {})
    with ServerThread(sqlite_service) as url:
        md = HttpMetadataClient(url, timeout_s=5)
        try:
            # Longer than the HTTP timeout: the client allows for the wait.
            with partition_reads(sqlite_service) as reads:
                waiting = asyncio.ensure_future(
                    md.wait_for_commits([PartitionWatermark(t.topic_id, 0, 0)], 8_000)
                )
                await asyncio.to_thread(reads.wait_for, 1)  # the server's first read: it waits now
            assert not waiting.done()
            await asyncio.to_thread(commit, sqlite_service, t.topic_id, 0)
            assert await asyncio.wait_for(waiting, 10) == [
                PartitionWatermark(t.topic_id, 0, 3, last_stable_offset=3)
            ]
            assert await md.wait_for_commits([PartitionWatermark(t.topic_id, 0, 3)], 6_000) == []
        finally:
            await md.close()


async def test_commits_through_another_replica_wake_waiters(pg_url: str) -> None:
    """Two metadata services on one PostgreSQL: a commit through one wakes a wait on the other."""
    a = MetadataService.from_url(pg_url)
    b = MetadataService.from_url(pg_url, migrate=False)
    md = LocalMetadataClient(b)
    try:
        t = a.create_topic("t", 1, {})
        assert await md.wait_for_commits([PartitionWatermark(t.topic_id, 0, 0)], 100) == []
        assert b._listener is not None  # started by the first wait
        assert await asyncio.to_thread(b._listener.listening.wait, 20)
        with partition_reads(b) as reads:
            waiting = asyncio.ensure_future(
                md.wait_for_commits([PartitionWatermark(t.topic_id, 0, 0)], WAIT_MS)
            )
            await asyncio.to_thread(reads.wait_for, 1)  # b's first read: only a wake answers now
        assert not waiting.done()
        await asyncio.to_thread(commit, a, t.topic_id, 0)
        assert await asyncio.wait_for(waiting, 10) == [
            PartitionWatermark(t.topic_id, 0, 3, last_stable_offset=3)
        ]
    finally:
        await md.close()
        b.close()
        a.close()
