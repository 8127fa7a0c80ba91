"""Output files of a compaction job: streamed to the bucket up to a size, swapped in metadata.

One `OutputFiles` per kind (compacted, delete-policy merge). Partitions arrive in
(topic_id bytes, partition) order, each as whole batches with absolute offsets and the
bitmap of offsets present; a partition becomes one chunk of the current file
(`fileformat.segment`, `offsets_absolute`). After each input chunk the job calls
`end_input`; once the file holds `roll_bytes` the file is finished there: its chunk for
the current partition ends, the upload is committed, and the file swapped
(`replace_chunks`) for the input chunks it consumed, and the partition goes on in the
next file. A swap covers only whole input chunks, so a partition split over two files is
swapped in two steps, each consistent. The cleaner checkpoint of a partition moves with
the swap of the file where the partition ends.

Memory: a file is never held whole. It is written as it grows through
`ObjectStore.open_writer` (S3: a multipart upload, `part_bytes` at a time; one PUT for a
file smaller than a part). A chunk's header (its byte length, counts, base offset) comes
before its batches, so the current partition's batches wait in a spool file
(`tempfile.SpooledTemporaryFile`: in memory up to `spool_bytes`, then on local disk)
until the partition ends or the file rolls, and are then copied into the upload.
So the output side holds at most `part_bytes + spool_bytes` (16 MiB by default),
whatever `roll_bytes` is. A job that fails aborts its open upload (`abort`).
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from pyroaring import BitMap
from skiff.compactor.dedup import OutBatch
from skiff.fileformat.objectstore import ObjectStore, ObjectWriter
from skiff.fileformat.segment import ChunkInput, SegmentWriter
from skiff.metadata.types import FileSpec, OutputChunk

DEFAULT_ROLL_BYTES = 256 * 1024 * 1024
DEFAULT_PART_BYTES = 8 * 1024 * 1024
DEFAULT_SPOOL_BYTES = 8 * 1024 * 1024
SPOOL_READ_BYTES = 1024 * 1024
OUTPUT_LEVEL = 1


@dataclass(frozen=True)
class Checkpoint:
    """A partition's new cleaner checkpoint (first dirty offset), moved by the swap."""

    topic_id: uuid.UUID
    partition: int
    first_dirty_offset: int


SwapFn = Callable[[Sequence[int], FileSpec, Sequence[OutputChunk], Sequence[Checkpoint]], None]
"""replace_chunks(input chunk ids, file, output chunks, checkpoints): atomic, CAS on inputs."""


@dataclass
class _Pending:
    """The current partition's batches not yet placed in a file (in the spool)."""

    topic_id: uuid.UUID
    partition: int
    batch_count: int = 0
    present: BitMap = field(default_factory=BitMap)  # relative to base_offset
    base_offset: int = -1
    last_offset: int = -1
    record_count: int = 0
    max_timestamp: int = -1
    # a lower bound of its records' timestamps: the smallest min_timestamp of the input chunks
    # its batches came from (a compactor only drops records, so that still bounds them);
    # unknown as soon as one input's is (NULL in metadata: never pruned by Spark)
    min_timestamp: int | None = None
    min_unknown: bool = False
    bytes: int = 0

    @property
    def min_bound(self) -> int | None:
        return None if self.min_unknown else self.min_timestamp


class _Spool:
    """Batches waiting for their chunk header: memory up to `max_bytes`, then a temp file."""

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._file: tempfile.SpooledTemporaryFile[bytes] | None = None
        self.bytes = 0

    def write(self, data: bytes) -> None:
        if self._file is None:
            self._file = tempfile.SpooledTemporaryFile(max_size=self._max_bytes, prefix="skiff-compact-")  # noqa: SIM115 - closed by drain/close
        self._file.write(data)
        self.bytes += len(data)

    def drain(self) -> Iterator[bytes]:
        """Everything written, in pieces of at most SPOOL_READ_BYTES; the spool is empty after."""
        f, self._file = self._file, None
        self.bytes = 0
        if f is None:
            return
        with f:
            f.seek(0)
            while piece := f.read(SPOOL_READ_BYTES):
                yield piece

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
            self.bytes = 0


class OutputFiles:
    def __init__(
        self,
        store: ObjectStore,
        swap: SwapFn,
        *,
        key_prefix: str,
        writer_id: str,
        roll_bytes: int = DEFAULT_ROLL_BYTES,
        part_bytes: int = DEFAULT_PART_BYTES,
        spool_bytes: int = DEFAULT_SPOOL_BYTES,
    ) -> None:
        self.store = store
        self.swap = swap
        self.key_prefix = key_prefix
        self.writer_id = writer_id
        self.roll_bytes = roll_bytes
        self.part_bytes = part_bytes
        self.files_out = 0
        self.bytes_out = 0
        self.object_keys: list[str] = []
        self._spool = _Spool(spool_bytes)
        self._upload: ObjectWriter | None = None
        self._writer: SegmentWriter | None = None
        self._new_file()
        self._pending: _Pending | None = None
        self._roll_due = False  # the file reached roll_bytes at the end of an input chunk

    def _new_file(self) -> None:
        self._upload = None
        self._writer = None  # opened with the first chunk (or at the flush of an empty file)
        self._outputs: list[tuple[_Pending, int]] = []  # (chunk, batch count)
        self._placements: list[tuple[int, int]] = []
        self._inputs: list[int] = []
        self._checkpoints: list[Checkpoint] = []
        self._file_bytes = 0

    def _file_key(self) -> str:
        return f"{self.key_prefix}-{self.files_out:04d}.seg"

    def _segment(self) -> SegmentWriter:
        if self._writer is None:
            self._upload = self.store.open_writer(self._file_key(), part_bytes=self.part_bytes)
            self._writer = SegmentWriter(self._upload, offsets_absolute=True)  # type: ignore[arg-type]
        return self._writer

    def begin_partition(self, topic_id: uuid.UUID, partition: int) -> None:
        self._pending = _Pending(topic_id, partition)

    def add(self, batch: OutBatch, min_timestamp: int | None = None) -> None:
        """Spool `batch`; `min_timestamp`: its input chunk's (a lower bound of its records'
        timestamps), None when unknown."""
        self._roll_if_due()
        p = self._pending
        assert p is not None
        if p.base_offset < 0:
            p.base_offset = batch.base_offset
        p.present |= batch.present.shift(batch.base_offset - p.base_offset) if batch.present else BitMap()
        p.last_offset = batch.last_offset
        self._spool.write(batch.data)
        p.batch_count += 1
        p.record_count += batch.record_count
        p.max_timestamp = max(p.max_timestamp, batch.max_timestamp)
        if min_timestamp is None:
            p.min_unknown = True
        elif p.min_timestamp is None or min_timestamp < p.min_timestamp:
            p.min_timestamp = min_timestamp
        p.bytes += len(batch.data)

    def end_input(self, chunk_id: int) -> None:
        """An input chunk of the current partition is fully written: it joins this file's
        swap. If the file reached `roll_bytes` it is finished at the next event: before
        the next batch or input chunk of the partition, or, when this was the partition's
        last input, together with the partition's checkpoint (which must move in the swap
        of the file where the partition ends, never in a later file's)."""
        self._roll_if_due()
        self._inputs.append(chunk_id)
        p = self._pending
        self._roll_due = p is not None and self._file_bytes + p.bytes >= self.roll_bytes

    def _roll_if_due(self) -> None:
        if not self._roll_due:
            return
        self._roll_due = False
        p = self._pending
        assert p is not None
        self._place_pending()
        self._flush()
        self._pending = _Pending(p.topic_id, p.partition)

    def end_partition(self, checkpoint: Checkpoint | None) -> None:
        self._roll_due = False  # the file is finished below, with the checkpoint
        self._place_pending()
        self._pending = None
        if checkpoint is not None:
            self._checkpoints.append(checkpoint)
        if self._file_bytes >= self.roll_bytes:
            self._flush()

    def finish(self) -> None:
        if self._inputs or self._outputs:
            self._flush()

    def abort(self) -> None:
        """Give up the file being written (its upload is aborted, nothing is swapped)."""
        self._spool.close()
        if self._upload is not None:
            self._upload.abort()
        self._new_file()

    def _place_pending(self) -> None:
        p = self._pending
        if p is None or not p.batch_count:
            return
        writer = self._segment()
        placement = writer.add_chunk_bytes(
            ChunkInput(
                topic_id=p.topic_id,
                partition=p.partition,
                batches=(),
                batch_count=p.batch_count,
                record_count=p.record_count,
                min_timestamp=-1 if p.min_bound is None else p.min_bound,  # the footer's -1: unknown
                max_timestamp=p.max_timestamp,
                base_offset=p.base_offset,
                last_offset=p.last_offset,
                present_offsets=_serialize(p.present),
            ),
            p.bytes,
            self._spool.drain(),
        )
        self._outputs.append((p, p.batch_count))
        self._placements.append((placement.data_position, placement.byte_length))
        self._file_bytes = writer.position

    def _flush(self) -> None:
        size = self._segment().finish()
        key = self._file_key()
        assert self._upload is not None
        self._upload.commit()
        outputs = [
            OutputChunk(
                topic_id=p.topic_id,
                partition=p.partition,
                byte_position=position,
                byte_length=length,
                base_offset=p.base_offset,
                last_offset=p.last_offset,
                record_count=p.record_count,
                batch_count=batch_count,
                max_timestamp=p.max_timestamp,
                present_offsets=_serialize(p.present),
                min_timestamp=p.min_bound,
            )
            for (p, batch_count), (position, length) in zip(self._outputs, self._placements, strict=True)
        ]
        if self._inputs:
            self.swap(
                self._inputs,
                FileSpec(object_key=key, size_bytes=size, level=OUTPUT_LEVEL, writer=self.writer_id),
                outputs,
                self._checkpoints,
            )
        self.files_out += 1
        self.bytes_out += size
        self.object_keys.append(key)
        self._new_file()


def _serialize(bm: BitMap) -> bytes:
    bm.run_optimize()
    return bytes(bm.serialize())
