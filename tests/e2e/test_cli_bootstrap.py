"""`skiff topics`, `groups` and `users` with Kafka's habits, against a real playground:

- `--bootstrap-server` (the agent's Kafka address) is enough: the command asks the agent
  for its metadata URL (broker config `skiff.metadata.url`, read here with confluent-kafka's
  AdminClient as `kafka-configs.sh` would) and does what `--metadata` does;
- a profile under XDG_CONFIG_HOME names the cluster once; `SKIFF_METADATA_URL` beats it
  and a flag beats both (a dead URL at the higher level proves which one was used);
- leaders are shown by the agent's name;
- `groups reset-offsets --to-datetime` plans what Kafka's own lookup (ListOffsets by
  timestamp through the agent) answers, inside a chunk too (three records of one batch).
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec, ResourceType

from tests.support.agents import REPO, _spawn, skiff_command
from tests.support.s3servers import free_port


@dataclass
class Playground:
    bootstrap: str
    metadata_url: str
    home: Path

    def skiff(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("SKIFF_")}
        full = {**base, "XDG_CONFIG_HOME": str(self.home), **(env or {})}
        return subprocess.run(
            [*skiff_command(), *args], capture_output=True, text=True, timeout=60, cwd=str(REPO), env=full
        )

    def ok(self, *args: str, env: dict[str, str] | None = None) -> str:
        r = self.skiff(*args, env=env)
        assert r.returncode == 0, f"skiff {' '.join(args)}: {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r.stdout

    def json(self, *args: str, env: dict[str, str] | None = None) -> Any:
        return json.loads(self.ok(*args, "--json", env=env))


@pytest.fixture(scope="module")
def pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Playground]:
    data = tmp_path_factory.mktemp("playground")
    port, mport = free_port(), free_port()
    p = _spawn(
        ["playground", "--data-dir", str(data / "d"), "--port", str(port), "--metadata-port", str(mport)],
        port,
        data / "playground.log",
    )
    home = data / "config"
    home.mkdir()
    yield Playground(p.bootstrap, f"http://127.0.0.1:{mport}", home)
    p.kill(15)


def test_the_agent_tells_its_metadata_url(pg: Playground) -> None:
    admin = AdminClient({"bootstrap.servers": pg.bootstrap})
    (node,) = admin.list_topics(timeout=10).brokers
    res = ConfigResource(ResourceType.BROKER, str(node))
    entry = admin.describe_configs([res])[res].result(timeout=10)["skiff.metadata.url"]
    assert entry.value == pg.metadata_url and entry.is_read_only


def test_bootstrap_server_works_for_topics_groups_and_users(pg: Playground) -> None:
    topic = f"bs-{uuid.uuid4().hex[:6]}"
    b = ("--bootstrap-server", pg.bootstrap)
    assert pg.ok("topics", "create", topic, "--partitions", "2", *b).strip() == f"Created topic {topic}."
    (d,) = pg.json("topics", "describe", topic, *b)
    assert [p["leader"] for p in d["partitions"]] == ["playground", "playground"]  # by name
    text = pg.ok("topics", "describe", topic, *b)
    assert "playground" in text and "NODE-ID" in text
    assert isinstance(pg.json("groups", "list", *b), list)
    pg.ok("users", "create", "alice", "--password", "pw", *b)
    assert "alice" in pg.ok("users", "list", *b)
    both = pg.skiff("topics", "list", *b, "--metadata", pg.metadata_url)
    assert both.returncode == 2 and both.stderr.count("\n") == 1 and "give one" in both.stderr
    dead = pg.skiff(
        "topics", "list", "--bootstrap-server", f"127.0.0.1:{free_port()}", "--timeout-ms", "1500"
    )
    assert dead.returncode == 1 and dead.stderr.startswith("skiff topics: cannot reach an agent at")
    assert dead.stderr.count("\n") == 1, dead.stderr  # librdkafka's own lines are quiet


def test_profile_env_and_flag_precedence(pg: Playground) -> None:
    (pg.home / "skiff").mkdir(exist_ok=True)
    (pg.home / "skiff" / "config.toml").write_text(
        f'bootstrap_server = "{pg.bootstrap}"\ntimeout_ms = 3000\n'
    )
    topic = f"prof-{uuid.uuid4().hex[:6]}"
    pg.ok("topics", "create", topic, "--partitions", "1")  # the profile alone names the cluster
    assert topic in {t["topic"] for t in pg.json("topics", "list")}
    dead = f"http://127.0.0.1:{free_port()}"
    r = pg.skiff("topics", "list", env={"SKIFF_METADATA_URL": dead})  # env beats the profile
    assert r.returncode == 1 and dead in r.stderr and "unreachable" in r.stderr, r.stderr
    # and the flag beats the environment
    assert topic in pg.ok("topics", "list", "--metadata", pg.metadata_url, env={"SKIFF_METADATA_URL": dead})
    assert "flag > env > profile > default" in pg.ok("topics", "list", "--help")
    (pg.home / "skiff" / "config.toml").write_text('metadata_ulr = "typo"\n')
    bad = pg.skiff("topics", "list")
    assert bad.returncode == 1 and "unknown key(s) metadata_ulr" in bad.stderr and bad.stderr.count("\n") == 1
    (pg.home / "skiff" / "config.toml").unlink()


def test_reset_to_datetime_is_exact_to_the_record(pg: Playground) -> None:
    topic = f"ts-{uuid.uuid4().hex[:6]}"
    # the records are from 2023: without retention.ms=-1 the playground's retention (7 days by
    # default) deletes them at its next pass, as Kafka would, and every lookup answers the log end
    pg.ok(
        "topics", "create", topic, "--partitions", "1", "--config", "retention.ms=-1",
        "--metadata", pg.metadata_url,
    )  # fmt: skip
    base_ms = 1_700_000_000_000
    p = Producer({"bootstrap.servers": pg.bootstrap, "linger.ms": 500})  # one batch: one chunk
    for i in range(3):
        p.produce(topic, value=b"v", partition=0, timestamp=base_ms + i * 1000)
    assert p.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": pg.bootstrap})
    for i, when in enumerate(("2023-11-14T22:13:20Z", "2023-11-14T22:13:21Z", "2023-11-14T22:13:21.500Z")):
        tp = TopicPartition(topic, 0)
        query_ms = base_ms + {0: 0, 1: 1000, 2: 1500}[i]
        kafka = admin.list_offsets({tp: OffsetSpec.for_timestamp(query_ms)})[tp].result().offset
        plan = pg.json(
            "groups", "reset-offsets", f"g-{topic}", "--topic", topic, "--to-datetime", when,
            "--metadata", pg.metadata_url,
        )  # fmt: skip
        assert [r["new_offset"] for r in plan["offsets"]] == [kafka] == [[0, 1, 2][i]]
