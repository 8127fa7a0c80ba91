"""The transactional Kafka APIs over TCP against one agent (raw kio requests): error codes
as each request version knows them (PRODUCER_FENCED since KIP-588's versions,
INVALID_PRODUCER_EPOCH before), unknown topics, the batched AddPartitionsToTxn v4 with
`verify_only`, the operators' DescribeTransactions / ListTransactions, and EndTxn's
markers bypassing the produce buffer's flush interval."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import threading
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from kio.schema.add_partitions_to_txn.v1.request import AddPartitionsToTxnRequest as AddV1
from kio.schema.add_partitions_to_txn.v1.request import AddPartitionsToTxnTopic as TopicV1
from kio.schema.add_partitions_to_txn.v3.request import AddPartitionsToTxnRequest as AddV3
from kio.schema.add_partitions_to_txn.v3.request import AddPartitionsToTxnTopic as TopicV3
from kio.schema.add_partitions_to_txn.v4.request import AddPartitionsToTxnRequest as AddV4
from kio.schema.add_partitions_to_txn.v4.request import AddPartitionsToTxnTopic as TopicV4
from kio.schema.add_partitions_to_txn.v4.request import AddPartitionsToTxnTransaction
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.end_txn.v1.request import EndTxnRequest as EndV1
from kio.schema.end_txn.v3.request import EndTxnRequest as EndV3
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v5.request import InitProducerIdRequest
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.static.primitive import i16, i32, i32Timedelta, i64
from skiff.agent.produce_buffer import PendingBatch
from skiff.fileformat.record_build import build_batch
from skiff.fileformat.record_decode import Record
from skiff.metadata.transactions.state import TxnState
from skiff.metadata.types import BatchResult, ChunkResult, ChunkSpec, FileSpec, PartitionKey

from tests.component.fake_metadata import AgentHarness, request_once
from tests.support.kafka_wire import list_offsets_request, produce_request

MINUTE = i32Timedelta.parse(datetime.timedelta(minutes=1))


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentHarness]:
    h = AgentHarness(tmp_path_factory.mktemp("txn-handlers")).start()
    yield h
    h.stop()


def _init(h: AgentHarness, txn_id: str) -> tuple[int, int]:
    resp = request_once(
        h.bootstrap,
        InitProducerIdRequest(transactional_id=TransactionalId(txn_id), transaction_timeout=MINUTE),
    )
    assert resp.error_code == ErrorCode.none
    return int(resp.producer_id), int(resp.producer_epoch)


def _topic(h: AgentHarness) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    h.call(h.metadata.create_topic(name, 2, {}))
    return name


def _add_v3(txn_id: str, pid: int, epoch: int, topics: dict[str, list[int]]) -> AddV3:
    return AddV3(
        v3_and_below_transactional_id=TransactionalId(txn_id),
        v3_and_below_producer_id=ProducerId(pid),
        v3_and_below_producer_epoch=i16(epoch),
        v3_and_below_topics=tuple(
            TopicV3(name=TopicName(n), partitions=tuple(i32(p) for p in ps)) for n, ps in topics.items()
        ),
    )


def _codes(resp: object) -> dict[tuple[str, int], ErrorCode]:
    return {
        (t.name, int(p.partition_index)): p.partition_error_code
        for t in resp.results_by_topic_v3_and_below  # type: ignore[attr-defined]
        for p in t.results_by_partition
    }


def test_fencing_codes_follow_the_request_version(harness: AgentHarness) -> None:
    topic = _topic(harness)
    txn_id = f"tx-{uuid.uuid4()}"
    pid, _ = _init(harness, txn_id)
    pid2, epoch = _init(harness, txn_id)  # a new instance: epoch 1, the old one fenced
    assert (pid2, epoch) == (pid, 1)
    old = request_once(harness.bootstrap, _add_v3(txn_id, pid, 0, {topic: [0]}))
    assert _codes(old) == {(topic, 0): ErrorCode.producer_fenced}
    v1 = AddV1(
        v3_and_below_transactional_id=TransactionalId(txn_id),
        v3_and_below_producer_id=ProducerId(pid),
        v3_and_below_producer_epoch=i16(0),
        v3_and_below_topics=(TopicV1(name=TopicName(topic), partitions=(i32(0),)),),
    )
    assert _codes(request_once(harness.bootstrap, v1)) == {(topic, 0): ErrorCode.invalid_producer_epoch}
    end_old = dict(
        transactional_id=TransactionalId(txn_id), producer_id=ProducerId(pid), producer_epoch=i16(0)
    )
    assert (
        request_once(harness.bootstrap, EndV3(**end_old, committed=True)).error_code
        == ErrorCode.producer_fenced
    )
    assert request_once(harness.bootstrap, EndV1(**end_old, committed=True)).error_code == (
        ErrorCode.invalid_producer_epoch
    )
    # EndTxn with nothing open
    end_new = EndV3(
        transactional_id=TransactionalId(txn_id),
        producer_id=ProducerId(pid),
        producer_epoch=i16(1),
        committed=True,
    )
    assert request_once(harness.bootstrap, end_new).error_code == ErrorCode.invalid_txn_state


def test_unknown_topic_changes_nothing(harness: AgentHarness) -> None:
    topic = _topic(harness)
    txn_id = f"tx-{uuid.uuid4()}"
    pid, epoch = _init(harness, txn_id)
    resp = request_once(harness.bootstrap, _add_v3(txn_id, pid, epoch, {topic: [0, 5], "no-such-topic": [0]}))
    assert _codes(resp) == {
        (topic, 0): ErrorCode.operation_not_attempted,
        (topic, 5): ErrorCode.operation_not_attempted,
        ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition,
    }
    resp = request_once(harness.bootstrap, _add_v3(txn_id, pid, epoch, {topic: [0, 5]}))
    assert _codes(resp) == {
        (topic, 0): ErrorCode.operation_not_attempted,
        (topic, 5): ErrorCode.unknown_topic_or_partition,
    }
    listed = request_once(
        harness.bootstrap, ListTransactionsRequest(state_filters=(), producer_id_filters=(ProducerId(pid),))
    )
    assert [(s.transactional_id, s.transaction_state) for s in listed.transaction_states] == [
        (txn_id, "Empty")
    ]


def test_batched_add_verify_describe_and_list(harness: AgentHarness) -> None:
    topic = _topic(harness)
    txn_id = f"tx-{uuid.uuid4()}"
    pid, epoch = _init(harness, txn_id)

    def v4(verify_only: bool, partitions: tuple[int, ...]) -> AddV4:
        return AddV4(
            transactions=(
                AddPartitionsToTxnTransaction(
                    transactional_id=TransactionalId(txn_id),
                    producer_id=ProducerId(pid),
                    producer_epoch=i16(epoch),
                    verify_only=verify_only,
                    topics=(TopicV4(name=TopicName(topic), partitions=tuple(i32(p) for p in partitions)),),
                ),
            )
        )

    def codes(resp: object) -> dict[int, ErrorCode]:
        (txn,) = resp.results_by_transaction  # type: ignore[attr-defined]
        (t,) = txn.topic_results
        return {int(p.partition_index): p.partition_error_code for p in t.results_by_partition}

    assert codes(request_once(harness.bootstrap, v4(True, (0,)))) == {0: ErrorCode.invalid_txn_state}
    assert codes(request_once(harness.bootstrap, v4(False, (0, 1)))) == {0: ErrorCode.none, 1: ErrorCode.none}
    assert codes(request_once(harness.bootstrap, v4(True, (1,)))) == {1: ErrorCode.none}

    described = request_once(
        harness.bootstrap,
        DescribeTransactionsRequest(
            transactional_ids=(TransactionalId(txn_id), TransactionalId("unknown-id"))
        ),
    )
    mine, unknown = described.transaction_states
    assert unknown.error_code == ErrorCode.transactional_id_not_found
    assert (mine.error_code, mine.transaction_state, mine.producer_id, mine.producer_epoch) == (
        ErrorCode.none,
        "Ongoing",
        pid,
        epoch,
    )
    assert [(t.topic, sorted(t.partitions)) for t in mine.topics] == [(topic, [0, 1])]
    assert mine.transaction_timeout == datetime.timedelta(minutes=1)

    listed = request_once(
        harness.bootstrap,
        ListTransactionsRequest(state_filters=("Ongoing", "Bogus"), producer_id_filters=(ProducerId(pid),)),
    )
    assert listed.error_code == ErrorCode.none and listed.unknown_state_filters == ("Bogus",)
    assert [(s.transactional_id, s.producer_id, s.transaction_state) for s in listed.transaction_states] == [
        (txn_id, pid, "Ongoing")
    ]
    none_left = request_once(
        harness.bootstrap,
        ListTransactionsRequest(
            state_filters=("Ongoing",), producer_id_filters=(), duration_filter=i64(3_600_000)
        ),
    )
    assert none_left.transaction_states == ()


def test_produce_verifies_transactional_batches(harness: AgentHarness) -> None:
    topic = _topic(harness)
    txn_id = f"tx-{uuid.uuid4()}"
    pid, epoch = _init(harness, txn_id)

    def produce(partition: int, epoch_: int, seq: int, txn: str | None = txn_id) -> tuple[ErrorCode, int]:
        batch = build_batch(
            [Record(0, 1_000, b"k", b"v", ())],
            producer_id=pid,
            producer_epoch=epoch_,
            base_sequence=seq,
            is_transactional=True,
        )
        req = dataclasses.replace(
            produce_request(topic, {partition: batch}),
            transactional_id=None if txn is None else TransactionalId(txn),
        )
        (p,) = request_once(harness.bootstrap, req).responses[0].partition_responses
        return p.error_code, int(p.base_offset)

    assert produce(0, epoch, 0)[0] == ErrorCode.invalid_txn_state  # not added to a transaction
    added = request_once(harness.bootstrap, _add_v3(txn_id, pid, epoch, {topic: [0]}))
    assert _codes(added) == {(topic, 0): ErrorCode.none}
    assert produce(1, epoch, 0)[0] == ErrorCode.invalid_txn_state  # partition 1 was not added
    assert produce(0, epoch, 0, txn=None)[0] == ErrorCode.invalid_txn_state  # no transactional id
    assert produce(0, epoch, 0) == (ErrorCode.none, 0)
    _init(harness, txn_id)  # a new instance: aborts and fences
    assert produce(0, epoch, 1)[0] == ErrorCode.invalid_producer_epoch


def test_a_transaction_fenced_while_its_batch_waits_for_the_commit_stays_closed(
    harness: AgentHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KIP-890's race through the agent: a transactional batch is accepted while its
    partition is in the ongoing transaction, and waits for its file's commit; meanwhile a
    new instance of the producer (InitProducerId) aborts that transaction, and its ABORT
    marker is committed. The late batch's commit refuses it (INVALID_PRODUCER_EPOCH, with
    a message): it does not reopen the transaction after its marker, so nothing holds the
    partition's last stable offset."""
    topic = _topic(harness)
    txn_id = f"tx-{uuid.uuid4()}"
    pid, epoch = _init(harness, txn_id)
    assert _codes(request_once(harness.bootstrap, _add_v3(txn_id, pid, epoch, {topic: [0]}))) == {
        (topic, 0): ErrorCode.none
    }
    md = harness.metadata
    assert md is not None
    topic_id = harness.call(md.describe_topics([topic]))[topic].topic_id
    commit_file = md.commit_file
    waiting = threading.Event()  # the data file's commit has been asked for
    go = asyncio.Event()  # let it through (set on the agents' loop)

    async def held_commit(file: FileSpec, chunks: Sequence[ChunkSpec]) -> list[ChunkResult]:
        if any(b.producer_id == pid and b.control_type < 0 for c in chunks for b in c.batches):
            waiting.set()
            await go.wait()
        return await commit_file(file, chunks)

    monkeypatch.setattr(md, "commit_file", held_commit)
    batch = build_batch(
        [Record(0, 1_000, b"k", b"v", ())],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=0,
        is_transactional=True,
    )
    req = dataclasses.replace(produce_request(topic, {0: batch}), transactional_id=TransactionalId(txn_id))
    with ThreadPoolExecutor(1) as pool:
        produced = pool.submit(request_once, harness.bootstrap, req)
        try:
            assert waiting.wait(30)
            # the agent aborts the ongoing transaction, writes its markers, then answers the
            # new instance with the next epoch
            assert _init(harness, txn_id) == (pid, epoch + 2)
        finally:
            harness.loop.call_soon_threadsafe(go.set)
        (p,) = produced.result(30).responses[0].partition_responses
    assert (p.error_code, int(p.base_offset)) == (ErrorCode.invalid_producer_epoch, -1)
    assert p.error_message
    (state,) = harness.call(md.partition_states([PartitionKey(topic_id, 0)]))
    assert state.high_watermark == state.last_stable_offset == 1  # the ABORT marker alone


def test_list_offsets_latest_read_committed_is_the_lso(harness: AgentHarness) -> None:
    topic = _topic(harness)
    plain = build_batch([Record(0, 1_000, b"k", b"v", ())])
    assert request_once(harness.bootstrap, produce_request(topic, {0: plain})).responses[
        0
    ].partition_responses[0].error_code == (ErrorCode.none)
    txn_id = f"tx-{uuid.uuid4()}"
    pid, epoch = _init(harness, txn_id)
    request_once(harness.bootstrap, _add_v3(txn_id, pid, epoch, {topic: [0]}))
    batch = build_batch(
        [Record(0, 1_000, b"k", b"v", ()), Record(1, 1_000, b"k", b"w", ())],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=0,
        is_transactional=True,
    )
    req = dataclasses.replace(produce_request(topic, {0: batch}), transactional_id=TransactionalId(txn_id))
    assert (
        request_once(harness.bootstrap, req).responses[0].partition_responses[0].error_code == ErrorCode.none
    )

    def latest(isolation: int) -> int:
        req = list_offsets_request(topic, [(0, -1)], isolation=isolation, timeout_ms=10_000)
        resp = request_once(harness.bootstrap, req)
        (p,) = resp.topics[0].partitions
        assert p.error_code == ErrorCode.none
        return int(p.offset)

    assert (latest(0), latest(1)) == (3, 1)  # the open transaction starts at offset 1
    end = EndV3(
        transactional_id=TransactionalId(txn_id),
        producer_id=ProducerId(pid),
        producer_epoch=i16(epoch),
        committed=False,
    )
    assert request_once(harness.bootstrap, end).error_code == ErrorCode.none
    assert (latest(0), latest(1)) == (4, 4)  # + the ABORT marker; stable again


def test_end_txn_neither_waits_for_nor_seals_the_open_produce_file(tmp_path: Path) -> None:
    """EndTxn's markers are their own file, PUT and committed at once: with a one-hour
    flush interval and another producer's batch parked in the open produce file, EndTxn
    is answered, the transaction is complete and the parked batch is still waiting (the
    transaction's latency owes nothing to the flush interval but its produce waves)."""
    h = AgentHarness(tmp_path, flush_interval_ms=3_600_000).start()
    try:
        topic = _topic(h)
        txn_id = f"tx-{uuid.uuid4()}"
        pid, epoch = _init(h, txn_id)
        added = request_once(h.bootstrap, _add_v3(txn_id, pid, epoch, {topic: [0, 1]}))
        assert set(_codes(added).values()) == {ErrorCode.none}
        buffer = h.agents[0].ctx.parts.produce_buffer
        md = h.metadata
        assert md is not None
        topic_id = h.call(md.describe_topics([topic]))[topic].topic_id
        batch = build_batch([Record(0, 1_000, b"k", b"v", ())])
        pending = PendingBatch(batch, 1, 1, 1_000, 1_000)

        async def park() -> list[asyncio.Future[BatchResult]]:
            return await buffer.append_nowait(topic_id, 1, [pending])

        parked = h.call(park())
        end = EndV3(
            transactional_id=TransactionalId(txn_id),
            producer_id=ProducerId(pid),
            producer_epoch=i16(epoch),
            committed=True,
        )
        assert request_once(h.bootstrap, end).error_code == ErrorCode.none
        described = h.call(md.describe_txns([txn_id]))[txn_id]
        assert described is not None and described.state is TxnState.COMPLETE_COMMIT
        assert h.agents[0].ctx.parts.transactions.markers_written == 1
        assert not any(f.done() for f in parked) and buffer.files_flushed == 0
        h.call(buffer.flush())  # the parked batch is committed once its file is sealed
        assert all(f.done() and f.result().error_code == 0 for f in parked)
    finally:
        h.stop()
