"""The worker's ring: shared memory through which a pod worker hands batches to its writer.

A memory file (`os.memfd_create`: anonymous, counted as the process's memory, not limited
by /dev/shm's size) of `size_bytes`, mapped by the worker and, once its descriptor is passed
over the Unix socket (SCM_RIGHTS), by the writer. The worker copies each batch in once
(`put`); the writer reads it where it lies and builds the file from it; the worker frees the
region when the batch's outcome is back (`free`).

Allocation is a circular buffer of regions in allocation order: a region is taken at the
tail (or at the start, wrapping, when the tail's room is short); freed regions are
reclaimed from the head as soon as every region before them is free. Outcomes come back
nearly in allocation order (a worker's appends are committed in the order it sent them), so
the head rarely waits. `put` answers None when no region of that size is free: the caller
sends that batch inline instead (a rare, larger-than-the-room batch costs a socket copy,
never a wait).
"""

from __future__ import annotations

import collections
import mmap
import os


class Region:
    __slots__ = ("freed", "length", "start")

    def __init__(self, start: int, length: int) -> None:
        self.start = start
        self.length = length
        self.freed = False


class Ring:
    def __init__(self, size_bytes: int) -> None:
        if size_bytes <= 0:
            raise ValueError("a ring needs a positive size")
        self.size_bytes = size_bytes
        self.fd = os.memfd_create("skiff-pod-ring", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, size_bytes)
        self._map = mmap.mmap(self.fd, size_bytes)
        self._regions: collections.deque[Region] = collections.deque()
        self._tail = 0  # where the next region starts, unless it wraps
        self.used_bytes = 0  # in regions not yet reclaimed (freed ones behind a live head count)

    def put(self, data: bytes | memoryview) -> Region | None:
        """Copy `data` into a free region; None if no region of its size is free."""
        n = len(data)
        start = self._find(n)
        if start is None:
            return None
        self._map[start : start + n] = data
        region = Region(start, n)
        self._regions.append(region)
        self._tail = start + n
        self.used_bytes += n
        return region

    def _find(self, n: int) -> int | None:
        if n == 0 or n > self.size_bytes:
            return None
        if not self._regions:
            self._tail = 0
            return 0
        head = self._regions[0].start
        if self._tail > head:
            # live regions lie in [head, tail): room at [tail, size) and then [0, head)
            if self._tail + n <= self.size_bytes:
                return self._tail
            return 0 if n <= head else None
        if self._tail == head:  # the live regions fill the ring exactly
            return None
        # wrapped: live regions in [head, size) and [0, tail): room in [tail, head)
        return self._tail if self._tail + n <= head else None

    def free(self, region: Region) -> None:
        region.freed = True
        while self._regions and self._regions[0].freed:
            self.used_bytes -= self._regions.popleft().length

    def free_all(self) -> None:
        self._regions.clear()
        self.used_bytes = 0

    def close(self) -> None:
        self._regions.clear()
        self._map.close()
        os.close(self.fd)


def map_ring(fd: int, size_bytes: int) -> memoryview:
    """The writer's view of a worker's ring (from its passed descriptor), read-only; the
    descriptor is closed once mapped (the mapping keeps the memory)."""
    try:
        m = mmap.mmap(fd, size_bytes, prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    return memoryview(m)
