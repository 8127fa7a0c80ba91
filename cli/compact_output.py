"""What `skiff compact` shows: progress bars on stderr while a pass works (`RichProgress`:
per job, its input chunks and the bytes each of its two streams has read against the
plan) and the pass's summary on stdout at the end (`print_summary`)."""

from __future__ import annotations

import logging
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text
from skiff.compactor.job import planned_bytes_per_stream
from skiff.compactor.pass_summary import PassSummary
from skiff.compactor.plan import JobPlan, JobStats


class _DoneOfTotal(ProgressColumn):
    """`done/total`, as sizes for the byte bars (tasks added with bytes=True)."""

    def render(self, task: Task) -> Text:
        done, total = int(task.completed), int(task.total or 0)
        if task.fields.get("bytes"):
            return Text(f"{_size(done)} / {_size(total)}")
        return Text(f"{done}/{total}")


class RichProgress:
    """Progress bars on stderr: one for the pass's stages; per job, one for its input
    chunks swapped out and one per stream for the bytes it consumed (A: the files holding
    compacted data, pass 1; B: every input file, pass 2 and copies)."""

    def __init__(self, console: Console, *, show_bars: bool | None = None) -> None:
        self.bars = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            _DoneOfTotal(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
            # bars only on a terminal (by default): piped or captured stderr gets the log lines alone
            disable=not (console.is_terminal if show_bars is None else show_bars),
        )
        self._stage: Any = None
        self._saved_handlers: list[logging.Handler] | None = None
        # job id -> (chunk task, input chunks, stream name -> (byte task, most bytes))
        self._jobs: dict[str, tuple[Any, int, dict[str, tuple[Any, int]]]] = {}

    def __enter__(self) -> RichProgress:
        self.bars.__enter__()
        if not self.bars.disable:
            # While bars are live, log records print through the bars' console (above the
            # bars), never into them; the command's handlers come back on exit.
            from rich.logging import RichHandler

            root = logging.getLogger()
            self._saved_handlers = list(root.handlers)
            handler = RichHandler(console=self.bars.console, show_path=False)
            if self._saved_handlers:
                # the command's formatter class (tracebacks or not); rich shows time and level
                kind = type(self._saved_handlers[0].formatter or logging.Formatter())
                handler.setFormatter(kind("%(name)s: %(message)s"))
                handler.setLevel(self._saved_handlers[0].level)
            root.handlers = [handler]
        return self

    def __exit__(self, *exc: object) -> None:
        if self._saved_handlers is not None:
            logging.getLogger().handlers = self._saved_handlers
            self._saved_handlers = None
        self.bars.__exit__(None, None, None)

    def stage(self, name: str) -> None:
        if self._stage is not None:
            self.bars.update(self._stage, completed=1)
        self._stage = self.bars.add_task(name, total=1)

    def job_started(self, plan: JobPlan) -> None:
        chunks = sum(len(f.chunks) for f in plan.files)
        label = f"  job {plan.job_id}: {len(plan.partitions)} partition(s), {len(plan.files)} file(s)"
        chunk_task = self.bars.add_task(f"{label}, input chunks swapped", total=chunks)
        streams = {
            name: (self.bars.add_task(f"    stream {name} ({what})", total=total, bytes=True), total)
            for name, what, total in (
                ("A", "pass 1: key map", planned_bytes_per_stream(plan)["A"]),
                ("B", "pass 2: survivors out", planned_bytes_per_stream(plan)["B"]),
            )
            if total
        }
        self._jobs[plan.job_id] = (chunk_task, chunks, streams)

    def bytes_read(self, plan: JobPlan, stream: str, nbytes: int) -> None:
        job = self._jobs.get(plan.job_id)
        if job is not None and stream in job[2]:
            self.bars.advance(job[2][stream][0], nbytes)

    def file_swapped(self, plan: JobPlan, object_key: str, input_chunks: int) -> None:
        self.bars.advance(self._jobs[plan.job_id][0], input_chunks)
        self.bars.console.log(f"swapped {object_key} for {input_chunks} input chunk(s)")

    def job_done(self, plan: JobPlan, stats: JobStats | None) -> None:
        chunk_task, chunks, streams = self._jobs.pop(plan.job_id)
        self.bars.update(chunk_task, completed=chunks)
        # each stream stops after the job's last partition: a file's tail may never be read
        for task, total in streams.values():
            self.bars.update(task, completed=total)
        if stats is None:
            self.bars.console.log(f"job {plan.job_id} failed (see the log); it will be retried")

    def finish(self) -> None:
        if self._stage is not None:
            self.bars.update(self._stage, completed=1)


def _size(n: int) -> str:
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if x < 1024 or unit == "GiB":
            return f"{x:.1f} {unit}" if unit != "B" else f"{n} B"
        x /= 1024
    return f"{n} B"


def _gets_histogram(gets: dict[str, int]) -> str:
    """'2 GETs: 5 files, 1 GET: 3 files' (the per-file counts are in --json)."""
    counts: dict[int, int] = {}
    for n in gets.values():
        counts[n] = counts.get(n, 0) + 1
    parts = [
        f"{n} GET{'s' if n != 1 else ''}: {k} file{'s' if k != 1 else ''}" for n, k in sorted(counts.items())
    ]
    return ", ".join(reversed(parts)) or "-"


def print_summary(summary: PassSummary, console: Console) -> None:
    t = Table(title="skiff compact", show_header=False)
    t.add_column("what")
    t.add_column("value", justify="right")
    t.add_row("jobs (failed)", f"{summary.jobs} ({summary.jobs_failed})")
    t.add_row("files in / out", f"{summary.files_in} / {summary.files_out}")
    t.add_row("bytes in / out", f"{_size(summary.bytes_in)} / {_size(summary.bytes_out)}")
    t.add_row("records in / out", f"{summary.records_in} / {summary.records_out}")
    t.add_row("records removed", str(summary.records_removed))
    t.add_row("tombstones dropped", str(summary.tombstones_dropped))
    t.add_row(
        "aborted txn batches / markers dropped",
        f"{summary.aborted_batches_dropped} / {summary.markers_dropped}",
    )
    t.add_row("bytes streamed (A+B)", _size(summary.bytes_read))
    t.add_row("GETs per input file", _gets_histogram(summary.gets_per_input_file))
    t.add_row(
        "key map: entries / bytes used (allocated)",
        f"{summary.peak_keymap_entries} / {_size(summary.peak_keymap_bytes)} ({_size(summary.keymap_allocated_bytes)})",
    )
    t.add_row(
        "retention: chunks / bytes dropped",
        f"{summary.retention_chunks_deleted} / {_size(summary.retention_bytes_deleted)}",
    )
    t.add_row("GC: files / orphans deleted", f"{summary.gc_files_deleted} / {summary.orphans_deleted}")
    t.add_row("committed offsets expired", str(summary.offsets_expired))
    t.add_row("time", f"{summary.elapsed_s:.2f} s")
    console.print(t)
