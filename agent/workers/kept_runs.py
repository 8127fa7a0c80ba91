"""A pod worker's own batches, gathered into the chunk rows they were stored in, for its cache.

When a committed file's news arrives (agent.workers.wire FILE: each chunk's rows and where
each stored batch lies), the worker learns the runs (chunk rows: a contiguous byte range of
the file holding consecutive batches of one partition) and each batch's place. As outcomes
come back, each of the worker's stored batches (whose bytes it still holds) is put at its
place in its run; once a run is whole, its bytes go to the range cache as one span (`keep`).
One span per run matters: a fetch reads a run's range whole, and the cache answers a range
from one span only (two adjacent spans would cost a GET).

A run holding another worker's batches (a partition whose leader moved while its produce
was in flight) never becomes whole: the fetch reads it from the bucket. What is learnt is
kept for the last `max_files` files only.
"""

from __future__ import annotations

import collections
import uuid
from collections.abc import Callable

from skiff.agent.workers.wire import CommittedFileNews

Keep = Callable[[str, int, bytes], None]


class _Run:
    __slots__ = ("have_bytes", "length", "pieces", "start")

    def __init__(self, start: int, length: int) -> None:
        self.start = start
        self.length = length
        self.have_bytes = 0
        self.pieces: dict[int, bytes] = {}  # file position -> the batch's bytes


class _File:
    __slots__ = ("key", "places")

    def __init__(self, key: str) -> None:
        self.key = key
        # (topic id, partition, base offset) -> (its run, its position, its length)
        self.places: dict[tuple[uuid.UUID, int, int], tuple[_Run, int, int]] = {}


class KeptRuns:
    def __init__(self, keep: Keep, max_files: int = 16) -> None:
        self._keep = keep
        self._files: collections.deque[_File] = collections.deque(maxlen=max_files)
        self.runs_kept = 0  # runs handed whole to the cache (tests, metrics)

    def learn(self, news: CommittedFileNews) -> None:
        """Register a committed file's runs and batch places."""
        f = _File(news.object_key)
        for chunk in news.chunks:
            runs = [_Run(loc.byte_position, loc.byte_length) for loc in chunk.locations]
            for p in chunk.placed:
                for run in runs:
                    if run.start <= p.byte_position < run.start + run.length:
                        f.places[(chunk.topic_id, chunk.partition, p.base_offset)] = (
                            run,
                            p.byte_position,
                            p.byte_length,
                        )
                        break
        self._files.append(f)

    def stored(self, topic_id: uuid.UUID, partition: int, base_offset: int, data: bytes) -> None:
        """One of this worker's batches was stored at `base_offset`: place its bytes."""
        for f in reversed(self._files):
            place = f.places.pop((topic_id, partition, base_offset), None)
            if place is None:
                continue
            run, position, length = place
            if length != len(data):
                return  # not the bytes that were stored there
            run.pieces[position] = data
            run.have_bytes += length
            if run.have_bytes == run.length:
                pieces = run.pieces
                if len(pieces) > 1:
                    whole = b"".join(pieces[p] for p in sorted(pieces))
                else:  # bytes of its own (bytes of bytes is no copy): a view would keep its
                    whole = bytes(pieces[run.start])  # request's whole body alive in the cache
                run.pieces = {}
                self._keep(f.key, run.start, whole)
                self.runs_kept += 1
            return
