"""Output files of a compaction job: build in memory up to a size, PUT, swap in metadata.

One `OutputFiles` per kind (compacted, delete-policy merge). Partitions arrive in
(topic_id bytes, partition) order, each as whole batches with absolute offsets and the
bitmap of offsets present; a partition becomes one chunk of the current file
(`fileformat.segment`, `offsets_absolute`). After each input chunk the job calls
`end_input`; once the file holds `roll_bytes` the file is finished there: its chunk for
the current partition ends, it is PUT, and swapped (`replace_chunks`) for the input
chunks it consumed, and the partition goes on in the next file. A swap covers only whole
input chunks, so a partition split over two files is swapped in two steps, each
consistent. The cleaner checkpoint of a partition moves with the swap of the file where
the partition ends. Memory is bounded by `roll_bytes` plus one input chunk.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pyroaring import BitMap

from compactor.dedup import OutBatch
from fileformat.objectstore import ObjectStore
from fileformat.segment import ChunkInput, SegmentWriter
from metadata.types import FileSpec, OutputChunk

DEFAULT_ROLL_BYTES = 256 * 1024 * 1024
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
    """The current partition's batches not yet placed in a file."""

    topic_id: uuid.UUID
    partition: int
    batches: list[bytes] = field(default_factory=list)
    present: BitMap = field(default_factory=BitMap)  # relative to base_offset
    base_offset: int = -1
    last_offset: int = -1
    record_count: int = 0
    max_timestamp: int = -1
    bytes: int = 0


class _Sink:
    def __init__(self) -> None:
        self.parts: list[bytes | bytearray | memoryview] = []

    def write(self, data: bytes | bytearray | memoryview) -> int:
        self.parts.append(data)
        return len(data)


class OutputFiles:
    def __init__(
        self,
        store: ObjectStore,
        swap: SwapFn,
        *,
        key_prefix: str,
        writer_id: str,
        roll_bytes: int = DEFAULT_ROLL_BYTES,
    ) -> None:
        self.store = store
        self.swap = swap
        self.key_prefix = key_prefix
        self.writer_id = writer_id
        self.roll_bytes = roll_bytes
        self.files_out = 0
        self.bytes_out = 0
        self.object_keys: list[str] = []
        self._new_file()
        self._pending: _Pending | None = None

    def _new_file(self) -> None:
        self._sink = _Sink()
        self._writer = SegmentWriter(self._sink, offsets_absolute=True)  # type: ignore[arg-type]
        self._outputs: list[tuple[_Pending, int]] = []  # (chunk, placement index)
        self._placements: list[tuple[int, int]] = []
        self._inputs: list[int] = []
        self._checkpoints: list[Checkpoint] = []
        self._file_bytes = self._writer.position

    def begin_partition(self, topic_id: uuid.UUID, partition: int) -> None:
        self._pending = _Pending(topic_id, partition)

    def add(self, batch: OutBatch) -> None:
        p = self._pending
        assert p is not None
        if p.base_offset < 0:
            p.base_offset = batch.base_offset
        p.present |= batch.present.shift(batch.base_offset - p.base_offset) if batch.present else BitMap()
        p.last_offset = batch.last_offset
        p.batches.append(batch.data)
        p.record_count += batch.record_count
        p.max_timestamp = max(p.max_timestamp, batch.max_timestamp)
        p.bytes += len(batch.data)

    def end_input(self, chunk_id: int) -> None:
        """An input chunk of the current partition is fully written: it joins this file's
        swap; the file is finished here if it reached `roll_bytes`."""
        self._inputs.append(chunk_id)
        p = self._pending
        if p is not None and self._file_bytes + p.bytes >= self.roll_bytes:
            self._place_pending()
            self._flush()
            self._pending = _Pending(p.topic_id, p.partition)

    def end_partition(self, checkpoint: Checkpoint | None) -> None:
        self._place_pending()
        self._pending = None
        if checkpoint is not None:
            self._checkpoints.append(checkpoint)
        if self._file_bytes >= self.roll_bytes:
            self._flush()

    def finish(self) -> None:
        if self._inputs or self._outputs:
            self._flush()

    def _place_pending(self) -> None:
        p = self._pending
        if p is None or not p.batches:
            return
        placement = self._writer.add_chunk(
            ChunkInput(
                topic_id=p.topic_id,
                partition=p.partition,
                batches=p.batches,
                batch_count=len(p.batches),
                record_count=p.record_count,
                max_timestamp=p.max_timestamp,
                base_offset=p.base_offset,
                last_offset=p.last_offset,
                present_offsets=_serialize(p.present),
            )
        )
        self._outputs.append((p, len(p.batches)))
        self._placements.append((placement.data_position, placement.byte_length))
        self._file_bytes = self._writer.position
        p.batches = []  # the sink holds them now

    def _flush(self) -> None:
        size = self._writer.finish()
        key = f"{self.key_prefix}-{self.files_out:04d}.seg"
        body = b"".join(self._sink.parts)
        self.store.put(key, body)
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
