"""The job runner: two streams per input file, two passes per partition, outputs swapped in.

For each input file of a `JobPlan` the runner opens at most two streaming GETs from byte
0 (`ObjectStore.stream_get`) and makes no other request on it: stream A (opened when the
file holds a compacted partition of the job) and stream B. Segment files hold their
chunks in (topic_id bytes, partition) order and the plan's partitions come in the same
order, so both streams walk forward only (`fileformat.segment.iter_chunks_stream`, which
needs neither footer nor metadata), skipping chunks the job does not consume:

    for each partition of the plan, in order:
        compacted: stream A of each file yields the partition's chunk -> pass 1
                   (key map), then stream B of each file yields it again -> pass 2,
                   the survivors go to the compacted output (`compactor.dedup`)
        delete policy: stream B yields the chunk, its batches are copied (absolute
                   offsets) to the delete-policy output, each partition contiguous
        both streams now stand at the next partition.

Within a partition, the input chunks (metadata rows, several per segment chunk when a
commit stored only some batches) are processed in offset order across files; a file's
segment chunk is held only until its last input chunk is done, so memory is one
segment chunk per file in the usual case (each file holds one run of a partition).

Outputs (`compactor.output`) are PUT and swapped (`replace_chunks`) file by file; the
cleaner checkpoint of a compacted partition moves with the swap of the file where it
ends. A failed job leaves the inputs live (the swap is all-or-nothing per file); output
files not swapped are orphans for the garbage collector.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from skiff.compactor.dedup import OutBatch, PartitionCleaner, batch_present, location_present, verbatim
from skiff.compactor.keymap import DEFAULT_BUDGET_BYTES, KeyMap
from skiff.compactor.output import DEFAULT_ROLL_BYTES, Checkpoint, OutputFiles, SwapFn
from skiff.compactor.plan import InputChunk, InputFile, JobPlan, JobStats, PartitionWork
from skiff.fileformat.chunk_reader import iter_chunk_batches
from skiff.fileformat.objectstore import ObjectStore
from skiff.fileformat.objectstore.streams import (
    ObjectStream,
)
from skiff.fileformat.segment import ChunkHeader, iter_chunks_stream

PartKey = tuple[bytes, int]
STREAM_CHUNK_BYTES = 1 << 20
# Told the bytes each stream consumed, as they arrive: (stream "A" or "B", bytes). Called
# from the job's thread; it counts what the GETs already deliver and requests nothing.
ReadFn = Callable[[str, int], None]


def _counted(pieces: Iterator[bytes], stream: str, on_read: ReadFn) -> Iterator[bytes]:
    for piece in pieces:
        on_read(stream, len(piece))
        yield piece


class _Cursor:
    """One forward-only stream over one input file (one GET, opened on first use)."""

    def __init__(
        self, store: ObjectStore, key: str, gets: dict[str, int], stream: str, on_read: ReadFn | None
    ) -> None:
        self._store = store
        self._key = key
        self._gets = gets
        self._name = stream
        self._on_read = on_read
        self._stream: ObjectStream | None = None
        self._it: Iterator[tuple[ChunkHeader, bytes | bytearray]] | None = None
        self._peek: tuple[ChunkHeader, bytes | bytearray] | None = None
        self._done = False

    def take(self, part: PartKey) -> tuple[ChunkHeader, bytes | bytearray] | None:
        """The file's segment chunk of `part` (skipping chunks before it), or None."""
        if self._done:
            return None
        if self._it is None:
            self._stream = self._store.stream_get(self._key, 0, chunk_size=STREAM_CHUNK_BYTES)
            self._gets[self._key] = self._gets.get(self._key, 0) + 1
            pieces: Iterator[bytes] = self._stream
            if self._on_read is not None:
                pieces = _counted(pieces, self._name, self._on_read)
            self._it = iter_chunks_stream(pieces, self._key)
        while True:
            if self._peek is None:
                nxt = next(self._it, None)
                if nxt is None:
                    self._done = True
                    return None
                self._peek = nxt
            header = self._peek[0]
            here = (header.topic_id.bytes, header.partition)
            if here < part:
                self._peek = None
                continue
            if here == part:
                out, self._peek = self._peek, None
                return out
            return None

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()


class _PartitionReader:
    """The input chunks of one partition in offset order, their bytes from one stream per
    file (a file's segment chunk is dropped after its last input chunk)."""

    def __init__(self, inputs: list[tuple[int, InputChunk]], cursors: list[_Cursor], part: PartKey) -> None:
        self.inputs = inputs
        self.cursors = cursors
        self.part = part

    def __iter__(self) -> Iterator[tuple[InputChunk, memoryview]]:
        last_use = {fi: i for i, (fi, _) in enumerate(self.inputs)}
        held: dict[int, tuple[ChunkHeader, bytes | bytearray]] = {}
        for i, (fi, ic) in enumerate(self.inputs):
            seg = held.get(fi)
            if seg is None:
                got = self.cursors[fi].take(self.part)
                if got is None:
                    raise ValueError(
                        f"input chunk {ic.location.chunk_id} of {ic.location.object_key!r}: the file "
                        f"holds no chunk of partition {ic.topic_id}/{ic.partition}"
                    )
                held[fi] = seg = got
                del got
            header, data = seg
            loc = ic.location
            start = loc.byte_position - header.data_position
            if start < 0 or start + loc.byte_length > len(data):
                raise ValueError(
                    f"input chunk {loc.chunk_id} at {loc.object_key}@{loc.byte_position}+{loc.byte_length} "
                    f"lies outside the file's chunk of {ic.topic_id}/{ic.partition}"
                )
            view = memoryview(data)[start : start + loc.byte_length]
            yield ic, view
            # Drop every reference to a finished segment chunk (up to hundreds of MiB)
            # before the next one is read: the consumer's loop variable (released view)
            # and our own locals would otherwise keep it alive while the next is read.
            view.release()
            if last_use[fi] == i:
                del held[fi], seg, header, data


@dataclass
class JobResult:
    stats: JobStats
    checkpoints: list[Checkpoint]
    output_keys: list[str]
    map_full: list[tuple[uuid.UUID, int]]  # compacted partitions whose key map filled


def run_job(
    plan: JobPlan,
    store: ObjectStore,
    swap: SwapFn,
    *,
    key_prefix: str = "compacted/",
    writer_id: str = "compactor",
    keymap: KeyMap | None = None,
    keymap_budget_bytes: int = DEFAULT_BUDGET_BYTES,
    roll_bytes: int = DEFAULT_ROLL_BYTES,
    on_read: ReadFn | None = None,
) -> JobResult:
    """Run one job (blocking; async callers use `asyncio.to_thread`). `on_read` is told
    the bytes streams A and B consume (progress within the job)."""
    stats = JobStats(files_in=len(plan.files), bytes_in=sum(f.size_bytes for f in plan.files))
    gets: dict[str, int] = {}
    cursors_a = [_Cursor(store, f.object_key, gets, "A", on_read) for f in plan.files]
    cursors_b = [_Cursor(store, f.object_key, gets, "B", on_read) for f in plan.files]
    compacted = OutputFiles(
        store,
        swap,
        key_prefix=f"{key_prefix}{plan.job_id}-compact",
        writer_id=writer_id,
        roll_bytes=roll_bytes,
    )
    merged = OutputFiles(
        store, swap, key_prefix=f"{key_prefix}{plan.job_id}-merge", writer_id=writer_id, roll_bytes=roll_bytes
    )
    checkpoints: list[Checkpoint] = []
    map_full: list[tuple[uuid.UUID, int]] = []
    kmap: KeyMap | None = keymap
    try:
        for work in plan.partitions:
            part = (work.topic_id.bytes, work.partition)
            inputs = _inputs_of(plan.files, work)
            if not inputs:
                continue
            if work.compact:
                if kmap is None:
                    kmap = KeyMap(keymap_budget_bytes)
                cp = _clean_partition(
                    work, inputs, cursors_a, cursors_b, part, kmap, plan.now_ms, compacted, stats
                )
                checkpoints.append(cp)
                # a partition's map only grows until it is reset for the next one: its
                # size now is its peak (entries used, not the preallocated table)
                stats.peak_keymap_entries = max(stats.peak_keymap_entries, kmap.size)
                stats.peak_keymap_bytes = max(stats.peak_keymap_bytes, kmap.used_bytes)
                stats.keymap_allocated_bytes = max(stats.keymap_allocated_bytes, kmap.memory_bytes)
                if cp.first_dirty_offset < work.cleanable_end_offset:
                    map_full.append((work.topic_id, work.partition))
            else:
                _copy_partition(work, inputs, cursors_b, part, merged, stats)
        compacted.finish()
        merged.finish()
    except BaseException:
        compacted.abort()  # the open uploads: no multipart upload or temp file is left behind
        merged.abort()
        raise
    finally:
        for c in cursors_a + cursors_b:
            c.close()
    stats.files_out = compacted.files_out + merged.files_out
    stats.bytes_out = compacted.bytes_out + merged.bytes_out
    stats.gets_per_input_file = {f.object_key: gets.get(f.object_key, 0) for f in plan.files}
    return JobResult(stats, checkpoints, compacted.object_keys + merged.object_keys, map_full)


def _inputs_of(files: tuple[InputFile, ...], work: PartitionWork) -> list[tuple[int, InputChunk]]:
    found = [
        (fi, ic)
        for fi, f in enumerate(files)
        for ic in f.chunks
        if ic.topic_id == work.topic_id and ic.partition == work.partition
    ]
    found.sort(key=lambda x: x[1].location.base_offset)
    return found


def _clean_partition(
    work: PartitionWork,
    inputs: list[tuple[int, InputChunk]],
    cursors_a: list[_Cursor],
    cursors_b: list[_Cursor],
    part: PartKey,
    kmap: KeyMap,
    now_ms: int,
    out: OutputFiles,
    stats: JobStats,
) -> Checkpoint:
    cleaner = PartitionCleaner(work, kmap, now_ms)
    for ic, data in _PartitionReader(inputs, cursors_a, part):
        cleaner.feed_pass1(ic.location, data)
    cleaner.finish_pass1()
    out.begin_partition(work.topic_id, work.partition)
    for ic, data in _PartitionReader(inputs, cursors_b, part):
        for batch in cleaner.clean_chunk(ic.location, data):
            out.add(batch, ic.location.min_timestamp)
        out.end_input(ic.location.chunk_id)
    checkpoint = Checkpoint(work.topic_id, work.partition, cleaner.checkpoint)
    out.end_partition(checkpoint)
    s = cleaner.stats
    stats.records_in += s.records_in
    stats.records_out += s.records_out
    stats.tombstones_dropped += s.tombstones_dropped
    stats.aborted_batches_dropped += s.aborted_batches_dropped
    stats.markers_dropped += s.markers_dropped
    return checkpoint


def _copy_partition(
    work: PartitionWork,
    inputs: list[tuple[int, InputChunk]],
    cursors_b: list[_Cursor],
    part: PartKey,
    out: OutputFiles,
    stats: JobStats,
) -> None:
    out.begin_partition(work.topic_id, work.partition)
    for ic, data in _PartitionReader(inputs, cursors_b, part):
        loc = ic.location
        present = location_present(loc)
        for cb in iter_chunk_batches(loc, data):
            h = cb.header
            stats.records_in += h.records_count
            stats.records_out += h.records_count
            out.add(
                OutBatch(
                    verbatim(data, cb.position, h.size, cb.base_offset),
                    cb.base_offset,
                    cb.last_offset,
                    batch_present(present, loc.base_offset, cb.base_offset, cb.last_offset),
                    h.records_count,
                    h.max_timestamp,
                ),
                loc.min_timestamp,
            )
        out.end_input(loc.chunk_id)
    out.end_partition(None)


def planned_stream_bytes(plan: JobPlan) -> int:
    """The most the job's streams can read: each input file whole, twice when it holds a
    compacted partition of the job (streams A and B), else once (B). Progress totals."""
    return sum(planned_bytes_per_stream(plan).values())


def planned_bytes_per_stream(plan: JobPlan) -> dict[str, int]:
    """{"A": bytes of the files holding a compacted partition of the job, "B": all files'}:
    the most each stream reads (stream B stops after the job's last partition)."""
    compacted = {(w.topic_id, w.partition) for w in plan.partitions if w.compact}
    a = sum(f.size_bytes for f in plan.files if any((c.topic_id, c.partition) in compacted for c in f.chunks))
    return {"A": a, "B": sum(f.size_bytes for f in plan.files)}
