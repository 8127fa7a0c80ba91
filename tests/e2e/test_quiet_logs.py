"""An idle agent logs nothing at INFO (issue 21): no line per heartbeat, per transaction
scan or per metadata HTTP request (httpx and httpcore stay at WARNING), and with
`--log-format json` every line the agent and the metadata service log is one JSON object.

The agent heartbeats and scans transactions every 20 ms here, so a few hundred
milliseconds of idling cover what a minute at the defaults would; the test waits for the
heartbeats themselves (metadata's record of the agent's last heartbeat moving on).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

from skiff.metadata.wire.http_client import SyncHttpMetadataClient

from tests.support.agents import SkiffProcess, agent_args

BEATS = 10
BANNER = re.compile(r"skiff agent \S+ listening on \S+ \(skiff \S+\)")
FAST = {
    "SKIFF_HEARTBEAT_INTERVAL_MS": "20",
    "SKIFF_TRANSACTION_SCAN_INTERVAL_MS": "20",
    "SKIFF_LOG_FORMAT": "json",  # the environment variable; the metadata service gets the flag
}


def _entries(p: SkiffProcess) -> list[dict[str, str]]:
    """The process's log lines (stderr), each parsed: any line that is not JSON fails the
    test, but for the agent's start-up banner on stdout (which the harness merges in)."""
    lines = [line for line in p.log.read_text(errors="replace").splitlines() if line.strip()]
    return [json.loads(line) for line in lines if not BANNER.fullmatch(line)]


def _wait_for_beats(md: SyncHttpMetadataClient, agent_id: str, beats: int, agent: SkiffProcess) -> None:
    """Until metadata has recorded `beats` more heartbeats of `agent_id` (each moves its
    last_heartbeat_ms on)."""
    seen: set[int] = set()
    deadline = time.monotonic() + 30
    while len(seen) <= beats:
        assert agent.alive(), agent.log.read_text()
        assert time.monotonic() < deadline, f"{len(seen)} heartbeats seen:\n{agent.log.read_text()}"
        seen |= {a.last_heartbeat_ms for a in md.live_agents() if a.agent_id == agent_id}


def test_an_idle_agent_logs_nothing_at_info(spawn_skiff: Callable[..., SkiffProcess], tmp_path: Path) -> None:
    md = spawn_skiff(
        "--log-level", "INFO", "metadata", "--db", f"sqlite:///{tmp_path / 'm.db'}", "--port", "{port}",
        "--log-format", "json",
    )  # fmt: skip
    url = f"http://127.0.0.1:{md.port}"
    agent = spawn_skiff(
        "--log-level", "INFO", *agent_args(f"file://{tmp_path / 'bucket'}", url, "--agent-id", "quiet"), env=FAST
    )  # fmt: skip
    client = SyncHttpMetadataClient(url)
    try:
        _wait_for_beats(client, "quiet", 2, agent)  # started and beating: start-up lines are written
        before = len(_entries(agent))
        _wait_for_beats(client, "quiet", BEATS, agent)
    finally:
        client.close()
    idle = _entries(agent)[before:]
    assert [e for e in idle if e["level"] == "INFO"] == []
    everything = _entries(agent) + _entries(md)
    assert not [e for e in everything if e["logger"].startswith(("httpx", "httpcore"))]
    assert {"time", "level", "logger", "message"} <= set(everything[0])
    assert any(e["logger"].startswith("uvicorn") for e in _entries(md))  # uvicorn's lines are JSON too
