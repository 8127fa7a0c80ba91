"""Agents with the compaction role (`skiff agent --roles kafka,compaction`) end to end: two
agent processes over one metadata service (SQLite, in this process) and a moto bucket,
confluent-kafka clients producing through both.

1. A compacted topic (`delete.retention.ms=0`) is produced to while `min.compaction.lag.ms`
   keeps everything uncleanable; then the lag is set to 0 and both agents' maintenance
   loops race for the work. Both run with the test hook `SKIFF_COMPACT_PAUSE_AFTER_SWAPS=0`:
   an agent stops right after claiming its first job, holding the lease. The test waits
   until either both agents hold a job or the other one finished two more passes while the
   first held its job; the jobs held at once must cover disjoint partitions (without the
   leases both would have taken the same job).
2. SIGUSR1 resumes both; the topic becomes exactly one record per key (each key's latest,
   tombstones kept: the first clean that keeps one only sets its delete horizon).
3. A second round of updates (no tombstones) is cleaned by whichever agent gets there:
   past `delete.retention.ms`, the tombstones go, and the topic holds exactly one record
   per live key.
4. The agents' logs name every claim and finished job with its holder and its output
   files: no job failed (two compactors running one job would have the second one's swap
   refused), and the output files per holder in metadata are the ones each holder's job
   lines logged.

Passes that find nothing to do log at DEBUG only (compactor.runner), so the other agent's
passes are counted from metadata's record of the last successful compaction pass
(`record_success("compaction")`, made at the end of every pass without a failed job): while
the first agent holds its job paused, only the other one moves it.
"""

from __future__ import annotations

import random
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from skiff.compactor.pause_hook import ENV as PAUSE_ENV
from skiff.compactor.pause_hook import MARKER as PAUSE_MARKER
from skiff.metadata.schema import files
from skiff.metadata.service import MetadataService
from sqlalchemy import select

from tests.e2e.test_compaction_cli import Record, ShiftedClock, _read_all
from tests.e2e.test_compaction_cli import metadata_server as metadata_server  # the fixture
from tests.support.agents import SkiffProcess, agent_args
from tests.support.s3servers import S3Bucket

pytestmark = [pytest.mark.s3]

PARTITIONS = 4
KEYS = 30
HOLDERS = ("agent-ca", "agent-cb")
CLAIM = re.compile(r"compaction: holder (\S+) claimed job (\w+): (\S+);")
DONE = re.compile(r"compaction: holder (\S+) job (\w+) done: .*; outputs: (\S+)")
PASS = re.compile(r"maintenance pass of holder (\S+): (\d+) job\(s\), (\d+) failed")


def _log(p: SkiffProcess) -> str:
    return p.log.read_text(errors="replace")


def _wait_for(
    what: str,
    agents: list[SkiffProcess],
    ready: Callable[[], bool],
    timeout_s: float = 60,
    fail: bool = True,
) -> None:
    """Wait for something the agents write to their logs (or the topic's state); at the
    deadline fail with the logs, or (fail=False) return for the caller's own assertion."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        for a in agents:
            assert a.alive(), f"agent died:\n{_log(a)[-4000:]}"
        if time.monotonic() > deadline:
            if not fail:
                return
            logs = "\n---\n".join(
                "\n".join(line for line in _log(a).splitlines() if "httpx" not in line)[-3000:]
                for a in agents
            )
            pytest.fail(f"timed out waiting for {what}:\n{logs}")
        time.sleep(0.05)


def _table(bootstrap: str, topic: str, ends: dict[int, int]) -> dict[int, list[Record]]:
    return {p: _read_all(bootstrap, topic, p, ends[p]) if ends[p] else [] for p in range(PARTITIONS)}


def test_two_agents_with_the_compaction_role(
    metadata_server: tuple[str, MetadataService, ShiftedClock],  # first: torn down after the agents
    spawn_skiff: Callable[..., SkiffProcess],
    moto_s3: S3Bucket,
    tmp_path: Path,
) -> None:
    metadata_url, svc, _clock = metadata_server
    agents = [
        spawn_skiff(
            *agent_args(moto_s3.url("data"), metadata_url),
            "--agent-id",
            holder.removeprefix("agent-"),
            "--roles",
            "kafka,compaction",
            "--compaction-interval-ms",
            "100",
            env={
                **moto_s3.env,
                "SKIFF_FLUSH_INTERVAL_MS": "20",
                "SKIFF_CHUNK_CACHE_TTL_MS": "1",
                PAUSE_ENV: "0",
            },
        )
        for holder in HOLDERS
    ]
    admin = AdminClient({"bootstrap.servers": agents[0].bootstrap})
    config = {
        "cleanup.policy": "compact",
        "delete.retention.ms": "0",
        "min.cleanable.dirty.ratio": "0.1",
        "min.compaction.lag.ms": str(24 * 3600 * 1000),  # nothing is cleanable yet
    }
    _wait_for("both agents in the cluster", agents, lambda: len(admin.list_topics(timeout=10).brokers) == 2)
    # partition leaders come from a rendezvous hash of the (random) topic id: take the first
    # topic whose partitions are led by both agents, so that both write agent files
    for n in range(20):
        topic = f"kv{n}"
        admin.create_topics([NewTopic(topic, PARTITIONS, 1, config=config)])[topic].result(timeout=30)
        parts = admin.list_topics(topic, timeout=30).topics[topic].partitions.values()
        if len({p.leader for p in parts}) == 2:
            break
    else:
        pytest.fail("no topic had partitions led by both agents")

    rng = random.Random(7)
    latest: dict[tuple[int, bytes], tuple[int, bytes | None]] = {}
    producers = [Producer({"bootstrap.servers": a.bootstrap, "linger.ms": 5, "acks": "all"}) for a in agents]

    def delivered(err: object, msg: object) -> None:
        assert err is None, err
        k = (msg.partition(), msg.key())  # type: ignore[attr-defined]
        # two producers: callbacks do not come in offset order across them
        if k not in latest or latest[k][0] < msg.offset():  # type: ignore[attr-defined]
            latest[k] = (msg.offset(), msg.value())  # type: ignore[attr-defined]

    def produce_round(r: int, tombstone_rate: float) -> dict[int, int]:
        for i in range(120):
            key = b"k%d" % rng.randrange(KEYS)
            value = None if rng.random() < tombstone_rate else b"v%d-%d" % (r, i) + b"x" * 100
            producers[i % 2].produce(
                topic, value, key=key, partition=rng.randrange(PARTITIONS), on_delivery=delivered
            )
            if i % 30 == 29:  # several flushes: many agent files
                for p in producers:
                    assert p.flush(30) == 0
        return {
            p: 1 + max((o for (pp, _k), (o, _v) in latest.items() if pp == p), default=-1)
            for p in range(PARTITIONS)
        }

    def expected(keep_tombstones: bool) -> dict[int, list[Record]]:
        return {
            p: sorted(
                (o, k, v)
                for (pp, k), (o, v) in latest.items()
                if pp == p and (v is not None or keep_tombstones)
            )
            for p in range(PARTITIONS)
        }

    ends = produce_round(0, tombstone_rate=0.2)
    writers = {r.writer for r in _files(svc)}
    assert {"ca", "cb"} <= writers, writers  # agent files from both agents

    # 1. the race: both loops see the work at once; each stops after claiming a job
    _alter_lag(admin, topic)
    _wait_for("an agent to claim a job", agents, lambda: any(PAUSE_MARKER in _log(a) for a in agents))
    first = next(i for i, a in enumerate(agents) if PAUSE_MARKER in _log(a))
    other = agents[1 - first]
    passes: set[int] = {svc.last_successes().get("compaction", 0)}

    def other_holds_a_job_or_passed_twice() -> bool:
        passes.add(svc.last_successes().get("compaction", 0))  # only the other one records now
        return PAUSE_MARKER in _log(other) or len(passes) >= 3

    _wait_for(
        "the other agent to hold a job too or to finish two passes", agents, other_holds_a_job_or_passed_twice
    )
    claims = [(h, job, set(parts.split(","))) for a in agents for h, job, parts in CLAIM.findall(_log(a))]
    held = {h: parts for h, _job, parts in claims}
    assert len(claims) == len(held), claims  # one job per agent so far: each is paused in it
    assert HOLDERS[first] in held
    if len(held) == 2:  # both hold a job at once: the leases kept their partitions apart
        assert not held[HOLDERS[0]] & held[HOLDERS[1]], held
    # else: the other ran two passes meanwhile and claimed nothing (one claim in all)
    assert not any(DONE.search(_log(a)) for a in agents)  # paused before reading anything

    # 2. resumed: one record per key, tombstones kept (their horizon was only just set)
    for a in agents:
        a.proc.send_signal(signal.SIGUSR1)
    want = expected(keep_tombstones=True)
    last: list[dict[int, list[Record]]] = []

    def converged() -> bool:
        last[:] = [_table(agents[0].bootstrap, topic, ends)]
        return last[0] == want

    _wait_for("one record per key", agents, converged, timeout_s=90, fail=False)
    assert last[0] == want, _diff(last[0], want)

    # 3. more updates, no tombstones: the next cleans drop the tombstones (past the horizon)
    ends = produce_round(1, tombstone_rate=0.0)
    want = expected(keep_tombstones=False)
    assert any(v is None for (_p, _k), (_o, v) in latest.items())  # some keys end deleted
    _wait_for(
        "one record per live key",
        agents,
        lambda: _table(agents[0].bootstrap, topic, ends) == want,
        timeout_s=90,
    )
    for p in producers:
        p.flush(30)

    # 4. the logs: no failed job (a second compactor on the same job would have its swap
    # refused); the output files per holder in metadata are the ones its jobs logged
    swaps = [
        (h, job, key) for a in agents for h, job, keys in DONE.findall(_log(a)) for key in keys.split(",")
    ]
    assert swaps and all(not key.startswith("+") for _h, _j, key in swaps), swaps  # every output named
    assert not any(re.search(r"compaction: holder \S+ job \w+ failed", _log(a)) for a in agents)
    assert all(int(failed) == 0 for a in agents for _h, _n, failed in PASS.findall(_log(a)))
    per_holder = {h: sorted(k for hh, _j, k in swaps if hh == h and k != "-") for h in HOLDERS}
    outputs = {h: sorted(r.object_key for r in _files(svc) if r.level > 0 and r.writer == h) for h in HOLDERS}
    assert per_holder == outputs
    assert per_holder[HOLDERS[first]], "the first claimant did its job"
    print("swaps per holder:", {h: len(k) for h, k in per_holder.items()})


def _alter_lag(admin: AdminClient, topic: str) -> None:
    entry = ConfigEntry("min.compaction.lag.ms", "0", incremental_operation=AlterConfigOpType.SET)
    fut = admin.incremental_alter_configs(
        [ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])]
    )
    for f in fut.values():
        f.result(timeout=30)


def _files(svc: MetadataService) -> list:
    with svc.engine.connect() as conn:
        return list(conn.execute(select(files.c.object_key, files.c.writer, files.c.level)).all())


def _diff(got: dict[int, list[Record]], want: dict[int, list[Record]]) -> str:
    out = []
    for p in sorted(want):
        g = {o: (k, v is None) for o, k, v in got.get(p, [])}
        w = {o: (k, v is None) for o, k, v in want[p]}
        extra = sorted((o, g[o]) for o in set(g) - set(w))
        missing = sorted((o, w[o]) for o in set(w) - set(g))
        if extra or missing:
            out.append(f"kv-{p}: extra (offset, (key, tombstone)) {extra}; missing {missing}")
    return "\n".join(out) or "same offsets and keys, values differ"
