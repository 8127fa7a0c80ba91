"""A test hook: stop a compactor at a known point of its work.

`skiff compact` and agents with the compaction role read `SKIFF_COMPACT_PAUSE_AFTER_SWAPS=N`
(not a setting for production: tests use it to kill or race a compactor deterministically).
With it, the process's job runner, once N output files have been swapped in (counted
over the whole process; N=0: when its first job starts, right after the claim), writes

    skiff compact test hook: paused after N swap(s), job JOB, holder HOLDER

to stderr and blocks the job's thread until SIGUSR1 (or until killed). Meanwhile the job
keeps its lease (the event loop renews it), so other compactors cannot take its
partitions; the swaps made so far are in metadata, the rest of the job's work is not.
It pauses once per process: after SIGUSR1 the runner carries on and never pauses again.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping

ENV = "SKIFF_COMPACT_PAUSE_AFTER_SWAPS"
MARKER = "skiff compact test hook: paused"


class PauseHook:
    def __init__(self, after_swaps: int) -> None:
        if after_swaps < 0:
            raise ValueError(f"{ENV} must be >= 0, got {after_swaps}")
        self.after_swaps = after_swaps
        self.swaps = 0
        self.resume = threading.Event()  # set by SIGUSR1 (see `install_resume_signal`)
        self.paused = threading.Event()  # set once the marker is written (in-process tests)
        self._paused = False
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> PauseHook | None:
        raw = env.get(ENV, "").strip()
        return cls(int(raw)) if raw else None

    def job_started(self, job_id: str, holder: str) -> None:
        """In the job's thread, before it reads anything."""
        self._maybe_pause(job_id, holder)

    def swapped(self, job_id: str, holder: str) -> None:
        """In the job's thread, after a swap is committed in metadata."""
        with self._lock:
            self.swaps += 1
        self._maybe_pause(job_id, holder)

    def _maybe_pause(self, job_id: str, holder: str) -> None:
        with self._lock:
            if self._paused or self.swaps != self.after_swaps:
                return
            self._paused = True
        sys.stderr.write(f"{MARKER} after {self.swaps} swap(s), job {job_id}, holder {holder}\n")
        sys.stderr.flush()
        self.paused.set()
        self.resume.wait()

    def install_resume_signal(self) -> None:
        """SIGUSR1 resumes the paused job (call in the event loop's thread)."""
        import asyncio
        import signal

        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, self.resume.set)
