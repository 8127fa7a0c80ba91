"""A test hook: stop the table materializer at a known stage of a commit.

`skiff compact` (and the maintenance role of agents and the playground) read
`SKIFF_TABLES_PAUSE_AT=STAGE[:N]` (not a setting for production: tests use it to SIGKILL a
materializer at each stage deterministically). At the N-th commit of the process (default
1, counted over all tables), at STAGE, it writes

    skiff tables test hook: paused at STAGE, commit N, table TABLE

to stderr and blocks that commit's thread until the process is killed (the event loop
keeps renewing the topic's lease meanwhile). The stages, in the order a commit meets them:

- `after_parquet`: the commit's Parquet data files (and the manifests naming them) are in
  the bucket; the catalog knows nothing of them.
- `before_commit`: the new table metadata JSON is written too; the catalog's
  compare-and-swap of the table's metadata location has not run.
- `after_commit`: the snapshot is committed (the records and their offsets are in the
  table); the run has not moved on.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

ENV = "SKIFF_TABLES_PAUSE_AT"
MARKER = "skiff tables test hook: paused"
STAGES = ("after_parquet", "before_commit", "after_commit")


@dataclass
class TablesPause:
    stage: str
    commit: int = 1  # pause at this commit of the process (1-based)
    seen: dict[str, int] = field(default_factory=dict)  # stage -> commits that reached it
    _lock: threading.Lock = field(default_factory=threading.Lock)
    forever: threading.Event = field(default_factory=threading.Event)  # never set: killed there

    def __post_init__(self) -> None:
        if self.stage not in STAGES or self.commit < 1:
            raise ValueError(f"{ENV} must be STAGE[:N] with STAGE one of {', '.join(STAGES)} and N >= 1")

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> TablesPause | None:
        raw = env.get(ENV, "").strip()
        if not raw:
            return None
        stage, _, n = raw.partition(":")
        try:
            return cls(stage, int(n) if n else 1)
        except ValueError as e:
            raise ValueError(f"{ENV}={raw!r}: {e}") from None

    def __call__(self, stage: str, table: str) -> None:
        """Called by the materializer at each stage of each commit (in the commit's thread)."""
        with self._lock:
            self.seen[stage] = n = self.seen.get(stage, 0) + 1
        if stage != self.stage or n != self.commit:
            return
        sys.stderr.write(f"{MARKER} at {stage}, commit {n}, table {table}\n")
        sys.stderr.flush()
        self.forever.wait()
