"""Offsets committed inside a transaction (TxnOffsetCommit): the `txn_offsets` table.

TxnOffsetCommit stages a group's offsets under the transactional id, in one write
transaction that locks the id's row and checks the producer (its id and epoch, as
`metadata.transactions.state` does: INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED) and that the
group was added to the ongoing transaction (AddOffsetsToTxn; else INVALID_TXN_STATE, so
a zombie cannot stage offsets after its transaction ended). Each offset is checked as
OffsetCommit checks it (`metadata.groups.offsets`). The staged offsets are invisible to
OffsetFetch until the transaction completes: `settle`, called by
`metadata.transactions.store.complete_in` in the transaction that completes it, moves them into
`group_offsets` on COMMIT (the last staged offset of a partition wins) and deletes them on
ABORT.

Bound: one transaction may hold at most `max_offsets` staged offsets (distinct (group,
topic, partition) keys, across its TxnOffsetCommit requests; the agent's
`transaction_max_offsets`). A request that would take it beyond is refused whole with
POLICY_VIOLATION (44), staging nothing: Kafka has no such limit, so no code of its own;
POLICY_VIOLATION is the one Kafka uses for "request parameters do not satisfy the configured
policy" (the Java producer makes it fatal in TxnOffsetCommit, as any code it does not expect
there). Re-committing an already staged partition does not count again (the last offset
wins).

`unstable` answers OffsetFetch's `require_stable` (KIP-447): the partitions of a group that
some unfinished transaction holds staged offsets for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from skiff.metadata import errors
from skiff.metadata.errors import POLICY_VIOLATION
from skiff.metadata.groups import offsets_log
from skiff.metadata.groups.offsets import _check, _partition_counts, _row
from skiff.metadata.rows import upsert
from skiff.metadata.schema import group_offsets, txn_offsets
from skiff.metadata.transactions import state as txn_state
from skiff.metadata.transactions.state import TxnRecord
from skiff.metadata.types import GroupOffset, OffsetCommitResult
from sqlalchemy import Connection, delete, func, select

_O = txn_offsets.c


def stage_in(
    conn: Connection,
    record: TxnRecord | None,
    *,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    group_id: str,
    offsets: Sequence[GroupOffset],
    now_ms: int,
    max_offsets: int | None = None,
) -> list[OffsetCommitResult]:
    """TxnOffsetCommit inside the caller's write transaction, `record` the transactional
    id's locked row: one answer per offset, same order (see the module docstring)."""
    if record is None or record.producer_id != producer_id:
        code = errors.INVALID_PRODUCER_ID_MAPPING
    elif record.producer_epoch != epoch:
        code = errors.PRODUCER_FENCED
    elif record.state is not txn_state.TxnState.ONGOING or group_id not in record.groups:
        code = errors.INVALID_TXN_STATE
    else:
        code = errors.NONE
    if code:
        return [OffsetCommitResult(code)] * len(offsets)
    counts = _partition_counts(conn, sorted({o.topic for o in offsets}))
    results: list[OffsetCommitResult] = []
    latest: dict[tuple[str, int], dict[str, Any]] = {}
    for o in offsets:
        result = _check(o, counts.get(o.topic))
        results.append(result)
        if not result.error_code:
            latest[(o.topic, o.partition)] = {
                "transactional_id": transactional_id,
                **_row(group_id, o, now_ms),
            }
    if (
        latest
        and max_offsets is not None
        and (
            len(latest) > max_offsets or _staged_after(conn, transactional_id, group_id, latest) > max_offsets
        )
    ):
        return [OffsetCommitResult(POLICY_VIOLATION)] * len(offsets)
    if latest:
        upsert(
            conn, txn_offsets, ["transactional_id", "group_id", "topic", "partition"], list(latest.values())
        )
    return results


def _staged_after(
    conn: Connection, transactional_id: str, group_id: str, latest: dict[tuple[str, int], Any]
) -> int:
    """How many offsets the transaction would hold once `latest` (of `group_id`) is staged.
    Reads the keys the group has staged already: at most the bound, which is enforced."""
    mine = _O.transactional_id == transactional_id
    held = conn.execute(select(func.count()).select_from(txn_offsets).where(mine)).scalar_one()
    already = conn.execute(select(_O.topic, _O.partition).where(mine, _O.group_id == group_id))
    again = {(r.topic, int(r.partition)) for r in already} & latest.keys()
    return int(held) + len(latest) - len(again)


def settle(conn: Connection, transactional_id: str, *, commit: bool) -> None:
    """Inside the completing transaction: COMMIT moves the staged offsets into the groups'
    committed offsets, ABORT drops them."""
    where = _O.transactional_id == transactional_id
    if commit:
        staged = conn.execute(select(txn_offsets).where(where)).all()
        if staged:
            rows = [
                {c.name: getattr(r, c.name) for c in txn_offsets.c if c.name in group_offsets.c}
                for r in staged
            ]
            offsets_log.place(conn, rows)  # their places in __consumer_offsets
            upsert(conn, group_offsets, ["group_id", "topic", "partition"], rows)
    conn.execute(delete(txn_offsets).where(where))


def unstable(conn: Connection, group_id: str, topics: Sequence[str] | None) -> set[tuple[str, int]]:
    """The partitions of a group (of `topics`, or all) with offsets staged by an unfinished
    transaction: OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for them."""
    stmt = select(_O.topic, _O.partition).where(_O.group_id == group_id)
    if topics is not None:
        stmt = stmt.where(_O.topic.in_(sorted(set(topics))))
    return {(r.topic, int(r.partition)) for r in conn.execute(stmt)}
