"""Transactional producers' state in the database: the `transactions` table, changed by the
pure rules of `metadata.transactions.state`.

Every operation is one write transaction that locks the transactional id's row (`SELECT
... FOR UPDATE` on PostgreSQL; SQLite has one writer at a time), applies the rule to the
stored record and writes the result back. That row lock is the coordinator fencing: two
agents that both believe they coordinate a transactional id (their views of who is alive
differ for a heartbeat interval) still change its state one at a time, each from the
state the other left, so a request is validated against the durable state in the same
transaction that changes it, and a stale coordinator can only get an error.

Partitions are stored as (topic id as text, partition); the agent resolves names. A
partition that does not exist fails the whole AddPartitionsToTxn request, as in Kafka:
UNKNOWN_TOPIC_OR_PARTITION for it, OPERATION_NOT_ATTEMPTED (55) for the others.

Bounds (the agent's `transaction_max_partitions` / `transaction_max_offsets`, passed with
each request): a transaction may hold at most `max_partitions` partitions, each group added
by AddOffsetsToTxn counting as one (in Kafka it adds the group's __consumer_offsets
partition); an AddPartitionsToTxn or AddOffsetsToTxn that would take it beyond changes
nothing and answers POLICY_VIOLATION (44), for every partition asked for. Kafka has no such
limit; "request parameters do not satisfy the configured policy" is its closest code. The
Java producer makes it an abortable error in AddPartitionsToTxn (the application aborts and
may retry smaller transactions), a fatal one in AddOffsetsToTxn (as any code it does not
expect there). The staged offsets' bound is `metadata.transactions.offsets`'s.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from skiff.metadata.db import read_tx, write_tx
from skiff.metadata.errors import OPERATION_NOT_ATTEMPTED, POLICY_VIOLATION, UNKNOWN_TOPIC_OR_PARTITION
from skiff.metadata.groups import offsets as groups
from skiff.metadata.rows import IDS_PER_STATEMENT, Db, allocate_producer_id
from skiff.metadata.schema import partitions as partitions_table
from skiff.metadata.schema import transactions, txn_aborted, txn_open
from skiff.metadata.transactions import offsets as txn_offsets
from skiff.metadata.transactions import state as txn_state
from skiff.metadata.transactions.state import Outcome, Partition, TxnRecord, TxnState
from skiff.metadata.types import GroupOffset, OffsetCommitResult
from sqlalchemy import Connection, delete, func, insert, select, tuple_, update
from sqlalchemy.exc import IntegrityError

_T = transactions.c


@dataclass(frozen=True)
class PartitionsOutcome:
    """AddPartitionsToTxn's answer: one code per partition asked for."""

    errors: dict[Partition, int]


def _record_of(row: Any) -> TxnRecord:
    return TxnRecord(
        transactional_id=row.transactional_id,
        producer_id=row.producer_id,
        producer_epoch=row.producer_epoch,
        timeout_ms=row.timeout_ms,
        state=TxnState(row.state),
        partitions=frozenset((str(t), int(p)) for t, p in row.partitions),
        groups=frozenset(row.groups),
        start_ms=row.start_ms,
        last_update_ms=row.last_update_ms,
        last_producer_id=row.last_producer_id,
        last_epoch=row.last_epoch,
    )


def _values_of(record: TxnRecord) -> dict[str, Any]:
    return {
        "producer_id": record.producer_id,
        "producer_epoch": record.producer_epoch,
        "last_producer_id": record.last_producer_id,
        "last_epoch": record.last_epoch,
        "timeout_ms": record.timeout_ms,
        "state": record.state.value,
        "partitions": sorted([t, p] for t, p in record.partitions),
        "groups": sorted(record.groups),
        "start_ms": record.start_ms,
        "last_update_ms": record.last_update_ms,
    }


def load(conn: Connection, transactional_id: str, *, for_update: bool) -> TxnRecord | None:
    stmt = select(transactions).where(_T.transactional_id == transactional_id)
    if for_update:
        stmt = stmt.with_for_update()
    row = conn.execute(stmt).first()
    return None if row is None else _record_of(row)


def load_for_commit(conn: Connection, transactional_ids: Sequence[str]) -> dict[str, TxnRecord]:
    """The records of a file commit's transactional ids (one statement per
    IDS_PER_STATEMENT ids; ids without a row are absent), read without a row lock.

    No lock is needed because the commit has already locked its partitions: a transaction
    ends in a partition only by its marker's commit, which must lock that partition too.
    Either that commit came first, and this read (a later statement: READ COMMITTED on
    PostgreSQL, one writer at a time on SQLite) sees its transaction no longer ongoing,
    or it waits for this commit, and the batch stored here lands before the marker, inside
    the transaction the marker ends. EndTxn, a timeout or a fencing InitProducerId that
    commits after this read only moves the record to PREPARE_*: its markers still come
    after. Locking the rows instead would queue every commit behind EndTxn and the
    coordinator's scans."""
    out: dict[str, TxnRecord] = {}
    ids = sorted(set(transactional_ids))
    for i in range(0, len(ids), IDS_PER_STATEMENT):
        rows = conn.execute(
            select(transactions).where(_T.transactional_id.in_(ids[i : i + IDS_PER_STATEMENT]))
        )
        out.update((r.transactional_id, _record_of(r)) for r in rows)
    return out


def store(conn: Connection, before: TxnRecord | None, after: TxnRecord) -> None:
    values = _values_of(after)
    if before is None:
        conn.execute(insert(transactions).values(transactional_id=after.transactional_id, **values))
    else:
        conn.execute(
            update(transactions).where(_T.transactional_id == after.transactional_id).values(**values)
        )


def _beyond(record: TxnRecord, max_partitions: int | None) -> bool:
    """Does the transaction hold more than `max_partitions` partitions? Each group added by
    AddOffsetsToTxn counts as one: in Kafka it adds the group's __consumer_offsets partition."""
    return max_partitions is not None and len(record.partitions) + len(record.groups) > max_partitions


def _missing_partitions(conn: Connection, wanted: Iterable[Partition]) -> set[Partition]:
    wanted = set(wanted)
    found: set[Partition] = set()
    keys = sorted(wanted)
    for i in range(0, len(keys), IDS_PER_STATEMENT):
        part = keys[i : i + IDS_PER_STATEMENT]
        rows = conn.execute(
            select(partitions_table.c.topic_id, partitions_table.c.partition).where(
                tuple_(partitions_table.c.topic_id, partitions_table.c.partition).in_(
                    [(uuid.UUID(t), p) for t, p in part]
                )
            )
        )
        found.update((str(r.topic_id), int(r.partition)) for r in rows)
    return wanted - found


class Transactions:
    """The transactional operations, each in its own write transaction."""

    def __init__(self, db: Db, *, max_timeout_ms: int = txn_state.DEFAULT_TRANSACTION_MAX_TIMEOUT_MS) -> None:
        self._db = db
        self.max_timeout_ms = max_timeout_ms

    def init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None = None
    ) -> Outcome:
        try:
            return self._init_producer_id(transactional_id, timeout_ms, expected)
        except IntegrityError:
            # Two first InitProducerIds of one new id raced to insert its row (there was no
            # row to lock): the loser now finds the winner's row and bumps its epoch.
            return self._init_producer_id(transactional_id, timeout_ms, expected)

    def _init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None
    ) -> Outcome:
        with write_tx(self._db.engine) as conn:
            before = load(conn, transactional_id, for_update=True)
            out = txn_state.init_producer_id(
                before,
                transactional_id=transactional_id,
                timeout_ms=timeout_ms,
                now_ms=self._db.clock(),
                new_producer_id=lambda: allocate_producer_id(conn),
                expected=expected,
                max_timeout_ms=self.max_timeout_ms,
            )
            if out.record is not None:
                store(conn, before, out.record)
        return out

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: Sequence[Partition],
        max_partitions: int | None = None,
    ) -> PartitionsOutcome:
        with write_tx(self._db.engine) as conn:
            before = load(conn, transactional_id, for_update=True)
            missing = _missing_partitions(conn, partitions)
            if missing:
                return PartitionsOutcome(
                    {
                        p: UNKNOWN_TOPIC_OR_PARTITION if p in missing else OPERATION_NOT_ATTEMPTED
                        for p in partitions
                    }
                )
            out = txn_state.add_partitions(
                before, producer_id=producer_id, epoch=epoch, partitions=partitions, now_ms=self._db.clock()
            )
            if out.record is not None and _beyond(out.record, max_partitions):
                return PartitionsOutcome(dict.fromkeys(partitions, POLICY_VIOLATION))
            if out.record is not None:
                store(conn, before, out.record)
        return PartitionsOutcome(dict.fromkeys(partitions, out.error))

    def verify_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: Sequence[Partition]
    ) -> int:
        with read_tx(self._db.engine) as conn:
            record = load(conn, transactional_id, for_update=False)
        return txn_state.verify_partitions(
            record, producer_id=producer_id, epoch=epoch, partitions=partitions
        )

    def add_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        group_id: str,
        max_partitions: int | None = None,
    ) -> int:
        with write_tx(self._db.engine) as conn:
            before = load(conn, transactional_id, for_update=True)
            out = txn_state.add_offsets(
                before, producer_id=producer_id, epoch=epoch, group_id=group_id, now_ms=self._db.clock()
            )
            if out.record is not None and _beyond(out.record, max_partitions):
                return POLICY_VIOLATION
            if out.record is not None:
                store(conn, before, out.record)
        return out.error

    def txn_offset_commit(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        group_id: str,
        offsets: Sequence[GroupOffset],
        max_offsets: int | None = None,
    ) -> list[OffsetCommitResult]:
        """TxnOffsetCommit: the offsets are staged until the transaction completes
        (metadata.transactions.offsets)."""
        if not offsets:
            return []
        with write_tx(self._db.engine) as conn:
            record = load(conn, transactional_id, for_update=True)
            return txn_offsets.stage_in(
                conn,
                record,
                transactional_id=transactional_id,
                producer_id=producer_id,
                epoch=epoch,
                group_id=group_id,
                offsets=offsets,
                now_ms=self._db.clock(),
                max_offsets=max_offsets,
            )

    def fetch_stable_offsets(
        self, group_id: str, topics: Sequence[str] | None
    ) -> tuple[list[GroupOffset], set[tuple[str, int]]]:
        """OffsetFetch with require_stable, in one read transaction: the group's committed
        offsets, and the (topic, partition)s with offsets staged by unfinished transactions."""
        with read_tx(self._db.engine) as conn:
            return groups.fetch_offsets_in(conn, group_id, topics), txn_offsets.unstable(
                conn, group_id, topics
            )

    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> Outcome:
        """EndTxn: on success with `write_markers`, the record is PREPARE_* and the caller
        (the coordinator) writes the markers to `out.record.partitions`, then `complete`s."""
        with write_tx(self._db.engine) as conn:
            before = load(conn, transactional_id, for_update=True)
            out = txn_state.end_txn(
                before, producer_id=producer_id, epoch=epoch, commit=commit, now_ms=self._db.clock()
            )
            if out.record is not None:
                store(conn, before, out.record)
        return out

    def complete(self, transactional_id: str, producer_id: int, epoch: int) -> TxnRecord | None:
        """Markers are written: PREPARE_* -> COMPLETE_*, if the record is still the prepared
        transaction of that producer id and epoch (another coordinator may have finished it
        first: then nothing changes and None is returned)."""
        with write_tx(self._db.engine) as conn:
            return complete_in(conn, transactional_id, producer_id, epoch, self._db.clock())

    def expire(self, transactional_ids: Iterable[str] | None = None) -> list[Outcome]:
        """Abort (with a fenced epoch) every ONGOING transaction past its timeout, among
        `transactional_ids` (default: all). Returns those whose markers must be written."""
        now_ms = self._db.clock()
        with write_tx(self._db.engine) as conn:
            # Only the rows already due are locked: every agent runs this every second, and
            # locking every ongoing transaction would queue their producers' requests behind it.
            stmt = (
                select(transactions)
                .where(
                    _T.state == TxnState.ONGOING.value,
                    _T.start_ms >= 0,
                    _T.start_ms + _T.timeout_ms < now_ms,
                )
                .with_for_update()
            )
            if transactional_ids is not None:
                stmt = stmt.where(_T.transactional_id.in_(list(transactional_ids)))
            due = []
            for row in conn.execute(stmt).all():
                before = _record_of(row)
                out = txn_state.expire(before, now_ms=now_ms)
                if out is not None and out.record is not None:
                    store(conn, before, out.record)
                    due.append(out)
        return due

    def preparing(self) -> list[TxnRecord]:
        """Transactions whose markers are still to be written (a coordinator died after
        PREPARE): the next coordinator finishes them."""
        with read_tx(self._db.engine) as conn:
            rows = conn.execute(
                select(transactions).where(
                    _T.state.in_([TxnState.PREPARE_COMMIT.value, TxnState.PREPARE_ABORT.value])
                )
            ).all()
        return [_record_of(r) for r in rows]

    def describe(self, transactional_ids: Sequence[str]) -> dict[str, TxnRecord | None]:
        with read_tx(self._db.engine) as conn:
            rows = conn.execute(
                select(transactions).where(_T.transactional_id.in_(list(transactional_ids)))
            ).all()
        found = {r.transactional_id: _record_of(r) for r in rows}
        return {t: found.get(t) for t in transactional_ids}

    def list(
        self, states: Sequence[str] = (), producer_ids: Sequence[int] = (), duration_filter_ms: int = -1
    ) -> list[TxnRecord]:
        """ListTransactions (KIP-664): filters by state names, producer ids, and (KIP-994)
        transactions running longer than `duration_filter_ms`."""
        stmt = select(transactions)
        if states:
            stmt = stmt.where(_T.state.in_(list(states)))
        if producer_ids:
            stmt = stmt.where(_T.producer_id.in_(list(producer_ids)))
        with read_tx(self._db.engine) as conn:
            records = [_record_of(r) for r in conn.execute(stmt).all()]
        if duration_filter_ms >= 0:
            now_ms = self._db.clock()
            records = [r for r in records if r.start_ms >= 0 and now_ms - r.start_ms > duration_filter_ms]
        return records

    def delete_expired_ids(self, older_than_ms: int) -> int:
        """Kafka's transactional.id.expiration.ms: forget ids idle (no transaction open or
        being completed) since before `older_than_ms`."""
        with write_tx(self._db.engine) as conn:
            result = conn.execute(
                delete(transactions).where(
                    _T.last_update_ms < older_than_ms,
                    _T.state.in_(
                        [TxnState.EMPTY.value, TxnState.COMPLETE_COMMIT.value, TxnState.COMPLETE_ABORT.value]
                    ),
                )
            )
        return int(result.rowcount or 0)


def complete_in(
    conn: Connection, transactional_id: str, producer_id: int, epoch: int, now_ms: int
) -> TxnRecord | None:
    """`Transactions.complete` inside the caller's write transaction (the marker commit)."""
    before = load(conn, transactional_id, for_update=True)
    if (
        before is None
        or not before.state.preparing
        or (before.producer_id, before.producer_epoch) != (producer_id, epoch)
    ):
        return None
    after = txn_state.complete(before, now_ms=now_ms)
    store(conn, before, after)
    if before.groups:  # offsets staged by TxnOffsetCommit become visible, or are dropped
        txn_offsets.settle(conn, transactional_id, commit=after.state is TxnState.COMPLETE_COMMIT)
    return after


def apply_commit_events(
    conn: Connection,
    events: Sequence[tuple[uuid.UUID, int, int, int, int]],
    completes: Sequence[tuple[str, int, int]],
    now_ms: int,
) -> None:
    """Inside a file commit's write transaction (its partitions locked): the stored
    transactional batches open their producer's transaction in the partition (`txn_open`,
    first offset kept), markers close it (an ABORT also records the aborted range in
    `txn_aborted`), and the transactions whose markers the file carries complete.

    `events`: (topic id, partition, producer id, control type (-1 data, 0 ABORT, 1 COMMIT),
    offset), in commit order."""
    if events:
        _apply_events(conn, events)
    for transactional_id, producer_id, epoch in completes:
        complete_in(conn, transactional_id, producer_id, epoch, now_ms)


def _apply_events(conn: Connection, events: Sequence[tuple[uuid.UUID, int, int, int, int]]) -> None:
    keys = sorted({(t, p, pid) for t, p, pid, _, _ in events})
    first: dict[tuple[uuid.UUID, int, int], int] = {}
    for i in range(0, len(keys), IDS_PER_STATEMENT):
        part = keys[i : i + IDS_PER_STATEMENT]
        rows = conn.execute(
            select(txn_open).where(
                tuple_(txn_open.c.topic_id, txn_open.c.partition, txn_open.c.producer_id).in_(part)
            )
        )
        first.update(((r.topic_id, r.partition, r.producer_id), r.first_offset) for r in rows)
    stored = set(first)
    inserts: dict[tuple[uuid.UUID, int, int], int] = {}
    deletes: set[tuple[uuid.UUID, int, int]] = set()
    aborted: list[dict[str, Any]] = []
    for t, p, pid, control_type, offset in events:
        k = (t, p, pid)
        if control_type < 0:
            if k not in first:
                first[k] = offset
                inserts[k] = offset
            continue
        opened = first.pop(k, None)
        if opened is None:
            continue  # a marker for a transaction that wrote nothing here
        if k in inserts:
            del inserts[k]
        if k in stored:
            deletes.add(k)
        if control_type == 0:
            aborted.append(
                {
                    "topic_id": t,
                    "partition": p,
                    "producer_id": pid,
                    "first_offset": opened,
                    "last_offset": offset,
                }
            )
    for t, p, pid in sorted(deletes):
        conn.execute(
            delete(txn_open).where(
                txn_open.c.topic_id == t, txn_open.c.partition == p, txn_open.c.producer_id == pid
            )
        )
    if inserts:
        conn.execute(
            insert(txn_open),
            [
                {"topic_id": t, "partition": p, "producer_id": pid, "first_offset": o}
                for (t, p, pid), o in inserts.items()
            ],
        )
    if aborted:
        conn.execute(insert(txn_aborted), aborted)


def stable_state(conn: Connection, keys: Sequence[tuple[uuid.UUID, int]]) -> dict[tuple[uuid.UUID, int], int]:
    """The first offset of each partition's oldest open transaction (partitions with none
    are absent: their last stable offset is the high watermark)."""
    out: dict[tuple[uuid.UUID, int], int] = {}
    wanted = sorted(set(keys))
    for i in range(0, len(wanted), IDS_PER_STATEMENT):
        part = wanted[i : i + IDS_PER_STATEMENT]
        rows = conn.execute(
            select(txn_open.c.topic_id, txn_open.c.partition, func.min(txn_open.c.first_offset).label("lso"))
            .where(tuple_(txn_open.c.topic_id, txn_open.c.partition).in_(part))
            .group_by(txn_open.c.topic_id, txn_open.c.partition)
        )
        out.update(((r.topic_id, r.partition), int(r.lso)) for r in rows)
    return out


def aborted_in(
    conn: Connection, topic_id: uuid.UUID, partition: int, from_offset: int, below_offset: int
) -> list[tuple[int, int]]:
    """(producer id, first offset) of the aborted transactions that overlap
    [from_offset, below_offset): what a read_committed Fetch answers with."""
    rows = conn.execute(
        select(txn_aborted.c.producer_id, txn_aborted.c.first_offset)
        .where(
            txn_aborted.c.topic_id == topic_id,
            txn_aborted.c.partition == partition,
            txn_aborted.c.last_offset >= from_offset,
            txn_aborted.c.first_offset < below_offset,
        )
        .order_by(txn_aborted.c.first_offset)
    )
    return [(int(r.producer_id), int(r.first_offset)) for r in rows]
