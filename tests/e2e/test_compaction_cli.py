"""`skiff compact` end to end: real processes (`skiff agent` on moto's S3 server, the
compactor as a subprocess), the metadata HTTP service on SQLite (in this process, on a
clock the test can move), confluent-kafka clients.

One scenario, in order (it is the same data throughout, to keep the test fast):

- keyed updates and tombstones to a compacted topic and plain records to a delete-policy
  topic, in several flushes (many agent files), while a consumer reads both throughout;
- `skiff compact --dry-run` prints the plan and changes no chunk row;
- `skiff compact --once` with one input chunk per output file (many swaps) stops at the
  test hook (`SKIFF_COMPACT_PAUSE_AFTER_SWAPS=1`) right after its first swap and is
  SIGKILLed there: every partition still reads back intact (each record the one produced
  at its offset, each key's latest value) and work is demonstrably left (input chunk rows
  still live, the compacted partitions dirty candidates once the dead run's lease has
  expired: the test moves the metadata service's clock past it, no waiting);
- `skiff compact --once --json` again finishes the work: the compacted topic holds
  exactly one record per key (its latest, tombstones kept: they are inside
  `delete.retention.ms`) at original offsets, the delete-policy topic has fewer chunk
  rows and reads back unchanged; the summary's files, bytes, GETs per input file,
  records removed and tombstones dropped match what the test knows independently;
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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from skiff.compactor.keymap import DEFAULT_BUDGET_BYTES, SLOT_BYTES
from skiff.compactor.pause_hook import ENV as PAUSE_ENV
from skiff.compactor.pause_hook import MARKER as PAUSE_MARKER
from skiff.metadata.rows import system_clock
from skiff.metadata.service import MetadataService
from skiff.metadata.types import FetchQuery
from skiff.metadata.wire.http_client import HttpMetadataClient

from tests.component.test_metadata_http import ServerThread
from tests.support.agents import SkiffProcess, agent_args, skiff_command
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


class ShiftedClock:
    """The metadata service's clock: the system's plus a shift the test adds to, so a lease
    expires when the test says (no waiting for it). Shifts stay a few seconds, well inside
    the agents' registration TTL."""

    def __init__(self) -> None:
        self.shift_ms = 0

    def __call__(self) -> int:
        return system_clock() + self.shift_ms


@pytest.fixture
def metadata_server(tmp_path: Path) -> Iterator[tuple[str, MetadataService, ShiftedClock]]:
    """The metadata HTTP service in this process (uvicorn thread, SQLite) on a test clock."""
    clock = ShiftedClock()
    svc = MetadataService.from_url(f"sqlite:///{tmp_path / 'm.db'}", clock=clock)
    try:
        with ServerThread(svc) as url:
            yield url, svc, clock
    finally:
        svc.close()


def _intact(
    got: list[Record], produced: dict[int, tuple[bytes | None, bytes | None]], want: list[Record]
) -> None:
    """A partition read back mid-compaction: offsets strictly increasing, each record the
    one produced at its offset, each key's last record its latest; so the only offsets
    missing are records a later one of the same key shadows."""
    offsets = [o for o, _k, _v in got]
    assert offsets == sorted(set(offsets))
    assert all(produced[o] == (k, v) for o, k, v in got)
    last = {k: (o, v) for o, k, v in got}
    assert sorted((o, k, v) for k, (o, v) in last.items()) == want


def test_skiff_compact_end_to_end(
    metadata_server: tuple[str, MetadataService, ShiftedClock],  # first: torn down after the agent
    spawn_skiff: Callable[..., SkiffProcess],
    moto_s3: S3Bucket,
) -> None:
    metadata_url, svc, clock = metadata_server
    agent = spawn_skiff(
        *agent_args(moto_s3.url("data"), metadata_url),
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
    produced: dict[int, dict[int, tuple[bytes | None, bytes | None]]] = {0: {}, 1: {}}
    events: list[tuple[int, bytes]] = []
    p = Producer({"bootstrap.servers": agent.bootstrap, "linger.ms": 5, "acks": "all"})

    def delivered(err: object, msg: object) -> None:
        assert err is None, err
        if msg.topic() == "table":  # type: ignore[attr-defined]
            latest[(msg.partition(), msg.key())] = (msg.offset(), msg.value())  # type: ignore[attr-defined]
            produced[msg.partition()][msg.offset()] = (msg.key(), msg.value())  # type: ignore[attr-defined]
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
    want: dict[int, list[Record]] = {
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

    # A compactor stopped by the test hook right after its first swap (one input chunk per
    # output file, so the job has many swaps), then SIGKILLed there.
    lease_ms = 2000
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
            str(lease_ms),
            "--merge-min-chunks",
            "2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**_env(moto_s3), PAUSE_ENV: "1"},
    )
    assert killed.stderr is not None
    seen: list[str] = []
    for line in killed.stderr:  # the process blocks after printing the marker
        seen.append(line)
        if PAUSE_MARKER in line:
            break
    assert any(PAUSE_MARKER in line for line in seen), "".join(seen)
    assert f"{PAUSE_MARKER} after 1 swap(s)" in seen[-1]
    for part in (0, 1):  # readable and intact while the job holds its lease mid-way
        _intact(_read_all(agent.bootstrap, "table", part, ends[part]), produced[part], want[part])
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=30)
    killed.stderr.close()
    for part in (0, 1):  # and after it died
        _intact(_read_all(agent.bootstrap, "table", part, ends[part]), produced[part], want[part])
    got_events = _read_all(agent.bootstrap, "events", 0, len(events))
    assert [(o, v) for o, _k, v in got_events] == sorted(events)

    # Work is left: one swap replaced its input chunks, the rest are still live, and once
    # the dead run's lease has expired (the test moves metadata's clock past it) every
    # partition is a candidate again, the compacted ones still dirty.
    rows_after_kill = _chunk_rows(metadata_url, "table", 2) + _chunk_rows(metadata_url, "events", 1)
    rows_before = sum(table_rows_before) + event_rows_before[0]
    # the swap replaced its input chunks (one, or several when the first ones had every
    # record shadowed and so joined the next output's swap) by at most one output chunk
    assert sum(rows_after_kill) <= rows_before
    table_id = svc.describe_topics(["table"])["table"].topic_id
    assert svc.compaction_candidates("table") == []  # leased by the dead run until it expires
    clock.shift_ms += lease_ms + 1
    left = {c.partition: c for c in svc.compaction_candidates("table")}
    assert sorted(left) == [0, 1]
    for part, c in left.items():
        assert c.topic_id == table_id
        assert c.first_dirty_offset < c.cleanable_end_offset == ends[part]
    read_before = {part: _read_all(agent.bootstrap, "table", part, ends[part]) for part in (0, 1)}
    plan = _compact(moto_s3, metadata_url, "--dry-run", "--merge-min-chunks", "2")
    planned_files = {line.split()[1] for line in plan.stdout.splitlines() if line.strip().startswith("file ")}
    assert planned_files
    table_files = {
        loc.object_key
        for info in svc.find_chunks([FetchQuery(table_id, part, 0, 1 << 40) for part in (0, 1)])
        for loc in info.chunks
    }
    assert table_files <= planned_files

    # The next run finishes the work: the compacted topic holds exactly one record per key
    # (its latest; tombstones kept: they are inside delete.retention.ms) at original
    # offsets, the delete-policy topic has fewer chunk rows and reads back unchanged.
    done = _compact(moto_s3, metadata_url, "--once", "--json", "--merge-min-chunks", "2")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    table = {part: _read_all(agent.bootstrap, "table", part, ends[part]) for part in (0, 1)}
    assert table == want
    _check_summary(summary, planned_files, table_files, moto_s3, read_before, want)

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


def _check_summary(
    s: dict[str, Any],
    planned_files: set[str],
    table_files: set[str],
    bucket: S3Bucket,
    read_before: dict[int, list[Record]],
    want: dict[int, list[Record]],
) -> None:
    """The `--json` summary against what the test knows independently: the planned input
    files (dry run) and their sizes in the bucket, the records before and after."""
    assert (s["jobs"], s["jobs_failed"]) == (1, 0)
    assert set(s["gets_per_input_file"]) == planned_files
    assert s["files_in"] == s["input_files_read"] == len(planned_files)
    # two streaming GETs (A and B) per file holding table data, one (B) for the others
    assert s["gets_per_input_file"] == {k: 2 if k in table_files else 1 for k in planned_files}
    assert s["max_gets_per_input_file"] == 2
    sizes = {
        o["Key"].removeprefix("data/"): o["Size"]
        for o in bucket.client().list_objects_v2(Bucket=bucket.name, Prefix="data/").get("Contents", [])
    }
    assert s["bytes_in"] == sum(sizes[k] for k in planned_files)
    # stream A reads each file up to its last table chunk, B up to its last chunk consumed
    assert sum(sizes[k] for k in table_files) < s["bytes_read"]
    assert s["bytes_read"] <= sum(sizes[k] * n for k, n in s["gets_per_input_file"].items())
    assert s["files_out"] >= 2  # compacted and delete-policy data go to different files
    assert 0 < s["bytes_out"] < s["bytes_in"]
    removed = sum(len(read_before[p]) - len(want[p]) for p in (0, 1))
    assert removed > 0 and s["records_removed"] == removed
    assert s["tombstones_dropped"] == 0  # inside delete.retention.ms (a day by default)
    # the key map's use, not its preallocation: at most one entry per key, 20 bytes each
    assert 0 < s["peak_keymap_entries"] <= KEYS
    assert s["peak_keymap_bytes"] == s["peak_keymap_entries"] * SLOT_BYTES
    assert s["keymap_allocated_bytes"] == DEFAULT_BUDGET_BYTES // SLOT_BYTES * SLOT_BYTES
    assert s["elapsed_s"] > 0


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
