"""`skiff compact` end to end: real processes (`skiff metadata` on SQLite, `skiff agent` on
moto's S3 server), confluent-kafka clients, and the compactor run as a subprocess.

One scenario, in order (it is the same data throughout, to keep the test fast):

- keyed updates and tombstones to a compacted topic and plain records to a delete-policy
  topic, in several flushes (many agent files), while a consumer reads both throughout;
- `skiff compact --dry-run` prints the plan and changes no chunk row;
- `skiff compact --once` with one input chunk per output file (many swaps) is SIGKILLed
  right after its first swap: every partition still reads back each key's latest value
  in offset order;
- `skiff compact --once` again (its lease expired) finishes the work: the compacted
  topic holds exactly one record per key (its latest, tombstones kept: they are inside
  `delete.retention.ms`) at original offsets, the delete-policy topic has fewer chunk
  rows and reads back unchanged, the summary counts two GETs per input file at most;
- the consumer that read throughout saw no error.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from metadata.http_client import HttpMetadataClient
from metadata.types import FetchQuery
from tests.support.agents import SkiffProcess, skiff_command
from tests.support.s3servers import S3Bucket

pytestmark = [pytest.mark.s3]

ROUNDS = 6
PER_ROUND = 60
KEYS = 20
Record = tuple[int, bytes | None, bytes | None]  # offset, key, value


def _chunk_rows(metadata_url: str, topic: str, partitions: int) -> list[int]:
    async def go() -> list[int]:
        md = HttpMetadataClient(metadata_url)
        try:
            t = (await md.describe_topics([topic]))[topic]
            infos = await md.find_chunks([FetchQuery(t.topic_id, p, 0, 1 << 40) for p in range(partitions)])
            return [len(i.chunks) for i in infos]
        finally:
            await md.close()

    return asyncio.run(go())


def _read_all(bootstrap: str, topic: str, partition: int, end: int) -> list[Record]:
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4()}", "enable.auto.commit": False}
    )
    out: list[Record] = []
    try:
        c.assign([TopicPartition(topic, partition, 0)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                if out and out[-1][0] >= end - 1:
                    break
                continue
            assert m.error() is None, m.error()
            out.append((m.offset(), m.key(), m.value()))
            if m.offset() >= end - 1:
                break
    finally:
        c.close()
    return out


def _compact(bucket: S3Bucket, metadata_url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*skiff_command(), "compact", "--bucket", bucket.url("data"), "--metadata", metadata_url, *extra],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(bucket),
    )


def _env(bucket: S3Bucket) -> dict[str, str]:
    import os

    return {**os.environ, **bucket.env, "PYTHONUNBUFFERED": "1"}


class ThroughoutConsumer(threading.Thread):
    """A consumer reading both topics from the start until told to stop; records errors."""

    def __init__(self, bootstrap: str, topics: list[str]) -> None:
        super().__init__(daemon=True)
        self.c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"t-{uuid.uuid4()}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 100,
            }
        )
        self.c.subscribe(topics)
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.count = 0

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                m = self.c.poll(0.2)
                if m is None:
                    continue
                if m.error() is not None:
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        self.errors.append(str(m.error()))
                    continue
                self.count += 1
        finally:
            self.c.close()


def test_skiff_compact_end_to_end(
    spawn_skiff: Callable[..., SkiffProcess], moto_s3: S3Bucket, tmp_path: Path
) -> None:
    md_proc = spawn_skiff("metadata", "--db", f"sqlite:///{tmp_path / 'm.db'}", "--port", "{port}")
    metadata_url = f"http://127.0.0.1:{md_proc.port}"
    agent = spawn_skiff(
        "agent",
        "--bucket",
        moto_s3.url("data"),
        "--metadata",
        metadata_url,
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
        env={
            **moto_s3.env,
            "SKIFF_FLUSH_INTERVAL_MS": "20",
            # readers re-ask metadata at once, so they see the swapped chunks without waiting
            "SKIFF_CHUNK_CACHE_TTL_MS": "1",
        },
    )
    admin = AdminClient({"bootstrap.servers": agent.bootstrap})
    for fut in admin.create_topics(
        [NewTopic("table", 2, 1, config={"cleanup.policy": "compact"}), NewTopic("events", 1, 1)]
    ).values():
        fut.result(timeout=30)

    reader = ThroughoutConsumer(agent.bootstrap, ["table", "events"])
    reader.start()
    rng = random.Random(9)
    latest: dict[tuple[int, bytes], tuple[int, bytes | None]] = {}
    events: list[tuple[int, bytes]] = []
    p = Producer({"bootstrap.servers": agent.bootstrap, "linger.ms": 5, "acks": "all"})

    def delivered(err: object, msg: object) -> None:
        assert err is None, err
        if msg.topic() == "table":  # type: ignore[attr-defined]
            latest[(msg.partition(), msg.key())] = (msg.offset(), msg.value())  # type: ignore[attr-defined]
        else:
            events.append((msg.offset(), msg.value()))  # type: ignore[attr-defined]

    for r in range(ROUNDS):  # each round its own flushes: many agent files
        for i in range(PER_ROUND):
            key = b"k%d" % rng.randrange(KEYS)
            value = None if rng.random() < 0.15 else b"v%d-%d" % (r, i) + b"x" * 200
            p.produce("table", value, key=key, partition=i % 2, on_delivery=delivered)
            p.produce("events", b"e%d-%d" % (r, i), on_delivery=delivered)
        assert p.flush(30) == 0
    ends = {part: _chunk_hw(metadata_url, part) for part in (0, 1)}
    want = {
        part: sorted((off, key, value) for (pp, key), (off, value) in latest.items() if pp == part)
        for part in (0, 1)
    }
    table_rows_before = _chunk_rows(metadata_url, "table", 2)
    event_rows_before = _chunk_rows(metadata_url, "events", 1)
    assert min(table_rows_before) >= 3 and event_rows_before[0] >= 3

    # --dry-run: the plan, and nothing changes
    dry = _compact(moto_s3, metadata_url, "--dry-run", "--merge-min-chunks", "2")
    assert dry.returncode == 0, dry.stderr
    assert "clean table-0" in dry.stdout and "clean table-1" in dry.stdout
    assert "merge events-0" in dry.stdout
    assert _chunk_rows(metadata_url, "table", 2) == table_rows_before
    assert _chunk_rows(metadata_url, "events", 1) == event_rows_before

    # a compactor SIGKILLed right after its first swap (one input chunk per output file)
    killed = subprocess.Popen(
        [
            *skiff_command(),
            "compact",
            "--bucket",
            moto_s3.url("data"),
            "--metadata",
            metadata_url,
            "--once",
            "--roll-bytes",
            "1",
            "--lease-ms",
            "1000",
            "--merge-min-chunks",
            "2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(moto_s3),
    )
    assert killed.stderr is not None
    seen: list[str] = []
    for line in killed.stderr:
        seen.append(line)
        if "swapped" in line:
            killed.send_signal(signal.SIGKILL)
            break
    killed.wait(timeout=30)
    assert any("swapped" in line for line in seen), "".join(seen)
    for part in (0, 1):  # readable, each key's latest value last, offsets in order
        got = _read_all(agent.bootstrap, "table", part, ends[part])
        offsets = [o for o, _k, _v in got]
        assert offsets == sorted(set(offsets))
        last = {k: (o, v) for o, k, v in got}
        assert sorted((o, k, v) for k, (o, v) in last.items()) == want[part]

    # the next run finishes the work (once the killed run's lease has expired)
    deadline = time.monotonic() + 60
    summaries = []
    while True:
        done = _compact(moto_s3, metadata_url, "--once", "--json", "--merge-min-chunks", "2")
        assert done.returncode == 0, done.stderr
        summaries.append(json.loads(done.stdout.strip().splitlines()[-1]))
        table = {part: _read_all(agent.bootstrap, "table", part, ends[part]) for part in (0, 1)}
        if table == want or time.monotonic() > deadline:
            break
    assert table == want  # exactly one record per key, its latest, at its original offset
    assert any(s["jobs"] > 0 for s in summaries)
    assert all(s["max_gets_per_input_file"] <= 2 for s in summaries)
    assert all(s["jobs_failed"] == 0 for s in summaries)
    assert sum(s["records_removed"] for s in summaries) > 0

    assert _chunk_rows(metadata_url, "events", 1)[0] < event_rows_before[0]
    got_events = _read_all(agent.bootstrap, "events", 0, len(events))
    assert [(o, v) for o, _k, v in got_events] == sorted(events)

    # nothing left: another run has no job
    again = _compact(moto_s3, metadata_url, "--once", "--json", "--merge-min-chunks", "2")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout.strip().splitlines()[-1])["jobs"] == 0

    reader.stop.set()
    reader.join(timeout=30)
    assert reader.errors == []
    assert reader.count > 0


def _chunk_hw(metadata_url: str, partition: int) -> int:
    async def go() -> int:
        md = HttpMetadataClient(metadata_url)
        try:
            t = (await md.describe_topics(["table"]))["table"]
            (info,) = await md.find_chunks([FetchQuery(t.topic_id, partition, 0, 1)])
            return info.high_watermark
        finally:
            await md.close()

    return asyncio.run(go())


def test_playground_compacts_on_its_timer(spawn_skiff: Callable[..., SkiffProcess], tmp_path: Path) -> None:
    """The playground's own maintenance loop (SQLite, file:// bucket) compacts a topic."""
    from tests.support.agents import wait_for_port
    from tests.support.s3servers import free_port

    mport = free_port()
    pg = spawn_skiff(
        "playground",
        "--data-dir",
        str(tmp_path / "data"),
        "--port",
        "{port}",
        "--metadata-port",
        str(mport),
        "--compaction-interval-ms",
        "200",
    )
    wait_for_port(mport, pg.proc, pg.log)
    admin = AdminClient({"bootstrap.servers": pg.bootstrap})
    admin.create_topics([NewTopic("kv", 1, 1, config={"cleanup.policy": "compact"})])["kv"].result(timeout=30)
    p = Producer({"bootstrap.servers": pg.bootstrap, "linger.ms": 5})
    latest: dict[bytes, int] = {}

    def delivered(err: object, msg: object) -> None:
        assert err is None, err
        latest[msg.key()] = msg.offset()  # type: ignore[attr-defined]

    for r in range(4):
        for i in range(50):
            p.produce("kv", b"v%d" % r, key=b"k%d" % (i % 10), on_delivery=delivered)
        assert p.flush(30) == 0
    end = 1 + max(latest.values())
    want = sorted((o, k, b"v3") for k, o in latest.items())
    deadline = time.monotonic() + 60
    while True:  # the timer runs every 200 ms; wait for a pass that compacted the topic
        got = _read_all(pg.bootstrap, "kv", 0, end)
        if got == want or time.monotonic() > deadline:
            break
    assert got == want
