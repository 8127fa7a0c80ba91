"""`skiff agents list` and `skiff --version` as real processes against `skiff metadata`
(PostgreSQL) with two running agents (moto S3): the command lists what Kafka clients are told
(the node ids and addresses of confluent-kafka's Metadata answer), each agent's zone,
readiness and version (the one `skiff --version` prints and /metrics exports as
`skiff_build_info`), an agent that reports no version (one from before versions) as `-`, and
an agent that stopped is gone from the list."""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.request
from collections.abc import Callable
from typing import Any

from confluent_kafka.admin import AdminClient
from skiff.metadata.build_info import SKIFF_VERSION
from skiff.metadata.types import AgentInfo
from skiff.metadata.wire.connect import open_sync_metadata_client

from tests.e2e.test_graceful_shutdown import spawn_agent, wait_until
from tests.support.agents import REPO, SkiffProcess, skiff_command
from tests.support.s3servers import S3Bucket


def _skiff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*skiff_command(), *args], capture_output=True, text=True, timeout=60, cwd=str(REPO)
    )


def _listed(url: str) -> list[dict[str, Any]]:
    done = _skiff("agents", "list", "--metadata", url, "--json")
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, Any]] = json.loads(done.stdout)
    return rows


def test_agents_list_shows_what_clients_are_told_with_zone_readiness_and_version(
    spawn_skiff: Callable[..., SkiffProcess], moto_s3: S3Bucket, pg_url: str
) -> None:
    version = _skiff("--version")
    assert (version.returncode, version.stdout) == (0, f"skiff {SKIFF_VERSION}\n")
    assert SKIFF_VERSION != "unknown"  # the installed distribution's version

    md = spawn_skiff("metadata", "--db", pg_url, "--port", "{port}")
    url = f"http://127.0.0.1:{md.port}"
    a = spawn_agent(spawn_skiff, moto_s3, url, "cli-a")
    b = spawn_agent(spawn_skiff, moto_s3, url, "cli-b", env={"SKIFF_ZONE": "zone-b"})
    wait_until(lambda: len(_listed(url)) == 2, "both agents to be listed")
    assert (
        f"skiff agent cli-a listening on 127.0.0.1:{a.proc.port} (skiff {SKIFF_VERSION})"
        in a.proc.log.read_text()
    )

    rows = _listed(url)
    assert [r["agent_id"] for r in rows] == ["cli-a", "cli-b"]
    assert all(r["ready"] and r["version"] == SKIFF_VERSION for r in rows), rows
    assert [r["zone"] for r in rows] == [None, "zone-b"]
    assert all(r["heartbeat_age_s"] < 60 for r in rows), rows
    brokers = AdminClient({"bootstrap.servers": a.proc.bootstrap}).list_topics(timeout=30).brokers
    told = {n: (m.host, m.port) for n, m in brokers.items()}
    assert {r["node_id"]: (r["host"], r["port"]) for r in rows} == told
    assert {(r["host"], r["port"]) for r in rows} == {("127.0.0.1", a.proc.port), ("127.0.0.1", b.proc.port)}

    table = _skiff("agents", "list", "--metadata", url)
    assert table.returncode == 0, table.stderr
    header, *lines = [line.split() for line in table.stdout.splitlines() if line.strip() and "─" not in line]
    assert header == [
        "AGENT",
        "NODE-ID",
        "READY",
        "ZONE",
        "VERSION",
        "ADDRESS",
        "LISTENERS",
        "HEARTBEAT-AGE-S",
    ]
    assert [line[:5] for line in lines] == [
        ["cli-a", str(rows[0]["node_id"]), "yes", "-", SKIFF_VERSION],
        ["cli-b", str(rows[1]["node_id"]), "yes", "zone-b", SKIFF_VERSION],
    ]

    with urllib.request.urlopen(f"http://127.0.0.1:{a.http_port}/metrics", timeout=10) as r:
        assert f'skiff_build_info{{version="{SKIFF_VERSION}"}} 1.0' in r.read().decode()
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        assert f'skiff_build_info{{version="{SKIFF_VERSION}"}} 1.0' in r.read().decode()

    # an agent from before versions heartbeats without one (again before each look: it must
    # stay within the service's agent TTL however slow the machine)
    client = open_sync_metadata_client(url, timeout_s=10)
    try:
        client.heartbeat_agent(AgentInfo("cli-old", "127.0.0.1", 1))
        old = {r["agent_id"]: r for r in _listed(url)}["cli-old"]
        assert old["version"] is None
        client.heartbeat_agent(AgentInfo("cli-old", "127.0.0.1", 1))
        table = _skiff("agents", "list", "--metadata", url).stdout
        assert [line.split()[4] for line in table.splitlines() if line.strip().startswith("cli-old")] == [
            "-"
        ], table
    finally:
        client.close()

    b.proc.kill(signal.SIGTERM)  # deregisters on its way out
    wait_until(lambda: "cli-b" not in {r["agent_id"] for r in _listed(url)}, "the stopped agent to leave")


def test_agents_list_without_a_metadata_service_is_one_line(tmp_path: Any) -> None:
    done = _skiff("agents", "list", "--metadata", "http://127.0.0.1:1")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("skiff agents: metadata service at"), (
        done.stderr
    )
