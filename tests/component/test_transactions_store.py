"""Transactional producers' state in metadata (`metadata.transactions.store`) on SQLite and
PostgreSQL, with an injected clock: the state survives a new service over the same
database (a coordinator's death), racing coordinators change it one at a time, and the
schema is the migration's."""

from __future__ import annotations

import threading

import pytest
from skiff.metadata.schema import txn_open
from skiff.metadata.service import MetadataService
from skiff.metadata.transactions import state as ts
from skiff.metadata.transactions.state import TxnState
from skiff.metadata.types import BatchSpec, ChunkSpec, FetchQuery, FileSpec, PartitionFetchInfo
from sqlalchemy import event, select

from tests.support.metadata_fixtures import FakeClock


@pytest.fixture
def metadata_service(metadata_service: MetadataService) -> MetadataService:
    """The shared service with topic `t` (2 partitions)."""
    metadata_service.create_topic("t", 2, {})
    return metadata_service


def _partitions(metadata_service: MetadataService) -> list[tuple[str, int]]:
    topic = metadata_service.describe_topics(["t"])["t"]
    return [(str(topic.topic_id), 0), (str(topic.topic_id), 1)]


def test_a_committed_transaction_end_to_end_and_restart(
    metadata_service: MetadataService, db_url: str, clock: FakeClock
) -> None:
    txns = metadata_service.transactions
    init = txns.init_producer_id("tx", 60_000)
    assert init.ok and init.producer_epoch == 0
    pid = init.producer_id
    parts = _partitions(metadata_service)
    added = txns.add_partitions("tx", pid, 0, parts)
    assert set(added.errors.values()) == {0}
    assert txns.add_offsets("tx", pid, 0, "g") == 0
    assert txns.verify_partitions("tx", pid, 0, parts[:1]) == 0
    end = txns.end_txn("tx", pid, 0, commit=True)
    assert end.ok and end.write_markers and end.record is not None
    assert set(end.record.partitions) == set(parts) and end.groups == {"g"}

    # the coordinator dies here: a new service over the same database finds the prepared
    # transaction and finishes it
    again = MetadataService.from_url(db_url, clock=clock)
    try:
        pending = again.transactions.preparing()
        assert [(r.transactional_id, r.state) for r in pending] == [("tx", TxnState.PREPARE_COMMIT)]
        done = again.transactions.complete("tx", pid, 0)
        assert done is not None and done.state is TxnState.COMPLETE_COMMIT
        assert again.transactions.complete("tx", pid, 0) is None  # finished once only
        assert again.transactions.preparing() == []
    finally:
        again.close()
    retry = txns.end_txn("tx", pid, 0, commit=True)
    assert retry.ok and not retry.write_markers


def test_unknown_partition_fails_the_whole_request(metadata_service: MetadataService) -> None:
    init = metadata_service.transactions.init_producer_id("tx", 60_000)
    good = _partitions(metadata_service)[0]
    bad = (good[0], 7)
    out = metadata_service.transactions.add_partitions("tx", init.producer_id, 0, [good, bad])
    assert out.errors == {good: 55, bad: 3}
    assert metadata_service.transactions.describe(["tx"])["tx"].state is TxnState.EMPTY  # type: ignore[union-attr]


def test_new_instance_fences_the_old_and_aborts_its_transaction(metadata_service: MetadataService) -> None:
    txns = metadata_service.transactions
    old = txns.init_producer_id("tx", 60_000)
    txns.add_partitions("tx", old.producer_id, 0, _partitions(metadata_service)[:1])
    new = txns.init_producer_id("tx", 60_000)
    assert new.error == ts.CONCURRENT_TRANSACTIONS and new.write_markers
    assert txns.end_txn("tx", old.producer_id, 0, commit=True).error == ts.PRODUCER_FENCED
    assert txns.init_producer_id("tx", 60_000).error == ts.CONCURRENT_TRANSACTIONS
    assert txns.complete("tx", old.producer_id, 1) is not None
    after = txns.init_producer_id("tx", 60_000)
    assert after.ok and (after.producer_id, after.producer_epoch) == (old.producer_id, 2)


def test_expiry_and_listing(metadata_service: MetadataService, clock: FakeClock) -> None:
    txns = metadata_service.transactions
    a = txns.init_producer_id("a", 10_000)
    b = txns.init_producer_id("b", 60_000)
    parts = _partitions(metadata_service)
    txns.add_partitions("a", a.producer_id, 0, parts[:1])
    txns.add_partitions("b", b.producer_id, 0, parts[1:])
    clock.now += 5_000
    assert sorted(r.transactional_id for r in txns.list(duration_filter_ms=4_000)) == ["a", "b"]
    assert txns.list(duration_filter_ms=5_000) == []
    assert txns.expire() == []
    clock.now += 5_001
    due = txns.expire()
    assert [o.record.transactional_id for o in due if o.record] == ["a"]
    assert {r.transactional_id for r in txns.list(states=["PrepareAbort"])} == {"a"}
    assert {r.transactional_id for r in txns.list(producer_ids=[b.producer_id])} == {"b"}
    described = txns.describe(["a", "zzz"])
    assert described["zzz"] is None and described["a"] is not None and described["a"].producer_epoch == 1


def test_idle_ids_expire(metadata_service: MetadataService, clock: FakeClock) -> None:
    metadata_service.transactions.init_producer_id("idle", 60_000)
    clock.now += 1_000
    metadata_service.transactions.init_producer_id("busy", 60_000)
    assert metadata_service.transactions.delete_expired_ids(older_than_ms=clock.now) == 1
    assert metadata_service.transactions.describe(["idle", "busy"])["idle"] is None


def test_racing_first_inits_of_one_id_give_distinct_epochs(metadata_service: MetadataService) -> None:
    results: list[ts.Outcome] = []
    barrier = threading.Barrier(4)

    def run() -> None:
        barrier.wait()
        results.append(metadata_service.transactions.init_producer_id("race", 60_000))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.ok for r in results)
    assert len({r.producer_id for r in results}) == 1
    assert sorted(r.producer_epoch for r in results) == [0, 1, 2, 3]


def _batch(
    pos: int, count: int, pid: int = -1, seq: int = -1, txn: str | None = None, control: int = -1
) -> BatchSpec:
    """`txn`: the transactional id of a transactional batch (markers carry none)."""
    return BatchSpec(
        pos,
        100,
        count,
        count,
        0,
        pid,
        0 if pid >= 0 else -1,
        seq,
        is_transactional=txn is not None,
        control_type=control,
        transactional_id=txn if control < 0 else None,
    )


def test_commits_track_open_and_aborted_transactions_and_the_last_stable_offset(
    metadata_service: MetadataService,
) -> None:
    topic = metadata_service.describe_topics(["t"])["t"]
    tid = topic.topic_id
    txns = metadata_service.transactions
    init = txns.init_producer_id("tx", 60_000)
    pid = init.producer_id
    txns.add_partitions("tx", pid, 0, [(str(tid), 0), (str(tid), 1)])
    # p0: offsets 0-1 plain data, 2-3 the transaction's; p1: offset 0 the transaction's
    metadata_service.commit_file(
        FileSpec("f1", 1000),
        [
            ChunkSpec(tid, 0, (_batch(0, 2), _batch(100, 2, pid, 0, txn="tx"))),
            ChunkSpec(tid, 1, (_batch(200, 1, pid, 2, txn="tx"),)),
        ],
    )

    def committed(partition: int, offset: int = 0) -> PartitionFetchInfo:
        return metadata_service.find_chunks([FetchQuery(tid, partition, offset, 1 << 20, isolation_level=1)])[
            0
        ]

    p0 = committed(0)
    assert (p0.high_watermark, p0.last_stable_offset, p0.aborted) == (4, 2, ())
    assert all(c.base_offset < 2 for c in p0.chunks)
    assert committed(0, 2).chunks == ()  # at the LSO: nothing yet
    plain = metadata_service.find_chunks([FetchQuery(tid, 0, 0, 1 << 20)])[0]
    assert plain.last_stable_offset == -1 and plain.chunks[-1].last_offset == 3

    end = txns.end_txn("tx", pid, 0, commit=False)
    assert end.write_markers
    # the markers file completes the transaction in the same database transaction
    metadata_service.commit_file(
        FileSpec("markers", 1000, completes=(("tx", pid, 0),)),
        [
            ChunkSpec(tid, 0, (_batch(0, 1, pid, txn="tx", control=0),)),
            ChunkSpec(tid, 1, (_batch(100, 1, pid, txn="tx", control=0),)),
        ],
    )
    p0 = committed(0)
    assert (p0.high_watermark, p0.last_stable_offset) == (5, 5)
    assert p0.aborted == ((pid, 2),)
    assert committed(1).aborted == ((pid, 0),)
    assert committed(0, 4).aborted == ((pid, 2),)  # the ABORT marker's own offset is in the range (Kafka)
    described = txns.describe(["tx"])["tx"]
    assert described is not None and described.state is TxnState.COMPLETE_ABORT

    # a second transaction of another producer, left open, holds the LSO at its first offset
    other = txns.init_producer_id("tx2", 60_000)
    txns.add_partitions("tx2", other.producer_id, 0, [(str(tid), 0)])
    metadata_service.commit_file(
        FileSpec("f3", 1000), [ChunkSpec(tid, 0, (_batch(0, 1, other.producer_id, 0, txn="tx2"),))]
    )
    metadata_service.commit_file(FileSpec("f4", 1000), [ChunkSpec(tid, 0, (_batch(0, 1),))])
    p0 = committed(0)
    assert (p0.high_watermark, p0.last_stable_offset) == (7, 5)
    assert committed(0, 5).chunks == () and committed(0, 5).aborted == ()


def _open_rows(metadata_service: MetadataService) -> list[tuple[object, ...]]:
    with metadata_service.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(select(txn_open))]


@pytest.mark.parametrize("ending", ["timeout", "fenced", "abort"])
def test_a_batch_checked_before_its_transaction_ended_is_refused_by_the_commit(
    metadata_service: MetadataService, clock: FakeClock, ending: str
) -> None:
    """KIP-890's race: the batch was accepted while its transaction held the partition
    (Produce's old pre-check, `verify_partitions`, said yes), then waited in an agent's
    buffer while the transaction ended (timed out and aborted by the coordinator, a new
    producer instance fencing it, or EndTxn) and its marker was committed. Its commit
    now refuses it, without offsets: no transaction is reopened after its marker (no
    `txn_open` row holding the last stable offset for ever)."""
    tid = metadata_service.describe_topics(["t"])["t"].topic_id
    txns = metadata_service.transactions
    pid = txns.init_producer_id("tx", 1_000).producer_id
    txns.add_partitions("tx", pid, 0, [(str(tid), 0)])
    assert txns.verify_partitions("tx", pid, 0, [(str(tid), 0)]) == 0
    if ending == "timeout":
        clock.now += 1_001
        (out,) = txns.expire()
    elif ending == "fenced":
        out = txns.init_producer_id("tx", 1_000)
        assert out.error == ts.CONCURRENT_TRANSACTIONS
    else:
        out = txns.end_txn("tx", pid, 0, commit=False)
    assert out.write_markers and out.record is not None
    epoch = out.record.producer_epoch  # bumped when the coordinator aborted (timeout, fencing)
    marker = BatchSpec(0, 100, 1, 1, 0, pid, epoch, -1, is_transactional=True, control_type=0)
    metadata_service.commit_file(
        FileSpec("markers", 1000, completes=(("tx", pid, epoch),)), [ChunkSpec(tid, 0, (marker,))]
    )
    (late,) = metadata_service.commit_file(
        FileSpec("late", 1000), [ChunkSpec(tid, 0, (_batch(0, 1, pid, 0, txn="tx"),))]
    )
    (result,) = late.batches
    expected = ts.INVALID_TXN_STATE if ending == "abort" else ts.INVALID_PRODUCER_EPOCH
    assert (result.error_code, result.base_offset) == (expected, -1) and result.error_message
    assert late.locations == ()  # no chunk row: the batch's bytes stay unreferenced
    assert _open_rows(metadata_service) == []
    (info,) = metadata_service.find_chunks([FetchQuery(tid, 0, 0, 1 << 20, isolation_level=1)])
    assert (info.high_watermark, info.last_stable_offset) == (1, 1)  # the marker alone
    files = metadata_service.file_chunks("late")
    assert files.state == "deleting"  # nothing stored: garbage collection removes the object


def test_the_commit_checks_producer_epoch_partition_and_state_per_batch(
    metadata_service: MetadataService,
) -> None:
    """Each transactional batch of one file is judged on its own against its transactional
    id's record: the stored ones get offsets, the others Kafka's Produce codes."""
    tid = metadata_service.describe_topics(["t"])["t"].topic_id
    txns = metadata_service.transactions
    pid = txns.init_producer_id("tx", 60_000).producer_id
    idle = txns.init_producer_id("idle", 60_000).producer_id  # no transaction open
    txns.add_partitions("tx", pid, 0, [(str(tid), 0)])
    wrong_epoch = BatchSpec(300, 100, 1, 1, 0, pid, 1, 1, is_transactional=True, transactional_id="tx")
    no_id = BatchSpec(400, 100, 1, 1, 0, pid, 0, 1, is_transactional=True)
    p0, p1 = metadata_service.commit_file(
        FileSpec("f", 1000),
        [
            ChunkSpec(
                tid,
                0,
                (
                    _batch(0, 1, pid, 0, txn="tx"),  # stored
                    _batch(100, 1, idle, 0, txn="idle"),  # its id has no ongoing transaction
                    _batch(200, 1, pid + 1000, 0, txn="tx"),  # not the id's producer
                    wrong_epoch,
                    no_id,
                    _batch(500, 1, pid, 1, txn="nobody"),  # an unknown id
                    _batch(600, 1),  # plain
                ),
            ),
            ChunkSpec(tid, 1, (_batch(700, 1, pid, 1, txn="tx"),)),  # partition 1 was not added
        ],
    )
    assert [(b.error_code, b.base_offset) for b in p0.batches] == [
        (0, 0),
        (ts.INVALID_TXN_STATE, -1),
        (ts.INVALID_PRODUCER_EPOCH, -1),
        (ts.INVALID_PRODUCER_EPOCH, -1),
        (ts.INVALID_TXN_STATE, -1),
        (ts.INVALID_PRODUCER_EPOCH, -1),
        (0, 1),
    ]
    assert all(b.error_message for b in p0.batches if b.error_code)
    assert [(b.error_code, b.base_offset) for b in p1.batches] == [(ts.INVALID_TXN_STATE, -1)]


def test_a_retried_batch_of_an_ended_transaction_is_still_a_duplicate(
    metadata_service: MetadataService,
) -> None:
    """Kafka's order: a batch already stored (same producer, epoch and sequences) is
    answered with its offset before the transaction is checked, so a producer's retry
    after a lost answer is a success even if the transaction has ended since."""
    tid = metadata_service.describe_topics(["t"])["t"].topic_id
    txns = metadata_service.transactions
    pid = txns.init_producer_id("tx", 60_000).producer_id
    txns.add_partitions("tx", pid, 0, [(str(tid), 0)])
    batch = _batch(0, 2, pid, 0, txn="tx")
    (first,) = metadata_service.commit_file(FileSpec("f1", 1000), [ChunkSpec(tid, 0, (batch,))])
    assert first.batches[0].error_code == 0
    assert txns.end_txn("tx", pid, 0, commit=True).write_markers
    marker = BatchSpec(0, 100, 1, 1, 0, pid, 0, -1, is_transactional=True, control_type=1)
    metadata_service.commit_file(
        FileSpec("m", 1000, completes=(("tx", pid, 0),)), [ChunkSpec(tid, 0, (marker,))]
    )
    (retry,) = metadata_service.commit_file(FileSpec("f2", 1000), [ChunkSpec(tid, 0, (batch,))])
    (result,) = retry.batches
    assert (result.error_code, result.base_offset, result.duplicate) == (0, 0, True)


def test_one_statement_reads_the_transactions_of_a_commit(metadata_service: MetadataService) -> None:
    """The commit reads the records of all its transactional ids at once, whatever the
    number of transactional batches and producers."""
    tid = metadata_service.describe_topics(["t"])["t"].topic_id
    txns = metadata_service.transactions
    batches: dict[int, list[BatchSpec]] = {0: [], 1: []}
    at = 0
    for n in range(3):
        txn_id = f"tx{n}"
        pid = txns.init_producer_id(txn_id, 60_000).producer_id
        txns.add_partitions(txn_id, pid, 0, [(str(tid), 0), (str(tid), 1)])
        for p in (0, 1):
            for seq in (0, 1):
                batches[p].append(_batch(at, 1, pid, seq, txn=txn_id))
                at += 100
    reads: list[str] = []

    def count(conn: object, cursor: object, statement: str, *args: object) -> None:
        if "FROM transactions" in statement:
            reads.append(statement)

    event.listen(metadata_service.engine, "before_cursor_execute", count)
    try:
        results = metadata_service.commit_file(
            FileSpec("f", at), [ChunkSpec(tid, p, tuple(batches[p])) for p in (0, 1)]
        )
    finally:
        event.remove(metadata_service.engine, "before_cursor_execute", count)
    assert all(b.error_code == 0 for r in results for b in r.batches)
    assert len(reads) == 1


def test_a_group_commit_judges_a_late_batch_as_if_committed_after_the_marker(
    metadata_service: MetadataService,
) -> None:
    """Files committed together in one database transaction (group commit) share one read
    of the transactions: the marker file that completes a transaction, then a late batch
    of it in the same group, is refused as it would be committed alone after the marker
    (the record read is PREPARE_ABORT already)."""
    tid = metadata_service.describe_topics(["t"])["t"].topic_id
    txns = metadata_service.transactions
    pid = txns.init_producer_id("tx", 60_000).producer_id
    txns.add_partitions("tx", pid, 0, [(str(tid), 0)])
    assert txns.end_txn("tx", pid, 0, commit=False).write_markers
    marker = BatchSpec(0, 100, 1, 1, 0, pid, 0, -1, is_transactional=True, control_type=0)
    markers, late = metadata_service.commits.commit_group(
        [
            (FileSpec("markers", 1000, completes=(("tx", pid, 0),)), [ChunkSpec(tid, 0, (marker,))]),
            (FileSpec("late", 1000), [ChunkSpec(tid, 0, (_batch(0, 1, pid, 0, txn="tx"),))]),
        ]
    )
    assert markers[0].batches[0].error_code == 0
    assert late[0].batches[0].error_code == ts.INVALID_TXN_STATE
    assert _open_rows(metadata_service) == []
    described = txns.describe(["tx"])["tx"]
    assert described is not None and described.state is TxnState.COMPLETE_ABORT


def test_a_recommit_answers_a_refused_transactional_batch_with_its_refusal(
    metadata_service: MetadataService,
) -> None:
    """The agent retries a commit whose answer was lost: the stored batch gets its offset
    back, the refused transactional batch the refusal (not UNKNOWN_SERVER_ERROR)."""
    tid = metadata_service.describe_topics(["t"])["t"].topic_id
    txns = metadata_service.transactions
    pid = txns.init_producer_id("tx", 60_000).producer_id
    txns.add_partitions("tx", pid, 0, [(str(tid), 0)])
    specs = [
        ChunkSpec(tid, 0, (_batch(0, 1, pid, 0, txn="tx"),)),
        ChunkSpec(tid, 1, (_batch(100, 1, pid, 1, txn="tx"),)),  # partition 1 was not added
    ]
    first = metadata_service.commit_file(FileSpec("f", 1000), specs)
    again = metadata_service.commit_file(FileSpec("f", 1000), specs)
    codes = [[(b.error_code, b.base_offset) for b in r.batches] for r in (*first, *again)]
    assert codes == [[(0, 0)], [(ts.INVALID_TXN_STATE, -1)]] * 2
