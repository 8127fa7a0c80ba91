"""Transactions as the compactor and retention see them: read-only queries over the
`txn_open` / `txn_aborted` tables (written by `metadata.transactions.store`) for planning, and
the deletion of `txn_aborted` rows that can no longer matter.

- The last stable offset (LSO) of a partition is the smallest `txn_open.first_offset`
  (the first offset of its oldest open transaction), else its high watermark. A clean
  never reaches it (Kafka's cleaner stops at the first unstable offset).
- The aborted transactions a clean needs are (producer id, first offset, marker offset)
  rows whose first offset lies below the cleanable end: the cleaner drops those batches
  of that producer in [first offset, marker offset] (Kafka's `CleanedTransactionMetadata`
  reads the same from the segments' transaction indexes).
- A `txn_aborted` row is deleted (a) by retention / DeleteRecords when its marker lies
  below the new log start (the whole range is gone), in the transaction that moves the
  log start; (b) by a compaction swap when the swap removed its ABORT marker (the cleaner
  removes a marker only after every batch of its transaction is gone), in the swap's
  transaction. Either way no read_committed fetch can meet a batch of it again.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping

from skiff.metadata import bitmaps
from skiff.metadata.rows import IDS_PER_STATEMENT
from skiff.metadata.schema import chunks, txn_aborted, txn_open
from sqlalchemy import Connection, delete, func, select, tuple_

# (producer id, first offset, last offset = the ABORT marker's offset)
AbortedRange = tuple[int, int, int]


def last_stable_offsets(conn: Connection, topic_id: uuid.UUID) -> dict[int, int]:
    """Per partition of the topic with an open transaction: the first offset of the oldest
    (partitions absent: their LSO is the high watermark)."""
    o = txn_open.c
    rows = conn.execute(
        select(o.partition, func.min(o.first_offset).label("lso"))
        .where(o.topic_id == topic_id)
        .group_by(o.partition)
    )
    return {int(r.partition): int(r.lso) for r in rows}


def aborted_ranges(
    conn: Connection, topic_id: uuid.UUID, below: Mapping[int, int]
) -> dict[int, list[AbortedRange]]:
    """Per partition in `below`: its aborted transactions whose first offset is below
    `below[partition]`, by first offset."""
    if not below:
        return {}
    a = txn_aborted.c
    rows = conn.execute(
        select(a.partition, a.producer_id, a.first_offset, a.last_offset)
        .where(a.topic_id == topic_id)
        .order_by(a.partition, a.first_offset)
    )
    out: dict[int, list[AbortedRange]] = defaultdict(list)
    for r in rows:
        end = below.get(int(r.partition))
        if end is not None and r.first_offset < end:
            out[int(r.partition)].append((int(r.producer_id), int(r.first_offset), int(r.last_offset)))
    return dict(out)


def drop_aborted_below(conn: Connection, topic_id: uuid.UUID, partition: int, log_start_offset: int) -> int:
    """Delete the partition's aborted transactions whose marker lies below the log start
    (inside the transaction that moves it, under the partition's lock)."""
    a = txn_aborted.c
    result = conn.execute(
        delete(txn_aborted).where(
            a.topic_id == topic_id, a.partition == partition, a.last_offset < log_start_offset
        )
    )
    return int(result.rowcount or 0)


def drop_aborted_without_marker(
    conn: Connection, spans: Mapping[tuple[uuid.UUID, int], tuple[int, int]]
) -> int:
    """After a swap (inside its transaction, chunks already replaced): delete the aborted
    transactions of each partition whose marker offset lies in its swapped span
    [lo, hi] and is present in no chunk any more (the clean removed the marker)."""
    a, c = txn_aborted.c, chunks.c
    gone: list[tuple[uuid.UUID, int, int, int]] = []
    for (tid, part), (lo, hi) in spans.items():
        rows = conn.execute(
            select(a.producer_id, a.first_offset, a.last_offset).where(
                a.topic_id == tid, a.partition == part, a.last_offset >= lo, a.last_offset <= hi
            )
        ).all()
        if not rows:
            continue
        covering = conn.execute(
            select(c.base_offset, c.last_offset, c.present_offsets).where(
                c.topic_id == tid, c.partition == part, c.last_offset >= lo, c.base_offset <= hi
            )
        ).all()
        present = _present_among(covering, (int(r.last_offset) for r in rows))
        gone.extend(
            (tid, part, int(r.producer_id), int(r.first_offset)) for r in rows if r.last_offset not in present
        )
    for i in range(0, len(gone), IDS_PER_STATEMENT):
        conn.execute(
            delete(txn_aborted).where(
                tuple_(a.topic_id, a.partition, a.producer_id, a.first_offset).in_(
                    gone[i : i + IDS_PER_STATEMENT]
                )
            )
        )
    return len(gone)


def _present_among(covering: Iterable[bitmaps.ChunkLike], offsets: Iterable[int]) -> set[int]:
    spans = sorted(covering, key=lambda ch: ch.base_offset)
    out: set[int] = set()
    for off in offsets:
        for ch in spans:
            if ch.base_offset <= off <= ch.last_offset:
                if ch.present_offsets is None or (off - ch.base_offset) in bitmaps.present_set(ch):
                    out.add(off)
                break
    return out
