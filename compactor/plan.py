"""What a compaction job is: the plan a planner hands to a job runner, and what comes back.

A job reads a set of input files, each exactly twice as a stream from byte 0 (the chunk
headers let a stream walk a file without its footer), and writes new files:

- partitions of compacted topics (`cleanup.policy` contains `compact`) are deduplicated
  by key (two passes, see `compactor.dedup`) and written to compacted output files;
- partitions of delete-policy topics are merged: their chunks copied, each partition's
  data contiguous, into large delete-policy output files.

Every input file is listed with the live chunk rows of it that the job consumes (their
assigned offsets come from metadata: agent files store relative offsets). Chunks of a
file that the job does not consume are skipped by both streams. For a compacted
partition the job consumes the partition's whole log up to its dirty end (the clean
prefix too, because newer keys shadow older records there).

The swap is per output file: `replace_chunks(input chunk ids, output file, output
chunks)`, compare-and-set on the input chunk ids, and, for compacted partitions, moving
the cleaner checkpoint (first dirty offset) in the same transaction.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from skiff.fileformat.chunk_reader import ChunkLocation


@dataclass(frozen=True)
class InputChunk:
    """One live chunk row consumed by the job."""

    topic_id: uuid.UUID
    partition: int
    location: ChunkLocation  # chunk_id, byte range in its file, assigned offsets, present bitmap


@dataclass(frozen=True)
class InputFile:
    object_key: str
    size_bytes: int
    chunks: tuple[InputChunk, ...]  # the consumed chunk rows of this file, in byte order


@dataclass(frozen=True)
class PartitionWork:
    """One partition of the job and the rules its topic configures (Kafka's names)."""

    topic_id: uuid.UUID
    partition: int
    topic_name: str
    compact: bool  # cleanup.policy contains "compact"
    delete: bool  # cleanup.policy contains "delete"
    # The cleaner checkpoint: offsets below it were cleaned before (the clean prefix).
    first_dirty_offset: int
    # Dirty records at offsets below this may be cleaned now: the first offset still
    # younger than min.compaction.lag.ms (or the end of the consumed log).
    cleanable_end_offset: int
    delete_retention_ms: int  # delete.retention.ms: tombstone lifetime after a clean keeps it
    # Aborted transactions (producer id, first offset, ABORT marker offset) whose first
    # offset is below the cleanable end, by first offset: their batches are dropped.
    aborted: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True)
class JobPlan:
    job_id: str
    files: tuple[InputFile, ...]
    partitions: tuple[PartitionWork, ...]  # sorted by (topic_id bytes, partition), as files are
    now_ms: int  # the planner's clock: delete horizons are computed from it
    lease_token: str | None = None  # the job's lease in metadata, checked at swap


@dataclass
class JobStats:
    """What a finished job reports (the `skiff compact` summary adds these up)."""

    files_in: int = 0
    bytes_in: int = 0
    files_out: int = 0
    bytes_out: int = 0
    records_in: int = 0
    records_out: int = 0
    tombstones_dropped: int = 0
    aborted_batches_dropped: int = 0  # batches of aborted transactions removed
    markers_dropped: int = 0  # transaction markers removed past their delete horizon
    gets_per_input_file: dict[str, int] = field(default_factory=dict)
    peak_keymap_entries: int = 0  # the most keys the key map held for one partition
    peak_keymap_bytes: int = 0  # ... and the bytes of their slots (not the preallocated table)
    keymap_allocated_bytes: int = 0  # the table preallocated (the budget, rounded to whole slots)
