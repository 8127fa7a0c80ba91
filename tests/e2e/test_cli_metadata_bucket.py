"""`skiff metadata` without `--bucket` learns the bucket from the agents that register
(issue 25, item 2): real processes on SQLite and file:// buckets.

- before any agent, metadata knows no bucket (what Spark reads: `bucket_url`, GET /v1/cluster);
- the first agent teaches it, and the blocking HTTP client Spark's driver uses is told it;
- an agent writing to another bucket does not start: exit 1, one line naming both buckets;
- a restarted metadata service learns it again from the running agent's next claim.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from skiff.metadata.wire.connect import open_sync_metadata_client

from tests.support.agents import REPO, SkiffProcess, agent_args, skiff_command
from tests.support.s3servers import free_port

AGENT_ENV = {"SKIFF_HEARTBEAT_INTERVAL_MS": "100"}  # a claim every 10 heartbeats: every second


def _served_bucket(url: str) -> str | None:
    md = open_sync_metadata_client(url, timeout_s=5)
    try:
        return md.bucket_url()  # type: ignore[no-any-return]
    finally:
        md.close()


def _wait_for(cond: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s  # polling an external process, with a deadline
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_metadata_learns_the_bucket_and_refuses_another(
    spawn_skiff: Callable[..., SkiffProcess], tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'md.db'}"
    mport = free_port()
    md = spawn_skiff("metadata", "--db", db, "--port", "{port}", port=mport)
    url = f"http://127.0.0.1:{md.port}"
    assert _served_bucket(url) is None
    first = f"file://{tmp_path / 'bucket-a'}"
    spawn_skiff(*agent_args(first, url), "--agent-id", "a1", env=AGENT_ENV)
    assert _served_bucket(url) == first  # what Spark's driver asks for (spark.planner)

    other = f"file://{tmp_path / 'bucket-b'}"
    refused = subprocess.run(
        [*skiff_command(), *agent_args(other, url)[:-2], "--port", str(free_port()), "--agent-id", "a2"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(REPO),
    )
    assert refused.returncode == 1, refused.stderr
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith("skiff agent: cannot start:") and first in last and other in last, refused.stderr
    assert "Traceback" not in refused.stderr

    md.kill(15)  # a restart without --bucket: the running agent's next claim teaches it again
    spawn_skiff("metadata", "--db", db, "--port", "{port}", port=mport)
    _wait_for(lambda: _served_bucket(url) == first, "the restarted metadata to learn the bucket")
