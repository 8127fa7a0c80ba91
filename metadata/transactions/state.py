"""Kafka's transaction state machine, pure: what each transactional request does to one
transactional id's record (Kafka's `TransactionCoordinator` + `TransactionMetadata`).

The metadata service keeps one `TxnRecord` per transactional id (a row) and applies these
functions inside the write transaction that locks that row, so the record in the database
is always one of the states below and a coordinator agent that dies in the middle of a
commit leaves a state the next coordinator finishes (PREPARE_* -> markers -> COMPLETE_*).

States and transitions (Kafka's names):

    EMPTY --AddPartitions/AddOffsets--> ONGOING --EndTxn(commit)--> PREPARE_COMMIT --markers--> COMPLETE_COMMIT
                                             \\---EndTxn(abort)---> PREPARE_ABORT  --markers--> COMPLETE_ABORT
    COMPLETE_* --AddPartitions/AddOffsets--> ONGOING
    ONGOING --timeout or InitProducerId of a new instance--> PREPARE_ABORT (epoch bumped: the old
    producer instance is fenced)

Errors, as Kafka answers them:

- a producer id that is not the record's: INVALID_PRODUCER_ID_MAPPING (49);
- an older epoch: PRODUCER_FENCED (90) (clients older than the KIP-588 versions get
  INVALID_PRODUCER_EPOCH (47): the agent maps it by request version);
- a request while markers are being written (PREPARE_*): CONCURRENT_TRANSACTIONS (51),
  retriable; InitProducerId while a transaction is ONGOING aborts it first and answers
  CONCURRENT_TRANSACTIONS, so the client retries and gets the bumped epoch;
- EndTxn in EMPTY, or the opposite outcome of the one prepared/completed: INVALID_TXN_STATE (48);
  EndTxn repeating the completed outcome is a retry and succeeds;
- a transaction timeout above `transaction_max_timeout_ms`: INVALID_TRANSACTION_TIMEOUT (50).

Producer ids: the epoch is bumped by every InitProducerId; when it would reach the
int16 limit (32767 - 1, Kafka's `isProducerEpochExhausted`), the producer gets a new
producer id at epoch 0 and the old id is remembered (`last_producer_id`, `last_epoch`)
so a retry of that InitProducerId (KIP-360: the client sends its current id and epoch)
is recognised.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from skiff.metadata.errors import (
    CONCURRENT_TRANSACTIONS,
    INVALID_PRODUCER_EPOCH,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_TRANSACTION_TIMEOUT,
    INVALID_TXN_STATE,
    NONE,
    PRODUCER_FENCED,
)

NO_PRODUCER_ID = -1
NO_EPOCH = -1
MAX_EPOCH = 32767  # int16
DEFAULT_TRANSACTION_MAX_TIMEOUT_MS = 900_000  # Kafka's transaction.max.timeout.ms

Partition = tuple[str, int]  # (topic id as text, partition)


class TxnState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"

    @property
    def preparing(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def completed(self) -> bool:
        return self in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT, TxnState.EMPTY)


@dataclass(frozen=True)
class TxnRecord:
    """One transactional id's state, as stored."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: frozenset[Partition] = frozenset()
    groups: frozenset[str] = frozenset()  # groups with offsets pending in this transaction
    start_ms: int = -1  # when the ongoing transaction began (first AddPartitions/AddOffsets)
    last_update_ms: int = -1
    last_producer_id: int = NO_PRODUCER_ID
    last_epoch: int = NO_EPOCH


@dataclass(frozen=True)
class Outcome:
    """A request's answer and the record to store (None: store nothing)."""

    error: int
    record: TxnRecord | None = None
    # Markers to write before the record may become COMPLETE_*: the partitions, and True
    # for COMMIT markers, False for ABORT.
    write_markers: bool = False
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_EPOCH
    groups: frozenset[str] = field(default_factory=frozenset)

    @property
    def ok(self) -> bool:
        return self.error == NONE


def _epoch_exhausted(epoch: int) -> bool:
    return epoch >= MAX_EPOCH - 1


def init_producer_id(
    record: TxnRecord | None,
    *,
    transactional_id: str,
    timeout_ms: int,
    now_ms: int,
    new_producer_id: Callable[[], int],
    expected: tuple[int, int] | None = None,
    max_timeout_ms: int = DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
) -> Outcome:
    """InitProducerId with a transactional id. `expected` is the (producer id, epoch) a
    KIP-360 client sends when it re-initialises after an error (-1, -1 or None: a new
    producer instance)."""
    if timeout_ms <= 0 or timeout_ms > max_timeout_ms:
        return Outcome(INVALID_TRANSACTION_TIMEOUT)
    if expected is not None and expected[0] == NO_PRODUCER_ID:
        expected = None
    if record is None:
        pid = new_producer_id()
        fresh = TxnRecord(transactional_id, pid, 0, timeout_ms, last_update_ms=now_ms)
        return Outcome(NONE, fresh, producer_id=pid, producer_epoch=0)
    if expected is not None and expected not in (
        (record.producer_id, record.producer_epoch),
        (record.last_producer_id, record.last_epoch),
    ):
        return Outcome(PRODUCER_FENCED)
    if (
        expected is not None
        and expected == (record.last_producer_id, record.last_epoch)
        and record.state.completed
    ):
        # A retry of an InitProducerId that already moved to a new producer id: answer it again.
        return Outcome(NONE, None, producer_id=record.producer_id, producer_epoch=record.producer_epoch)
    if record.state.preparing:
        return Outcome(CONCURRENT_TRANSACTIONS)
    if record.state is TxnState.ONGOING:
        # A new instance (or a timed-out one) takes over: abort what the old one left open,
        # fencing it with a bumped epoch; the client retries and gets the next epoch.
        return Outcome(CONCURRENT_TRANSACTIONS, *_fenced_abort(record, now_ms))
    if _epoch_exhausted(record.producer_epoch):
        pid = new_producer_id()
        bumped = replace(
            record,
            producer_id=pid,
            producer_epoch=0,
            last_producer_id=record.producer_id,
            last_epoch=record.producer_epoch,
        )
    else:
        bumped = replace(
            record,
            producer_epoch=record.producer_epoch + 1,
            last_producer_id=record.producer_id,
            last_epoch=record.producer_epoch,
        )
    bumped = replace(
        bumped,
        timeout_ms=timeout_ms,
        state=TxnState.EMPTY,
        partitions=frozenset(),
        groups=frozenset(),
        start_ms=-1,
        last_update_ms=now_ms,
    )
    return Outcome(NONE, bumped, producer_id=bumped.producer_id, producer_epoch=bumped.producer_epoch)


def _fenced_abort(record: TxnRecord, now_ms: int) -> tuple[TxnRecord, bool]:
    epoch = record.producer_epoch if _epoch_exhausted(record.producer_epoch) else record.producer_epoch + 1
    return (
        replace(record, producer_epoch=epoch, state=TxnState.PREPARE_ABORT, last_update_ms=now_ms),
        True,
    )


def _check_producer(record: TxnRecord | None, producer_id: int, epoch: int) -> int:
    if record is None or record.producer_id != producer_id:
        return INVALID_PRODUCER_ID_MAPPING
    if epoch != record.producer_epoch:
        return PRODUCER_FENCED
    return NONE


def _join(record: TxnRecord, now_ms: int) -> TxnRecord | int:
    """The record with a transaction open (ONGOING), or an error code."""
    if record.state.preparing:
        return CONCURRENT_TRANSACTIONS
    if record.state is TxnState.ONGOING:
        return replace(record, last_update_ms=now_ms)
    return replace(
        record,
        state=TxnState.ONGOING,
        partitions=frozenset(),
        groups=frozenset(),
        start_ms=now_ms,
        last_update_ms=now_ms,
    )


def add_partitions(
    record: TxnRecord | None, *, producer_id: int, epoch: int, partitions: Iterable[Partition], now_ms: int
) -> Outcome:
    """AddPartitionsToTxn: the partitions join the ongoing transaction (opening one)."""
    error = _check_producer(record, producer_id, epoch)
    if error or record is None:
        return Outcome(error)
    wanted = frozenset(partitions)
    if record.state is TxnState.ONGOING and wanted <= record.partitions:
        return Outcome(NONE)  # nothing new: no write
    joined = _join(record, now_ms)
    if isinstance(joined, int):
        return Outcome(joined)
    return Outcome(NONE, replace(joined, partitions=joined.partitions | wanted))


def verify_partitions(
    record: TxnRecord | None, *, producer_id: int, epoch: int, partitions: Iterable[Partition]
) -> int:
    """AddPartitionsToTxn v4+ `verify_only` (KIP-890): are these partitions in the ongoing transaction?"""
    error = _check_producer(record, producer_id, epoch)
    if error or record is None:
        return error
    if record.state is not TxnState.ONGOING or not frozenset(partitions) <= record.partitions:
        return INVALID_TXN_STATE
    return NONE


def check_produce(
    record: TxnRecord | None, *, producer_id: int, epoch: int, partition: Partition
) -> tuple[int, str] | None:
    """May a transactional data batch of `producer_id` at `epoch` be stored in `partition`?
    None if so, else Produce's (code, message), as Kafka's partition leader answers once
    the coordinator's verification (KIP-890 part 1) has failed: a producer id that is not
    the transactional id's current one, or another epoch (fenced, or its transaction timed
    out and was aborted with a bumped epoch): INVALID_PRODUCER_EPOCH (47; the coordinator's
    PRODUCER_FENCED / INVALID_PRODUCER_ID_MAPPING, as AddPartitionsToTxnManager maps them);
    no ongoing transaction holding the partition: INVALID_TXN_STATE (48).

    The file commit applies it to `record` as read in the commit's own database
    transaction (metadata.commits.plan), which is what closes the window between a check
    and the write: see docs/transactions.md."""
    if record is None or record.producer_id != producer_id:
        return (
            INVALID_PRODUCER_EPOCH,
            f"producer id {producer_id} is not the current producer of its transactional id",
        )
    if epoch != record.producer_epoch:
        return (
            INVALID_PRODUCER_EPOCH,
            f"epoch {epoch} of producer {producer_id} is not its current epoch {record.producer_epoch}",
        )
    if record.state is not TxnState.ONGOING:
        return INVALID_TXN_STATE, f"the transaction is not ongoing (state {record.state.value})"
    if partition not in record.partitions:
        return INVALID_TXN_STATE, "the partition was not added to the ongoing transaction"
    return None


def add_offsets(
    record: TxnRecord | None, *, producer_id: int, epoch: int, group_id: str, now_ms: int
) -> Outcome:
    """AddOffsetsToTxn: the group's offsets become part of the transaction."""
    error = _check_producer(record, producer_id, epoch)
    if error or record is None:
        return Outcome(error)
    if record.state is TxnState.ONGOING and group_id in record.groups:
        return Outcome(NONE)
    joined = _join(record, now_ms)
    if isinstance(joined, int):
        return Outcome(joined)
    return Outcome(NONE, replace(joined, groups=joined.groups | {group_id}))


def end_txn(record: TxnRecord | None, *, producer_id: int, epoch: int, commit: bool, now_ms: int) -> Outcome:
    """EndTxn: ONGOING -> PREPARE_COMMIT / PREPARE_ABORT, with markers to write."""
    error = _check_producer(record, producer_id, epoch)
    if error or record is None:
        return Outcome(error)
    state = record.state
    same = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
    preparing_same = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    if state is TxnState.ONGOING:
        prepared = replace(record, state=preparing_same, last_update_ms=now_ms)
        return Outcome(NONE, prepared, write_markers=True, groups=record.groups)
    if state is same:
        return Outcome(NONE)  # a retry of the EndTxn that completed
    if state is preparing_same:
        return Outcome(CONCURRENT_TRANSACTIONS)
    return Outcome(INVALID_TXN_STATE)


def complete(record: TxnRecord, *, now_ms: int) -> TxnRecord:
    """Markers are written: PREPARE_* -> COMPLETE_*, the transaction's partitions cleared."""
    if record.state is TxnState.PREPARE_COMMIT:
        final = TxnState.COMPLETE_COMMIT
    elif record.state is TxnState.PREPARE_ABORT:
        final = TxnState.COMPLETE_ABORT
    else:
        raise ValueError(f"complete() of a transaction in state {record.state.value}")
    return replace(
        record, state=final, partitions=frozenset(), groups=frozenset(), start_ms=-1, last_update_ms=now_ms
    )


def expire(record: TxnRecord, *, now_ms: int) -> Outcome | None:
    """The coordinator's timeout check: an ONGOING transaction older than its timeout is
    aborted and its producer fenced (epoch bumped), as Kafka's `abortTimedOutTransactions`."""
    if record.state is not TxnState.ONGOING or record.start_ms < 0:
        return None
    if now_ms <= record.start_ms + record.timeout_ms:
        return None
    aborted, markers = _fenced_abort(record, now_ms)
    return Outcome(NONE, aborted, write_markers=markers, groups=record.groups)
