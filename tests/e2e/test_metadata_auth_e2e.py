"""A secured cluster end to end, real processes: `skiff metadata --tokens-file`, `skiff
agent` with the agent token (from a token file, as a mounted Secret), a confluent-kafka
producer and consumer through it, `skiff compact --once` with the compactor token, and
`skiff inspect --metadata` with the reader token. Refused: the compactor with a reader
token or none, an agent with a wrong token (at start-up, with a clear message), and a
fake agent registration by anything but the agent role.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from skiff.metadata.errors import CLUSTER_AUTHORIZATION_FAILED, SASL_AUTHENTICATION_FAILED, MetadataError
from skiff.metadata.types import AgentInfo, FetchQuery
from skiff.metadata.wire.credentials import MetadataCredentials
from skiff.metadata.wire.http_client import HttpMetadataClient

from tests.e2e.test_clients_roundtrip import create_topic
from tests.support.agents import SkiffProcess, agent_args, skiff_command
from tests.support.s3servers import free_port

TOKENS = {
    "agent": "agent-" + uuid.uuid4().hex,
    "compactor": "compactor-" + uuid.uuid4().hex,
    "reader": "reader-" + uuid.uuid4().hex,
    "admin": "admin-" + uuid.uuid4().hex,
}
RECORDS_PER_ROUND = 50
ROUNDS = 4


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKIFF_METADATA_TOKEN")}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def _run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*skiff_command(), *args], capture_output=True, text=True, timeout=120, env=env)


def _as(url: str, role: str | None) -> HttpMetadataClient:
    return HttpMetadataClient(url, credentials=MetadataCredentials(token=TOKENS[role] if role else None))


def _chunk_rows(url: str, topic: str) -> int:
    async def go() -> int:
        md = _as(url, "admin")
        try:
            t = (await md.describe_topics([topic]))[topic]
            (info,) = await md.find_chunks([FetchQuery(t.topic_id, 0, 0, 1 << 40)])
            return len(info.chunks)
        finally:
            await md.close()

    return asyncio.run(go())


def _consume(bootstrap: str, topic: str, count: int) -> list[bytes]:
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}", "enable.auto.commit": False}
    )
    out: list[bytes] = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        while len(out) < count:
            m = c.poll(30)
            assert m is not None, f"consumed {len(out)} of {count}"
            assert m.error() is None, m.error()
            out.append(m.value())
    finally:
        c.close()
    return out


def test_secured_cluster(spawn_skiff: Callable[..., SkiffProcess], tmp_path: Path) -> None:
    tokens_file = tmp_path / "tokens"
    tokens_file.write_text("".join(f"{role}:{token}\n" for role, token in TOKENS.items()))
    agent_token_file = tmp_path / "agent-token"
    agent_token_file.write_text(TOKENS["agent"] + "\n")
    bucket = f"file://{tmp_path / 'bucket'}"
    md_proc = spawn_skiff(
        "metadata",
        "--db",
        f"sqlite:///{tmp_path / 'm.db'}",
        "--port",
        "{port}",
        "--tokens-file",
        str(tokens_file),
    )
    url = f"http://127.0.0.1:{md_proc.port}"

    # an agent with a wrong token stops at start-up and says why
    wrong = _run(
        "agent",
        "--bucket",
        bucket,
        "--metadata",
        url,
        "--host",
        "127.0.0.1",
        "--port",
        str(free_port()),
        env=_env(SKIFF_METADATA_TOKEN="not-the-agent-token-xxxxxxxx"),
    )
    assert wrong.returncode != 0
    assert "the metadata service refused: invalid bearer token" in wrong.stderr + wrong.stdout
    assert "Traceback" not in wrong.stderr + wrong.stdout

    agent = spawn_skiff(
        *agent_args(bucket, url),
        "--agent-id",
        "secured-1",
        env=_env(SKIFF_METADATA_TOKEN_FILE=str(agent_token_file), SKIFF_FLUSH_INTERVAL_MS="20"),
    )
    topic = "secured"
    create_topic(agent.bootstrap, topic, partitions=1)
    p = Producer({"bootstrap.servers": agent.bootstrap, "linger.ms": 1, "acks": "all"})
    sent = []
    for r in range(ROUNDS):  # each round flushed on its own: several agent files to merge
        for i in range(RECORDS_PER_ROUND):
            value = f"r{r}-{i}".encode()
            sent.append(value)
            p.produce(topic, value, partition=0)
        assert p.flush(30) == 0
    assert _consume(agent.bootstrap, topic, len(sent)) == sent
    rows_before = _chunk_rows(url, topic)
    assert rows_before >= 2

    # the compactor without a token, or with the reader's: refused, clearly, nothing changed
    for env in (_env(), _env(SKIFF_METADATA_TOKEN=TOKENS["reader"])):
        refused = _run(
            "compact", "--bucket", bucket, "--metadata", url, "--once", "--merge-min-chunks", "2", env=env
        )
        assert refused.returncode != 0
        assert "skiff compact: metadata refused: " in refused.stderr, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr  # one line
        assert "Traceback" not in refused.stderr
    assert _chunk_rows(url, topic) == rows_before

    # with the compactor token it works: chunks merged, data unchanged
    done = _run(
        "compact",
        "--bucket",
        bucket,
        "--metadata",
        url,
        "--once",
        "--json",
        "--merge-min-chunks",
        "2",
        env=_env(SKIFF_METADATA_TOKEN=TOKENS["compactor"]),
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["jobs"] > 0 and summary["jobs_failed"] == 0
    assert _chunk_rows(url, topic) < rows_before
    assert _consume(agent.bootstrap, topic, len(sent)) == sent

    # skiff inspect with the reader token knows the file's topic
    seg = sorted((tmp_path / "bucket" / "segments").glob("*.seg"))[0]
    inspected = _run(
        "inspect", str(seg), "--json", "--metadata", url, env=_env(SKIFF_METADATA_TOKEN=TOKENS["reader"])
    )
    assert inspected.returncode == 0, inspected.stderr
    assert json.loads(inspected.stdout)["metadata"]["object_key"] == f"segments/{seg.name}"

    # fake agent registrations: only the agent role may register
    async def fake_agents() -> None:
        fake = AgentInfo("attacker", "203.0.113.7", 9092, None)
        for role, code in (
            (None, SASL_AUTHENTICATION_FAILED),
            ("reader", CLUSTER_AUTHORIZATION_FAILED),
            ("compactor", CLUSTER_AUTHORIZATION_FAILED),
        ):
            md = _as(url, role)
            try:
                try:
                    await md.heartbeat_agent(fake)
                    raise AssertionError(f"{role} registered an agent")
                except MetadataError as e:
                    assert e.error_code == code, (role, e)
            finally:
                await md.close()
        md = _as(url, "reader")
        try:
            assert [a.agent_id for a in await md.live_agents()] == ["secured-1"]
        finally:
            await md.close()

    asyncio.run(fake_agents())


def test_skiff_metadata_refuses_bad_security_settings(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("# nothing yet\n")
    short = tmp_path / "short"
    short.write_text("agent:secret\n")
    cases = [
        (["--tokens-file", str(empty)], "holds no token"),
        (["--tokens-file", str(tmp_path / "missing")], "cannot read the tokens file"),
        (["--tokens-file", str(short)], "line 1: a token must be at least 16"),
        (["--tls-cert", str(empty)], "--tls-cert and --tls-key go together"),
        (["--tls-cert", str(empty), "--tls-key", str(empty)], "cannot load the metadata TLS files"),
    ]
    for args, message in cases:
        out = _run("metadata", "--db", f"sqlite:///{tmp_path / 'm.db'}", "--port", "0", *args, env=_env())
        assert out.returncode == 2, (args, out.stderr)
        assert message in out.stderr, (args, out.stderr)
        assert "Traceback" not in out.stderr and "secret" not in out.stderr
