"""`skiff compact`'s progress bars (skiff.cli.compact_output.RichProgress) within a job: per
stream, the bytes consumed out of the most it can read (`planned_bytes_per_stream`: A over
the files holding compacted data, B over all input files), and input chunks swapped."""

from __future__ import annotations

import io
import uuid

from rich.console import Console
from skiff.cli.compact_output import RichProgress
from skiff.compactor.job import planned_bytes_per_stream, planned_stream_bytes
from skiff.compactor.plan import InputChunk, InputFile, JobPlan, JobStats, PartitionWork
from skiff.fileformat.chunk_reader import ChunkLocation

COMPACT = uuid.UUID(int=1)
DELETE = uuid.UUID(int=2)


def _plan() -> JobPlan:
    def chunk(cid: int, tid: uuid.UUID, key: str) -> InputChunk:
        return InputChunk(tid, 0, ChunkLocation(cid, key, 0, 10, 0, 0, 1, 0))

    files = (
        InputFile("both", 3 * 1024 * 1024, (chunk(1, COMPACT, "both"), chunk(2, DELETE, "both"))),
        InputFile("logs-only", 1024 * 1024, (chunk(3, DELETE, "logs-only"),)),
    )
    works = (
        PartitionWork(COMPACT, 0, "table", True, False, 0, 1, 1000),
        PartitionWork(DELETE, 0, "events", False, True, 0, 2, 1000),
    )
    return JobPlan("j1", files, works, 0)


def test_most_bytes_per_stream() -> None:
    plan = _plan()
    assert planned_bytes_per_stream(plan) == {"A": 3 * 1024 * 1024, "B": 4 * 1024 * 1024}
    assert planned_stream_bytes(plan) == 7 * 1024 * 1024


def test_bars_per_stream_and_swaps() -> None:
    out = io.StringIO()
    progress = RichProgress(Console(file=out, width=200, force_terminal=False), show_bars=True)
    plan = _plan()
    with progress:
        progress.stage("compaction")
        progress.job_started(plan)
        progress.bytes_read(plan, "A", 1024 * 1024)
        progress.bytes_read(plan, "B", 2 * 1024 * 1024)
        tasks = {t.description.strip(): t for t in progress.bars.tasks}
        a = next(t for d, t in tasks.items() if d.startswith("stream A"))
        b = next(t for d, t in tasks.items() if d.startswith("stream B"))
        assert (a.completed, a.total) == (1024 * 1024, 3 * 1024 * 1024)
        assert (b.completed, b.total) == (2 * 1024 * 1024, 4 * 1024 * 1024)
        progress.file_swapped(plan, "out-0", 3)
        chunks = next(t for d, t in tasks.items() if d.endswith("input chunks swapped"))
        assert (chunks.completed, chunks.total) == (3, 3)
        progress.job_done(plan, JobStats())
        assert a.completed == a.total and b.completed == b.total
        progress.finish()
    text = out.getvalue()
    assert "swapped out-0 for 3 input chunk(s)" in text
    assert "3.0 MiB / 3.0 MiB" in text and "4.0 MiB / 4.0 MiB" in text
