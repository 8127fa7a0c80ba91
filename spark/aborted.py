"""Which record batches belong to aborted transactions: Kafka's read_committed rule, per
batch, with NumPy (the executors' side of `kafka.isolation.level=read_committed`).

Input: the aborted transactions overlapping a task's offset range, as metadata answers a
read_committed fetch (and the driver ships them in the task): (producer id, first offset)
pairs. Kafka's consumer (`CompletedFetch`/`Fetcher` in the Java client) drops a
*transactional data* batch of producer P when an aborted transaction of P started at or
before it and P's ABORT marker has not been read yet; the marker ends it. So each entry is
a half-open range [first offset, end) of producer P, where end is the offset of P's first
control batch at or after the first offset (a producer has one transaction at a time, so
its first marker after the start is the one that ended the aborted transaction), or
unbounded while that marker has not been read (it lies beyond the task's range, or in a
later chunk).

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

_OPEN = np.iinfo(np.int64).max  # the end of a range whose marker is not read yet


class AbortedTransactions:
    """The aborted ranges of one task, closed as the task's markers are read."""

    def __init__(self, aborted: Sequence[tuple[int, int]]) -> None:
        pairs = np.array(sorted(set(aborted)), dtype=np.int64).reshape(-1, 2)
        self.producer_ids = pairs[:, 0].copy()  # sorted by (producer id, first offset)
        self.first_offsets = pairs[:, 1].copy()
        self.end_offsets = np.full(len(pairs), _OPEN, dtype=np.int64)

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
