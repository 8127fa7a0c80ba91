"""Bound agent tokens and checked commits, real processes: `skiff metadata --tokens-file
--bucket` (commits HEAD their object), a `skiff agent` whose token is bound to its id
registers and serves confluent-kafka producers and a consumer (every commit checked, none
refused), and an agent started with that token under another agent's id is refused at
start-up with one ERROR line naming the id, and is never listed.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
from confluent_kafka import Producer

from tests.e2e.test_clients_roundtrip import create_topic
from tests.e2e.test_metadata_auth_e2e import _consume
from tests.support.agents import SkiffProcess, agent_args, skiff_command
from tests.support.s3servers import free_port

BOUND = "bound-" + uuid.uuid4().hex
READER = "reader-" + uuid.uuid4().hex
RECORDS = 200


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKIFF_")}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def test_bound_agent_serves_and_an_impostor_is_refused(
    spawn_skiff: Callable[..., SkiffProcess], tmp_path: Path
) -> None:
    tokens_file = tmp_path / "tokens"
    tokens_file.write_text(f"agent=bound-1:{BOUND}\nreader:{READER}\n")
    token_file = tmp_path / "agent-token"
    token_file.write_text(BOUND + "\n")
    bucket = f"file://{tmp_path / 'bucket'}"
    (tmp_path / "bucket").mkdir()
    md = spawn_skiff(
        "metadata",
        "--db",
        f"sqlite:///{tmp_path / 'm.db'}",
        "--port",
        "{port}",
        "--tokens-file",
        str(tokens_file),
        "--bucket",
        bucket,
        env=_env(),
    )
    url = f"http://127.0.0.1:{md.port}"
    agent = spawn_skiff(
        *agent_args(bucket, url),
        "--agent-id",
        "bound-1",
        env=_env(SKIFF_METADATA_TOKEN_FILE=str(token_file), SKIFF_FLUSH_INTERVAL_MS="20"),
    )

    # the impostor: the same token, another agent's id; refused at start-up, says why
    impostor_args = [
        a.replace("{port}", str(free_port())) for a in agent_args(bucket, url, "--agent-id", "bound-2")
    ]
    impostor = subprocess.run(
        [*skiff_command(), *impostor_args],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(SKIFF_METADATA_TOKEN_FILE=str(token_file)),
    )
    out = impostor.stdout + impostor.stderr
    assert impostor.returncode != 0, (impostor_args, out)
    errors = [line for line in out.splitlines() if " ERROR " in line]
    assert len(errors) == 1, out
    assert "agent registration refused" in errors[0]
    assert "bound to agent id bound-1 and may not act as agent id 'bound-2'" in errors[0]
    assert "Traceback" not in out

    # the bound agent serves real producers; every commit was checked in the bucket
    topic = "bound"
    create_topic(agent.bootstrap, topic, partitions=1)
    p = Producer({"bootstrap.servers": agent.bootstrap, "linger.ms": 1, "acks": "all"})
    sent = [f"v{i}".encode() for i in range(RECORDS)]
    for i, value in enumerate(sent):
        p.produce(topic, value, partition=0)
        if i % 50 == 49:
            assert p.flush(30) == 0
    assert p.flush(30) == 0
    assert _consume(agent.bootstrap, topic, len(sent)) == sent

    reader = {"authorization": f"Bearer {READER}"}
    listed = httpx.get(f"{url}/v1/agents", headers=reader).json()
    assert [a["agent_id"] for a in listed] == ["bound-1"]
    metrics = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in httpx.get(f"{url}/metrics", headers=reader).text.splitlines()
        if line and not line.startswith("#")
    }
    assert metrics['skiff_metadata_commit_object_checks_total{outcome="ok"}'] >= 4
    for outcome in ("missing", "size_mismatch", "unavailable", "error"):
        assert metrics[f'skiff_metadata_commit_object_checks_total{{outcome="{outcome}"}}'] == 0
    assert metrics['skiff_metadata_requests_refused_total{reason="agent_id"}'] >= 1
