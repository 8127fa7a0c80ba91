"""What a maintenance pass did (`PassSummary`: jobs, files, records, retention, GC, tables;
`skiff compact` adds passes up and prints it), and the progress a pass reports as it goes
(`Progress`: the command line's bars; `NoProgress` elsewhere).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol

from skiff.compactor.plan import JobPlan, JobStats

log = logging.getLogger(__name__)


@dataclass
class PassSummary:
    """What a pass did (the `skiff compact` summary adds passes up)."""

    jobs: int = 0
    jobs_failed: int = 0
    partitions: int = 0
    files_in: int = 0
    bytes_in: int = 0
    files_out: int = 0
    bytes_out: int = 0
    records_in: int = 0
    records_out: int = 0
    tombstones_dropped: int = 0
    aborted_batches_dropped: int = 0
    markers_dropped: int = 0
    gets_per_input_file: dict[str, int] = field(default_factory=dict)
    bytes_read: int = 0  # what the jobs' streams consumed (A and B together)
    peak_keymap_entries: int = 0
    peak_keymap_bytes: int = 0  # bytes of the entries used, not the preallocated table
    keymap_allocated_bytes: int = 0
    retention_chunks_deleted: int = 0
    retention_bytes_deleted: int = 0
    gc_files_deleted: int = 0
    orphans_deleted: int = 0
    offsets_expired: int = 0
    table_records: int = 0
    tables_failed: int = 0
    elapsed_s: float = 0.0

    @property
    def records_removed(self) -> int:
        return self.records_in - self.records_out

    @property
    def max_gets_per_input_file(self) -> int:
        return max(self.gets_per_input_file.values(), default=0)

    def add_job(self, plan: JobPlan, stats: JobStats, bytes_read: int = 0) -> None:
        self.jobs += 1
        self.bytes_read += bytes_read
        self.partitions += len(plan.partitions)
        self.files_in += stats.files_in
        self.bytes_in += stats.bytes_in
        self.files_out += stats.files_out
        self.bytes_out += stats.bytes_out
        self.records_in += stats.records_in
        self.records_out += stats.records_out
        self.tombstones_dropped += stats.tombstones_dropped
        self.aborted_batches_dropped += stats.aborted_batches_dropped
        self.markers_dropped += stats.markers_dropped
        for key, n in stats.gets_per_input_file.items():
            self.gets_per_input_file[key] = max(n, self.gets_per_input_file.get(key, 0))
        self.peak_keymap_entries = max(self.peak_keymap_entries, stats.peak_keymap_entries)
        self.peak_keymap_bytes = max(self.peak_keymap_bytes, stats.peak_keymap_bytes)
        self.keymap_allocated_bytes = max(self.keymap_allocated_bytes, stats.keymap_allocated_bytes)

    def merge(self, other: PassSummary) -> None:
        for name in (
            "jobs",
            "jobs_failed",
            "partitions",
            "files_in",
            "bytes_in",
            "files_out",
            "bytes_out",
            "records_in",
            "records_out",
            "tombstones_dropped",
            "aborted_batches_dropped",
            "markers_dropped",
            "bytes_read",
            "retention_chunks_deleted",
            "retention_bytes_deleted",
            "gc_files_deleted",
            "orphans_deleted",
            "offsets_expired",
            "table_records",
            "tables_failed",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for key, n in other.gets_per_input_file.items():
            self.gets_per_input_file[key] = max(n, self.gets_per_input_file.get(key, 0))
        self.peak_keymap_entries = max(self.peak_keymap_entries, other.peak_keymap_entries)
        self.peak_keymap_bytes = max(self.peak_keymap_bytes, other.peak_keymap_bytes)
        self.keymap_allocated_bytes = max(self.keymap_allocated_bytes, other.keymap_allocated_bytes)
        self.elapsed_s += other.elapsed_s

    def as_dict(self) -> dict[str, object]:
        return {
            "jobs": self.jobs,
            "jobs_failed": self.jobs_failed,
            "partitions": self.partitions,
            "files_in": self.files_in,
            "bytes_in": self.bytes_in,
            "files_out": self.files_out,
            "bytes_out": self.bytes_out,
            "records_in": self.records_in,
            "records_out": self.records_out,
            "records_removed": self.records_removed,
            "tombstones_dropped": self.tombstones_dropped,
            "aborted_batches_dropped": self.aborted_batches_dropped,
            "markers_dropped": self.markers_dropped,
            "max_gets_per_input_file": self.max_gets_per_input_file,
            "input_files_read": len(self.gets_per_input_file),
            "gets_per_input_file": dict(sorted(self.gets_per_input_file.items())),
            "bytes_read": self.bytes_read,
            "peak_keymap_entries": self.peak_keymap_entries,
            "peak_keymap_bytes": self.peak_keymap_bytes,
            "keymap_allocated_bytes": self.keymap_allocated_bytes,
            "retention_chunks_deleted": self.retention_chunks_deleted,
            "retention_bytes_deleted": self.retention_bytes_deleted,
            "gc_files_deleted": self.gc_files_deleted,
            "orphans_deleted": self.orphans_deleted,
            "offsets_expired": self.offsets_expired,
            "table_records": self.table_records,
            "tables_failed": self.tables_failed,
            "elapsed_s": round(self.elapsed_s, 3),
        }


class Progress(Protocol):
    """Where a pass reports what it is doing (the CLI draws rich progress bars)."""

    def stage(self, name: str) -> None: ...
    def job_started(self, plan: JobPlan) -> None: ...
    # bytes the job's streams consumed since the last call, out of
    # `compactor.job.planned_stream_bytes(plan)` at most (stream: "A" or "B")
    def bytes_read(self, plan: JobPlan, stream: str, nbytes: int) -> None: ...
    def file_swapped(self, plan: JobPlan, object_key: str, input_chunks: int) -> None: ...
    def job_done(self, plan: JobPlan, stats: JobStats | None) -> None: ...


class NoProgress:
    def stage(self, name: str) -> None:
        pass

    def job_started(self, plan: JobPlan) -> None:
        pass

    def bytes_read(self, plan: JobPlan, stream: str, nbytes: int) -> None:
        pass

    def file_swapped(self, plan: JobPlan, object_key: str, input_chunks: int) -> None:
        pass

    def job_done(self, plan: JobPlan, stats: JobStats | None) -> None:
        pass
