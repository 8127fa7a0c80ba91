"""`agent.transactions.coordinator.TxnCoordinator` over a real metadata service (SQLite and
PostgreSQL) and a memory bucket, with injected clocks: the markers it writes are Kafka's
control batches and their commit completes the transaction and moves the last stable
offset; its scan finishes prepared transactions of a dead coordinator (only the ones it
coordinates) and aborts timed-out ones."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from skiff.agent import routing
from skiff.agent.agent_registry import LiveAgents
from skiff.agent.produce_buffer import CommittedFile
from skiff.agent.transactions.coordinator import TxnCoordinator, txn_key
from skiff.fileformat.batch_header import parse_header
from skiff.fileformat.objectstore import open_async_store
from skiff.fileformat.record_build import build_batch
from skiff.fileformat.record_decode import ControlRecordType, Record, iter_records, parse_control_record
from skiff.fileformat.segment import ChunkInput, build_segment
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService
from skiff.metadata.transactions.state import TxnState
from skiff.metadata.types import AgentInfo, BatchSpec, ChunkSpec, FetchQuery, FileSpec, Topic

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Clock:
    def __init__(self) -> None:
        self.now = 10_000_000

    def __call__(self) -> int:
        return self.now


class Env:
    def __init__(self, md: LocalMetadataClient, clock: Clock, agents: LiveAgents) -> None:
        self.md = md
        self.clock = clock
        self.agents = agents
        self.store = open_async_store("memory://txn-coordinator-test")
        self.committed: list[CommittedFile] = []
        self.coordinator = TxnCoordinator(
            metadata=md,
            store=self.store,  # type: ignore[arg-type]
            agents=agents,
            agent_id="a",
            wall_ms=clock,
            on_committed=self.committed.append,
            redrive_after_ms=5_000,
        )

    async def topic(self) -> Topic:
        return (await self.md.describe_topics(["t"]))["t"]

    async def produce(
        self, topic: Topic, partition: int, pid: int, epoch: int, seq: int, txn: str = "tx"
    ) -> None:
        """One transactional batch of one record of transactional id `txn`, committed as an
        agent would (and stored: the commit checks it against `txn`'s transaction)."""
        batch = build_batch(
            [Record(0, self.clock(), b"k", b"v", ())],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            is_transactional=True,
        )
        data, (pl,) = build_segment([ChunkInput(topic.topic_id, partition, [batch], 1, 1)])
        key = f"segments/data-{pid}-{seq}-{partition}.seg"
        await self.store.put(key, data)
        at = pl.batch_positions[0]
        spec = BatchSpec(at, len(batch), 1, 1, self.clock(), pid, epoch, seq, 0, True, -1, txn)
        (result,) = await self.md.commit_file(
            FileSpec(key, len(data)), [ChunkSpec(topic.topic_id, partition, (spec,))]
        )
        assert result.batches[0].error_code == 0, result

    async def committed_view(
        self, topic: Topic, partition: int
    ) -> tuple[int, int, tuple[tuple[int, int], ...]]:
        """(high watermark, last stable offset, aborted transactions) as read_committed sees them."""
        (info,) = await self.md.find_chunks([FetchQuery(topic.topic_id, partition, 0, 1 << 20, 1)])
        return info.high_watermark, info.last_stable_offset, info.aborted


@pytest.fixture
async def env(db_url: str) -> AsyncIterator[Env]:
    clock = Clock()
    svc = MetadataService.from_url(db_url, clock=clock)
    svc.create_topic("t", 2, {})
    md = LocalMetadataClient(svc, owns_service=True)
    agents = LiveAgents(AgentInfo("a", "127.0.0.1", 9092), wall_ms=clock)
    yield Env(md, clock, agents)
    await md.close()


async def test_abort_markers_are_control_batches_and_complete_the_transaction(env: Env) -> None:
    md, topic = env.md, await env.topic()
    init = await md.init_txn_producer_id("tx", 60_000)
    pid = init.producer_id
    parts = [(str(topic.topic_id), 0), (str(topic.topic_id), 1)]
    assert set((await md.add_partitions_to_txn("tx", pid, 0, parts)).values()) == {0}
    await env.produce(topic, 0, pid, 0, 0)
    assert await env.committed_view(topic, 0) == (1, 0, ())  # the open transaction holds the LSO
    end = await md.end_txn("tx", pid, 0, False)
    assert end.ok and end.record is not None
    assert await env.coordinator.finish(end.record)
    # partition 0: data + ABORT marker, stable, the aborted range listed; partition 1: a marker only
    assert await env.committed_view(topic, 0) == (2, 2, ((pid, 0),))
    assert await env.committed_view(topic, 1) == (1, 1, ())
    described = (await md.describe_txns(["tx"]))["tx"]
    assert described is not None and described.state is TxnState.COMPLETE_ABORT
    (file,) = env.committed
    assert {(c.topic_id, c.partition) for c in file.chunks} == {(topic.topic_id, 0), (topic.topic_id, 1)}
    assert all(r.locations for r in file.results)  # the chunk cache learns them
    for chunk in file.chunks:
        (spec,) = chunk.batches
        assert spec.is_transactional and spec.control_type == 0
        header = parse_header(file.data, spec.byte_offset)
        assert header.is_control and header.is_transactional
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (pid, 0, -1)
        (record,) = list(iter_records(file.data, spec.byte_offset))
        assert parse_control_record(record) == (ControlRecordType.ABORT, 0)
    # a second finish of the same prepared record (a re-drive that raced) changes no state
    assert await env.coordinator.finish(end.record)
    assert await env.committed_view(topic, 0) == (3, 3, ((pid, 0),))
    again = (await md.describe_txns(["tx"]))["tx"]
    assert again == described


async def test_commit_markers_and_a_transaction_with_only_offsets(env: Env) -> None:
    md, topic = env.md, await env.topic()
    pid = (await md.init_txn_producer_id("tx", 60_000)).producer_id
    await md.add_partitions_to_txn("tx", pid, 0, [(str(topic.topic_id), 1)])
    await env.produce(topic, 1, pid, 0, 0)
    end = await md.end_txn("tx", pid, 0, True)
    assert end.record is not None and await env.coordinator.finish(end.record)
    assert await env.committed_view(topic, 1) == (2, 2, ())
    (file,) = env.committed
    (record,) = list(iter_records(file.data, file.chunks[0].batches[0].byte_offset))
    assert parse_control_record(record) == (ControlRecordType.COMMIT, 0)
    # offsets only: no partitions, so no markers; completed directly
    assert await md.add_offsets_to_txn("tx", pid, 0, "g") == 0
    end = await md.end_txn("tx", pid, 0, True)
    assert end.record is not None and not end.record.partitions
    assert await env.coordinator.finish(end.record)
    assert len(env.committed) == 1
    done = (await md.describe_txns(["tx"]))["tx"]
    assert done is not None and done.state is TxnState.COMPLETE_COMMIT


async def test_scan_redrives_a_dead_coordinators_transaction_and_expires(env: Env) -> None:
    md, topic = env.md, await env.topic()
    pid = (await md.init_txn_producer_id("tx", 60_000)).producer_id
    await md.add_partitions_to_txn("tx", pid, 0, [(str(topic.topic_id), 0)])
    await env.produce(topic, 0, pid, 0, 0)
    assert (await md.end_txn("tx", pid, 0, True)).ok  # ... and the coordinator died here
    await env.coordinator.scan_once()
    assert env.committed == []  # too recent: its coordinator may still be writing them
    env.clock.now += 5_000
    await env.coordinator.scan_once()
    assert len(env.committed) == 1 and await env.committed_view(topic, 0) == (2, 2, ())
    # a transaction past its timeout is aborted with its producer fenced
    other = await md.init_txn_producer_id("slow", 1_000)
    await md.add_partitions_to_txn("slow", other.producer_id, 0, [(str(topic.topic_id), 1)])
    await env.produce(topic, 1, other.producer_id, 0, 0, txn="slow")
    await env.coordinator.scan_once()
    assert await env.committed_view(topic, 1) == (1, 0, ())
    env.clock.now += 1_001
    await env.coordinator.scan_once()
    assert await env.committed_view(topic, 1) == (2, 2, ((other.producer_id, 0),))
    slow = (await md.describe_txns(["slow"]))["slow"]
    assert slow is not None and slow.state is TxnState.COMPLETE_ABORT and slow.producer_epoch == 1


async def test_only_the_coordinator_redrives(env: Env) -> None:
    env.agents.update([AgentInfo("b", "127.0.0.1", 9093, last_heartbeat_ms=env.clock())])
    owned_by_b = next(
        f"tx{i}" for i in range(1000) if routing.rendezvous_owner(txn_key(f"tx{i}"), ["a", "b"]) == "b"
    )
    assert env.coordinator.coordinator_for(owned_by_b).agent_id == "b"
    md, topic = env.md, await env.topic()
    pid = (await md.init_txn_producer_id(owned_by_b, 60_000)).producer_id
    await md.add_partitions_to_txn(owned_by_b, pid, 0, [(str(topic.topic_id), 0)])
    assert (await md.end_txn(owned_by_b, pid, 0, True)).ok
    env.clock.now += 60_000
    await env.coordinator.scan_once()
    assert env.committed == []
    still = (await md.describe_txns([owned_by_b]))[owned_by_b]
    assert still is not None and still.state is TxnState.PREPARE_COMMIT


class FailingStore:
    """An object store whose PUTs fail (the bucket unreachable), counting attempts."""

    def __init__(self) -> None:
        self.puts = 0

    async def put(self, key: str, data: bytes) -> None:
        self.puts += 1
        raise OSError("bucket unreachable (test)")


async def test_failed_redrives_back_off(env: Env) -> None:
    store = FailingStore()
    coordinator = TxnCoordinator(
        metadata=env.md,
        store=store,
        agents=env.agents,
        agent_id="a",
        wall_ms=env.clock,
        redrive_after_ms=5_000,
    )
    md, topic = env.md, await env.topic()
    pid = (await md.init_txn_producer_id("tx", 60_000)).producer_id
    await md.add_partitions_to_txn("tx", pid, 0, [(str(topic.topic_id), 0)])
    end = await md.end_txn("tx", pid, 0, True)
    assert end.record is not None and not await coordinator.finish(end.record)
    assert store.puts == 1
    env.clock.now += 5_000
    await coordinator.scan_once()
    assert store.puts == 2
    for _ in range(3):  # within the 5 s delay: no new attempt
        env.clock.now += 1_000
        await coordinator.scan_once()
    assert store.puts == 2
    env.clock.now += 2_000
    await coordinator.scan_once()
    assert store.puts == 3  # next delay 10 s
    env.clock.now += 9_000
    await coordinator.scan_once()
    assert store.puts == 3
    env.clock.now += 1_000
    await coordinator.scan_once()
    assert store.puts == 4
    state = (await md.describe_txns(["tx"]))["tx"]
    assert state is not None and state.state is TxnState.PREPARE_COMMIT


async def test_marker_seconds_sum_each_files_put_and_commit(env: Env) -> None:
    """`marker_seconds` (where EndTxn's markers spend their time) reads the injected
    monotonic clock around the PUT and the commit of each marker file, and only then."""
    ticks = iter(range(0, 1_000, 2))  # every reading 2 s after the previous one
    coordinator = TxnCoordinator(
        metadata=env.md,
        store=env.store,  # type: ignore[arg-type]
        agents=env.agents,
        agent_id="a",
        wall_ms=env.clock,
        clock_s=lambda: float(next(ticks)),
    )
    md, topic = env.md, await env.topic()
    pid = (await md.init_txn_producer_id("tx", 60_000)).producer_id
    await md.add_partitions_to_txn("tx", pid, 0, [(str(topic.topic_id), 0), (str(topic.topic_id), 1)])
    end = await md.end_txn("tx", pid, 0, True)
    assert end.record is not None and await coordinator.finish(end.record)
    assert coordinator.marker_seconds == {"put": 2.0, "commit": 2.0}
    # offsets only: no marker file, nothing timed
    assert await md.add_offsets_to_txn("tx", pid, 0, "g") == 0
    end = await md.end_txn("tx", pid, 0, True)
    assert end.record is not None and await coordinator.finish(end.record)
    assert coordinator.marker_seconds == {"put": 2.0, "commit": 2.0}
    assert coordinator.markers_written == 1
