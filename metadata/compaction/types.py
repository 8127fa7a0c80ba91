"""Value types of compaction planning, exchanged with the metadata service.

Frozen dataclasses without I/O (like `metadata.types`), so that the compactor, over the
HTTP client, and the service speak the same values:

- `MergeRules`: the planner's knobs for merging delete-policy partitions (levels);
- `CompactionCandidate`: one partition that needs work now, why, and the chunk rows a
  job on it consumes (`CandidateChunk`, offset order);
- `CompactionLease`: a claimed job's lease;
- `CheckpointUpdate`: a cleaner checkpoint moved by a swap.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from skiff.fileformat.chunk_reader import ChunkLocation
from skiff.metadata.wire.bounds import Int32, NonNegInt32, NonNegInt64, PositiveInt64

MiB = 1024 * 1024

# Defaults of the delete-policy merge rules (see docs/compaction.md, "Planning").
DEFAULT_TARGET_CHUNK_BYTES = 256 * MiB
DEFAULT_MIN_LEVEL0_BYTES = 8 * MiB
DEFAULT_MIN_LEVEL0_CHUNKS = 32
DEFAULT_MAX_LEVEL0_DELAY_MS = 60_000


@dataclass(frozen=True)
class MergeRules:
    """When a delete-policy partition's level-0 chunks are merged, and with what.

    A partition is merged when its level-0 chunks hold at least `min_level0_bytes`, or
    number at least `min_level0_chunks`, or the oldest was committed at least
    `max_level0_delay_ms` ago. The merge takes all its level-0 chunks and, walking back
    from them, each preceding compactor-written chunk no larger than what is taken so
    far (while the total stays within `target_chunk_bytes`): tail chunks double like a
    binary counter, so a partition's chunk rows grow with its bytes (about
    bytes / target_chunk_bytes, plus log2 of the tail), not with time, and each byte is
    rewritten about log2(target / merge size) times at most."""

    target_chunk_bytes: PositiveInt64 = DEFAULT_TARGET_CHUNK_BYTES
    min_level0_bytes: NonNegInt64 = DEFAULT_MIN_LEVEL0_BYTES
    min_level0_chunks: NonNegInt32 = DEFAULT_MIN_LEVEL0_CHUNKS
    max_level0_delay_ms: NonNegInt64 = DEFAULT_MAX_LEVEL0_DELAY_MS


@dataclass(frozen=True)
class CandidateChunk:
    """A live chunk row a job would consume, and the file it lives in."""

    location: ChunkLocation
    file_size_bytes: int
    file_level: int


@dataclass(frozen=True)
class CompactionCandidate:
    topic_id: uuid.UUID
    partition: int
    topic_name: str
    compact: bool  # cleanup.policy contains "compact": a clean (dedup); else a merge
    delete: bool  # cleanup.policy contains "delete"
    delete_retention_ms: int
    log_start_offset: int
    high_watermark: int
    # Compacted: Kafka's cleanableOffsets: [first_dirty_offset, cleanable_end_offset).
    # Merged: the consumed offset range.
    first_dirty_offset: int
    cleanable_end_offset: int
    clean_bytes: int  # compacted: bytes of chunks wholly below the first dirty offset
    cleanable_bytes: int  # compacted: dirty bytes below the cleanable end; merged: bytes consumed
    dirty_ratio: float  # cleanable / (clean + cleanable): what min.cleanable.dirty.ratio bounds
    forced: bool  # max.compaction.lag.ms passed on dirty data: cleaned whatever the ratio
    reason: str  # for operators (`skiff compact --dry-run`)
    chunks: tuple[CandidateChunk, ...]  # consumed chunk rows, offset order
    # Compacted: the aborted transactions whose first offset lies below the cleanable end,
    # (producer id, first offset, ABORT marker offset), by first offset: their batches are
    # dropped (metadata.transactions.cleanup). The cleanable end never passes the last stable offset.
    aborted: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True)
class CompactionLease:
    token: str
    holder: str
    expires_ms: int


@dataclass(frozen=True)
class CheckpointUpdate:
    """Move a partition's cleaner checkpoint (first dirty offset) in the swap."""

    topic_id: uuid.UUID
    partition: Int32
    first_dirty_offset: NonNegInt64
