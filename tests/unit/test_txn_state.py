"""Kafka's transaction state machine (metadata.transactions.state): the documented transitions and
error codes, and properties over random request sequences."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
from skiff.metadata.transactions import state as ts
from skiff.metadata.transactions.state import TxnRecord, TxnState

P0 = ("t", 0)
P1 = ("t", 1)


def _ids() -> itertools.count[int]:
    return itertools.count(1000)


def _init(record: TxnRecord | None = None, now_ms: int = 0, **kw: object) -> ts.Outcome:
    ids = kw.pop("ids", _ids())
    return ts.init_producer_id(
        record,
        transactional_id="tx",
        timeout_ms=int(kw.pop("timeout_ms", 60_000)),  # type: ignore[call-overload]
        now_ms=now_ms,
        new_producer_id=lambda: next(ids),  # type: ignore[call-overload]
        **kw,  # type: ignore[arg-type]
    )


def _ongoing() -> TxnRecord:
    rec = _init().record
    assert rec is not None
    out = ts.add_partitions(
        rec, producer_id=rec.producer_id, epoch=rec.producer_epoch, partitions=[P0], now_ms=5
    )
    assert out.ok and out.record is not None
    return out.record


def test_new_transactional_id_gets_a_producer_id_at_epoch_0() -> None:
    out = _init()
    assert out.ok and (out.producer_id, out.producer_epoch) == (1000, 0)
    assert out.record is not None and out.record.state is TxnState.EMPTY


def test_each_init_bumps_the_epoch_and_fences_the_previous_instance() -> None:
    first = _init().record
    assert first is not None
    second = _init(first)
    assert second.ok and second.producer_epoch == 1 and second.producer_id == first.producer_id
    assert second.record is not None
    stale = ts.add_partitions(
        second.record, producer_id=first.producer_id, epoch=0, partitions=[P0], now_ms=1
    )
    assert stale.error == ts.PRODUCER_FENCED


def test_epoch_exhaustion_moves_to_a_new_producer_id_and_a_retry_is_recognised() -> None:
    rec = TxnRecord("tx", 7, ts.MAX_EPOCH - 1, 60_000)
    out = _init(rec, expected=(7, ts.MAX_EPOCH - 1))
    assert out.ok and out.producer_id == 1000 and out.producer_epoch == 0
    assert out.record is not None
    retry = _init(out.record, expected=(7, ts.MAX_EPOCH - 1))
    assert retry.ok and (retry.producer_id, retry.producer_epoch) == (1000, 0) and retry.record is None


def test_init_with_an_unknown_expected_producer_is_fenced() -> None:
    rec = _init().record
    assert _init(rec, expected=(999, 3)).error == ts.PRODUCER_FENCED


def test_init_while_ongoing_aborts_with_a_fenced_epoch_and_asks_to_retry() -> None:
    rec = _ongoing()
    out = _init(rec, now_ms=10)
    assert out.error == ts.CONCURRENT_TRANSACTIONS
    assert out.record is not None and out.record.state is TxnState.PREPARE_ABORT and out.write_markers
    assert out.record.producer_epoch == rec.producer_epoch + 1
    # the old instance is fenced from now on
    fenced = ts.end_txn(
        out.record, producer_id=rec.producer_id, epoch=rec.producer_epoch, commit=True, now_ms=11
    )
    assert fenced.error == ts.PRODUCER_FENCED
    # while the markers are written the new instance is asked to retry; afterwards it gets the next epoch
    assert _init(out.record).error == ts.CONCURRENT_TRANSACTIONS
    done = ts.complete(out.record, now_ms=12)
    again = _init(done)
    assert again.ok and again.producer_epoch == rec.producer_epoch + 2


def test_commit_path_and_retries() -> None:
    rec = _ongoing()
    pid, epoch = rec.producer_id, rec.producer_epoch
    end = ts.end_txn(rec, producer_id=pid, epoch=epoch, commit=True, now_ms=6)
    assert end.ok and end.write_markers and end.record is not None
    assert end.record.state is TxnState.PREPARE_COMMIT
    assert (
        ts.end_txn(end.record, producer_id=pid, epoch=epoch, commit=True, now_ms=7).error
        == ts.CONCURRENT_TRANSACTIONS
    )
    assert (
        ts.end_txn(end.record, producer_id=pid, epoch=epoch, commit=False, now_ms=7).error
        == ts.INVALID_TXN_STATE
    )
    assert ts.add_partitions(end.record, producer_id=pid, epoch=epoch, partitions=[P1], now_ms=7).error == (
        ts.CONCURRENT_TRANSACTIONS
    )
    done = ts.complete(end.record, now_ms=8)
    assert done.state is TxnState.COMPLETE_COMMIT and not done.partitions
    retry = ts.end_txn(done, producer_id=pid, epoch=epoch, commit=True, now_ms=9)
    assert retry.ok and retry.record is None and not retry.write_markers
    assert (
        ts.end_txn(done, producer_id=pid, epoch=epoch, commit=False, now_ms=9).error == ts.INVALID_TXN_STATE
    )


def test_end_txn_without_a_transaction_is_invalid() -> None:
    rec = _init().record
    assert rec is not None
    out = ts.end_txn(rec, producer_id=rec.producer_id, epoch=0, commit=True, now_ms=1)
    assert out.error == ts.INVALID_TXN_STATE


def test_unknown_producer_id_mapping() -> None:
    rec = _init().record
    assert ts.add_partitions(rec, producer_id=5, epoch=0, partitions=[P0], now_ms=1).error == (
        ts.INVALID_PRODUCER_ID_MAPPING
    )
    assert (
        ts.add_offsets(None, producer_id=5, epoch=0, group_id="g", now_ms=1).error
        == ts.INVALID_PRODUCER_ID_MAPPING
    )


def test_timeout_bounds() -> None:
    assert _init(timeout_ms=0).error == ts.INVALID_TRANSACTION_TIMEOUT
    assert _init(timeout_ms=ts.DEFAULT_TRANSACTION_MAX_TIMEOUT_MS + 1).error == ts.INVALID_TRANSACTION_TIMEOUT


def test_expiry_aborts_and_fences_only_after_the_timeout() -> None:
    rec = _ongoing()  # started at 5, timeout 60 s
    assert ts.expire(rec, now_ms=5 + 60_000) is None
    out = ts.expire(rec, now_ms=5 + 60_001)
    assert out is not None and out.record is not None and out.write_markers
    assert out.record.state is TxnState.PREPARE_ABORT and out.record.producer_epoch == rec.producer_epoch + 1


def test_adding_known_partitions_writes_nothing_and_offsets_join() -> None:
    rec = _ongoing()
    same = ts.add_partitions(
        rec, producer_id=rec.producer_id, epoch=rec.producer_epoch, partitions=[P0], now_ms=6
    )
    assert same.ok and same.record is None
    out = ts.add_offsets(rec, producer_id=rec.producer_id, epoch=rec.producer_epoch, group_id="g", now_ms=6)
    assert out.ok and out.record is not None and out.record.groups == {"g"} and out.record.partitions == {P0}
    assert (
        ts.verify_partitions(
            out.record, producer_id=rec.producer_id, epoch=rec.producer_epoch, partitions=[P0]
        )
        == 0
    )
    assert (
        ts.verify_partitions(
            out.record, producer_id=rec.producer_id, epoch=rec.producer_epoch, partitions=[P1]
        )
        == ts.INVALID_TXN_STATE
    )


def test_a_transactional_batch_is_stored_only_in_its_ongoing_transaction() -> None:
    """check_produce (the file commit's rule): Kafka's Produce codes, each with a message."""
    rec = _ongoing()
    pid, epoch = rec.producer_id, rec.producer_epoch

    def code(
        record: TxnRecord | None, producer_id: int = pid, epoch_: int = epoch, part: ts.Partition = P0
    ) -> int:
        refused = ts.check_produce(record, producer_id=producer_id, epoch=epoch_, partition=part)
        assert refused is None or refused[1]
        return 0 if refused is None else refused[0]

    assert code(rec) == 0
    assert code(rec, part=P1) == ts.INVALID_TXN_STATE  # not added
    assert code(None) == ts.INVALID_PRODUCER_EPOCH  # an unknown transactional id
    assert code(rec, producer_id=pid + 1) == ts.INVALID_PRODUCER_EPOCH  # another producer's id
    assert code(rec, epoch_=epoch - 1) == code(rec, epoch_=epoch + 1) == ts.INVALID_PRODUCER_EPOCH
    ended = ts.end_txn(rec, producer_id=pid, epoch=epoch, commit=False, now_ms=6).record
    assert ended is not None and code(ended) == ts.INVALID_TXN_STATE  # PREPARE_ABORT: ending
    assert code(ts.complete(ended, now_ms=7)) == ts.INVALID_TXN_STATE
    expired = ts.expire(rec, now_ms=rec.start_ms + rec.timeout_ms + 1)
    assert expired is not None and expired.record is not None
    assert code(expired.record) == ts.INVALID_PRODUCER_EPOCH  # aborted with its epoch bumped


ALLOWED = {
    (TxnState.EMPTY, TxnState.ONGOING),
    (TxnState.COMPLETE_COMMIT, TxnState.ONGOING),
    (TxnState.COMPLETE_ABORT, TxnState.ONGOING),
    (TxnState.ONGOING, TxnState.PREPARE_COMMIT),
    (TxnState.ONGOING, TxnState.PREPARE_ABORT),
    (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT),
    (TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT),
    (TxnState.COMPLETE_COMMIT, TxnState.EMPTY),
    (TxnState.COMPLETE_ABORT, TxnState.EMPTY),
    (TxnState.EMPTY, TxnState.EMPTY),
}

OPS = st.lists(
    st.tuples(
        st.sampled_from(["init", "add", "offsets", "commit", "abort", "complete", "expire", "tick"]),
        st.booleans(),  # use the current epoch (True) or a stale one
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_random_sequences_follow_kafkas_transitions(ops: list[tuple[str, bool]]) -> None:
    ids = _ids()
    now = 0
    first = _init(ids=ids).record
    assert first is not None
    rec: TxnRecord = first
    highest = (rec.producer_id, rec.producer_epoch)
    for op, current in ops:
        now += 1_000
        epoch = rec.producer_epoch if current else rec.producer_epoch - 1
        out: ts.Outcome | None
        if op == "init":
            out = _init(rec, now_ms=now, ids=ids)
        elif op == "add":
            out = ts.add_partitions(
                rec, producer_id=rec.producer_id, epoch=epoch, partitions=[P0], now_ms=now
            )
        elif op == "offsets":
            out = ts.add_offsets(rec, producer_id=rec.producer_id, epoch=epoch, group_id="g", now_ms=now)
        elif op in ("commit", "abort"):
            out = ts.end_txn(rec, producer_id=rec.producer_id, epoch=epoch, commit=op == "commit", now_ms=now)
        elif op == "complete":
            out = ts.Outcome(0, ts.complete(rec, now_ms=now)) if rec.state.preparing else None
        elif op == "expire":
            out = ts.expire(rec, now_ms=now)
        else:
            now += 120_000
            out = None
        if out is None:
            continue
        if not current and op in ("add", "offsets", "commit", "abort"):
            assert out.error == ts.PRODUCER_FENCED  # a stale epoch never changes anything
        if out.record is None:
            continue
        new = out.record
        assert (rec.state, new.state) in ALLOWED or new.state is rec.state, (rec.state, new.state, op)
        assert out.write_markers == (new.state.preparing and not rec.state.preparing)
        # (producer id, epoch) only moves forward
        assert (new.producer_id, new.producer_epoch) >= highest
        highest = (new.producer_id, new.producer_epoch)
        if new.state is TxnState.ONGOING:
            assert new.start_ms >= 0
        rec = new
