"""Which record batches belong to aborted transactions: Kafka's read_committed rule, per
batch, with NumPy (the executors' side of `kafka.isolation.level=read_committed`).

Input: the aborted transactions overlapping a task's offset range, as metadata answers a
read_committed fetch (and the driver ships them in the task): (producer id, first offset,
last offset) triples, the last offset being the ABORT marker's (-1, or a (producer id,
first offset) pair: not known). Kafka's consumer (`CompletedFetch`/`Fetcher` in the Java
client) drops a *transactional data* batch of producer P when an aborted transaction of P
started at or before it and P's ABORT marker has not been read yet; the marker ends it.
So each entry is a half-open range [first offset, end) of producer P, where end is the
smaller of
- the offset of P's first control batch at or after the first offset (a producer has one
  transaction at a time, so its first marker after the start is the one that ended the
  aborted transaction), once that batch is read, and
- last offset + 1, when the last offset is known.
Kafka's consumer has only the first (its fetch answers carry no last offset), so a lost
marker would leave the range open and drop P's later *committed* batches too; here the
known last offset closes it anyway. This matters when a chunk is gone and skipped
(Spark's failOnDataLoss=false): the ABORT marker may have been in it. Without a known
last offset a range stays open until its marker is read (it lies beyond the task's
range, or in a later chunk).

`AbortedTransactions.mask` is fed every batch of a chunk in offset order (control batches
included: they close ranges) as NumPy arrays of producer id, base offset, control and
transactional flags, and answers a boolean mask of the data batches to drop. Work is per
batch and per distinct producer, never per record: ranges are closed by a `searchsorted`
of each producer's first offsets into its control batches' offsets, and batches are
matched by a `searchsorted` of their base offsets into their producer's ranges (a
producer's ranges are disjoint and sorted by first offset). A non-transactional batch is
never dropped, whatever its producer id (idempotent producers have ids too).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_OPEN = np.iinfo(np.int64).max  # the end of a range not known yet (marker unread, no last offset)


class AbortedTransactions:
    """The aborted ranges of one task, closed as the task's markers are read."""

    def __init__(self, aborted: Sequence[tuple[int, int] | tuple[int, int, int]]) -> None:
        # one entry per (producer id, first offset); a known last offset wins over none
        last_offsets: dict[tuple[int, int], int] = {}
        for entry in aborted:
            key = (entry[0], entry[1])
            last_offsets[key] = max(last_offsets.get(key, -1), entry[2] if len(entry) > 2 else -1)
        rows = np.array(
            [(pid, first, last) for (pid, first), last in sorted(last_offsets.items())], dtype=np.int64
        ).reshape(-1, 3)
        self.producer_ids = rows[:, 0].copy()  # sorted by (producer id, first offset)
        self.first_offsets = rows[:, 1].copy()
        # [first, end): last offset + 1 if known, else open until the marker is read
        self.end_offsets = np.where(rows[:, 2] >= 0, rows[:, 2] + 1, _OPEN).astype(np.int64)

    def __len__(self) -> int:
        return len(self.producer_ids)

    def _rows(self, producer_id: int) -> slice:
        lo = int(np.searchsorted(self.producer_ids, producer_id, side="left"))
        hi = int(np.searchsorted(self.producer_ids, producer_id, side="right"))
        return slice(lo, hi)

    def mask(
        self,
        producer_ids: np.ndarray,
        base_offsets: np.ndarray,
        control: np.ndarray,
        transactional: np.ndarray,
    ) -> np.ndarray:
        """The batches (given in offset order, after every batch given before) to drop."""
        drop = np.zeros(len(producer_ids), dtype=bool)
        if not len(self) or not len(producer_ids):
            return drop
        known = np.isin(producer_ids, self.producer_ids)
        markers = control & known
        if markers.any():
            for pid in np.unique(producer_ids[markers]).tolist():
                rows = self._rows(pid)
                marker_offsets = base_offsets[markers & (producer_ids == pid)]  # ascending
                k = np.searchsorted(marker_offsets, self.first_offsets[rows], side="left")
                found = k < len(marker_offsets)
                ends = np.where(found, marker_offsets[np.minimum(k, len(marker_offsets) - 1)], _OPEN)
                self.end_offsets[rows] = np.minimum(self.end_offsets[rows], ends)
        data = transactional & ~control & known
        if not data.any():
            return drop
        for pid in np.unique(producer_ids[data]).tolist():
            rows = self._rows(pid)
            firsts, ends = self.first_offsets[rows], self.end_offsets[rows]
            which = np.flatnonzero(data & (producer_ids == pid))
            bases = base_offsets[which]
            j = np.searchsorted(firsts, bases, side="right") - 1  # the last range starting at or before
            inside = (j >= 0) & (bases < ends[np.maximum(j, 0)])
            drop[which] = inside
        return drop
