"""Agent identity: `skiff agent` processes on one host without `--agent-id` register under
distinct ids; a second agent started with a live agent's id from another address fails
at start-up with a clear message and a non-zero exit status."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from confluent_kafka.admin import AdminClient

from tests.e2e.test_cluster import wait_for_brokers
from tests.support.agents import REPO, SkiffProcess, agent_args, skiff_command
from tests.support.s3servers import free_port

ENV = {"SKIFF_HEARTBEAT_INTERVAL_MS": "300", "SKIFF_AGENT_TTL_MS": "3000"}


def _agent_args(tmp_path: Path, metadata_url: str, *extra: str) -> list[str]:
    return agent_args(f"file://{tmp_path / 'bucket'}", metadata_url, *extra)


def test_agents_on_one_host_without_agent_id_get_distinct_identities(
    spawn_skiff: Callable[..., SkiffProcess], tmp_path: Path
) -> None:
    md = spawn_skiff("metadata", "--db", f"sqlite:///{tmp_path / 'm.db'}", "--port", "{port}")
    url = f"http://127.0.0.1:{md.port}"
    a = spawn_skiff(*_agent_args(tmp_path, url), env=ENV)
    b = spawn_skiff(*_agent_args(tmp_path, url), env=ENV)
    wait_for_brokers(a.bootstrap, 2)
    brokers = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10).brokers
    assert sorted(int(x.port) for x in brokers.values()) == sorted([a.port, b.port])
    assert len(brokers) == 2


def test_a_live_agent_id_from_another_address_fails_at_start_up(
    spawn_skiff: Callable[..., SkiffProcess], tmp_path: Path
) -> None:
    md = spawn_skiff("metadata", "--db", f"sqlite:///{tmp_path / 'm.db'}", "--port", "{port}")
    url = f"http://127.0.0.1:{md.port}"
    first = spawn_skiff(*_agent_args(tmp_path, url, "--agent-id", "same"), env=ENV)
    port = free_port()
    argv = [x.replace("{port}", str(port)) for x in _agent_args(tmp_path, url, "--agent-id", "same")]
    done = subprocess.run(
        skiff_command() + argv,
        env={**os.environ, **ENV},
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "cannot start" in done.stderr
    assert f"in use by a live agent at 127.0.0.1:{first.port}" in done.stderr
    assert "Traceback" not in done.stderr
    assert first.alive()
