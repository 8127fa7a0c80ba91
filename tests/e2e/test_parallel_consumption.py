"""At-least-once parallel consumption end to end: `examples/parallel_consumer.py` processes
against `skiff playground`, one of them SIGKILLed mid-stream.

Four processes of the example (each a consumer thread and a worker pool completing
records out of order) share one consumer group and one journal file: `P part off pid`
when a record has been processed, `C part off pid` just before a commit is sent. After
the run the journal must show:

(a) every record processed at least once (redeliveries are allowed, and expected for the
    partitions of the killed member and around rebalances);
(b) no commit ever passed an unprocessed record: for every `C part off` line, every
    offset below `off` of that partition has a `P` line earlier in the journal;
(c) the group's committed offsets are the end offsets once everything is processed;
(d) a restarted group resumes from the commits: it processes the records produced since
    and nothing below the committed offsets.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.agents import REPO

pytestmark = pytest.mark.slow

EXAMPLE = REPO / "examples" / "parallel_consumer.py"
PARTITIONS = 8
RECORDS = 100_000
MORE_RECORDS = 1_000
KILL_AFTER_PROCESSED = 20_000

# (kind, partition, offset, pid), in journal order
JournalLine = tuple[str, int, int, int]


def produce(bootstrap: str, topic: str, count: int, first: int = 0) -> None:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 200,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 2 * count + 1000,
        }
    )
    for i in range(first, first + count):
        p.produce(topic, value=b"v%d" % i, partition=i % PARTITIONS)
        if i % 10_000 == 0:
            p.poll(0)
    left = p.flush(60)
    assert left == 0, f"{left} records not acknowledged within 60 s"


def end_offsets(bootstrap: str, topic: str) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"watermarks-{uuid.uuid4().hex[:6]}"})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)]
    finally:
        c.close()


def committed_offsets(reader: Consumer, topic: str) -> list[int]:
    """The group's committed offsets (-1001 where none), read without joining the group."""
    tps = reader.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    return [tp.offset for tp in sorted(tps, key=lambda tp: tp.partition)]


class Journal:
    """Reads the shared journal incrementally while the processes append to it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.touch()
        self.lines: list[JournalLine] = []
        self.processed: list[set[int]] = [set() for _ in range(PARTITIONS)]
        self._read_bytes = 0

    def refresh(self) -> None:
        with self.path.open("rb") as f:
            f.seek(self._read_bytes)
            data = f.read()
        complete = data[: data.rfind(b"\n") + 1]
        self._read_bytes += len(complete)
        for raw in complete.decode().splitlines():
            kind, part, off, pid = raw.split()
            assert kind in ("P", "C"), f"bad journal line {raw!r}"
            line = (kind, int(part), int(off), int(pid))
            self.lines.append(line)
            if kind == "P":
                self.processed[line[1]].add(line[2])

    def p_lines(self) -> int:
        return sum(1 for line in self.lines if line[0] == "P")

    def missing(self, ranges: list[range]) -> dict[int, int]:
        """partition -> how many offsets in its range have no P line yet (only non-zero ones)."""
        out = {}
        for part, r in enumerate(ranges):
            n = sum(1 for off in r if off not in self.processed[part])
            if n:
                out[part] = n
        return out


@dataclass
class Members:
    """The example's processes, with one log file each; all killed at teardown."""

    bootstrap: str
    topic: str
    group: str
    logs: Path
    procs: list[tuple[subprocess.Popen[bytes], Path]] = field(default_factory=list)

    def start(self, journal: Path, commit_interval_ms: int = 200) -> subprocess.Popen[bytes]:
        log = self.logs / f"member-{len(self.procs)}.log"
        argv = [
            sys.executable,
            str(EXAMPLE),
            "--bootstrap",
            self.bootstrap,
            "--topic",
            self.topic,
            "--group",
            self.group,
            "--journal",
            str(journal),
            "--workers",
            "4",
            "--max-process-ms",
            "4",
            "--max-buffered-records",
            "2000",
            "--resume-buffered-records",
            "1000",
            "--commit-interval-ms",
            str(commit_interval_ms),
            "--session-timeout-ms",
            "6000",
            "--heartbeat-interval-ms",
            "500",
            "-X",
            "max.poll.interval.ms=30000",
            "-X",
            "fetch.wait.max.ms=100",
        ]
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=str(REPO))
        self.procs.append((proc, log))
        return proc

    def log_of(self, proc: subprocess.Popen[bytes]) -> str:
        path = next(log for p, log in self.procs if p is proc)
        return f"--- {path.name} (pid {proc.pid}, exit {proc.poll()}):\n{path.read_text()[-4000:]}"

    def all_logs(self) -> str:
        return "\n".join(self.log_of(p) for p, _ in self.procs)

    def check_alive(self, procs: list[subprocess.Popen[bytes]]) -> None:
        dead = [p for p in procs if p.poll() is not None]
        assert not dead, "example process died:\n" + "\n".join(self.log_of(p) for p in dead)

    def terminate(self, procs: list[subprocess.Popen[bytes]], timeout_s: float = 60) -> None:
        """SIGTERM (clean shutdown: commit, leave the group) and expect exit code 0."""
        for p in procs:
            p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for p in procs:
            try:
                p.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                pytest.fail(f"no clean exit within {timeout_s} s of SIGTERM:\n{self.log_of(p)}")
            assert p.returncode == 0, f"exit code {p.returncode} after SIGTERM:\n{self.log_of(p)}"

    def kill_all(self) -> None:
        for p, _ in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def wait_until(what: str, done: Callable[[], bool], timeout_s: float, progress: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}: {progress()}")
        time.sleep(0.25)


def commit_violations(lines: list[JournalLine]) -> list[str]:
    """Check (b): every C line is preceded by a P line for every lower offset of its partition."""
    first_p: list[dict[int, int]] = [{} for _ in range(PARTITIONS)]
    commits: list[list[tuple[int, int, int]]] = [[] for _ in range(PARTITIONS)]
    for index, (kind, part, off, pid) in enumerate(lines):
        if kind == "P":
            first_p[part].setdefault(off, index)
        else:
            commits[part].append((off, index, pid))
    problems = []
    for part in range(PARTITIONS):
        if not commits[part]:
            continue
        top = max(off for off, _, _ in commits[part])
        # latest_first_p[o] = the latest "first P line" among offsets below o (-1 if o == 0)
        latest_first_p = [-1] * (top + 1)
        for o in range(top):
            latest_first_p[o + 1] = max(latest_first_p[o], first_p[part].get(o, len(lines)))
        for off, index, pid in commits[part]:
            if latest_first_p[off] > index:
                unprocessed = next(o for o in range(off) if first_p[part].get(o, len(lines)) > index)
                problems.append(
                    f"journal line {index}: pid {pid} committed partition {part} at {off} "
                    f"before offset {unprocessed} had been processed"
                )
    return problems


def commits_behind_newest_processed(lines: list[JournalLine]) -> int:
    """C lines written while their process had already processed a record at or above the
    committed offset: the commits where a wrong watermark (the newest processed offset
    instead of the contiguous prefix) would have passed an unprocessed record. If there
    are none, check (b) proves little."""
    newest: dict[tuple[int, int], int] = {}
    count = 0
    for kind, part, off, pid in lines:
        if kind == "P":
            newest[(pid, part)] = max(newest.get((pid, part), -1), off)
        elif newest.get((pid, part), -1) >= off:
            count += 1
    return count


def out_of_order_completions(lines: list[JournalLine]) -> int:
    """P lines of one process and partition that come after a P line of a higher offset."""
    highest: dict[tuple[int, int], int] = {}
    count = 0
    for kind, part, off, pid in lines:
        if kind == "P":
            key = (pid, part)
            if off < highest.get(key, -1):
                count += 1
            highest[key] = max(highest.get(key, -1), off)
    return count


@pytest.mark.timeout(600)
def test_parallel_consumers_survive_kill_and_commit_only_processed(playground: str, tmp_path: Path) -> None:
    started = time.monotonic()
    topic, group = f"parallel-{uuid.uuid4().hex[:8]}", f"workers-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": playground})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)
    produce(playground, topic, RECORDS)
    ends = end_offsets(playground, topic)
    assert ends == [RECORDS // PARTITIONS] * PARTITIONS, ends
    print(f"produced {RECORDS} records in {time.monotonic() - started:.1f} s")

    journal = Journal(tmp_path / "journal.txt")
    members = Members(playground, topic, group, tmp_path)
    reader = Consumer({"bootstrap.servers": playground, "group.id": group})
    try:
        # Phase 1: four members; SIGKILL one mid-stream; a fifth joins.
        first = [members.start(journal.path) for _ in range(4)]
        all_offsets = [range(end) for end in ends]

        def progress() -> str:
            journal.refresh()
            return f"{journal.p_lines()} P lines, missing per partition {journal.missing(all_offsets)}"

        def processed_enough() -> bool:
            members.check_alive(first)
            journal.refresh()
            return journal.p_lines() > KILL_AFTER_PROCESSED

        wait_until(f"{KILL_AFTER_PROCESSED} P lines", processed_enough, 90, progress)
        by_pid = {pid: 0 for pid in (p.pid for p in first)}
        for kind, _, _, pid in journal.lines:
            if kind == "P":
                by_pid[pid] += 1
        victim = next(p for p in first if p.pid == max(by_pid, key=lambda pid: by_pid[pid]))
        victim.kill()
        victim.wait()
        killed_at = journal.p_lines()
        time.sleep(1)
        survivors = [p for p in first if p is not victim] + [members.start(journal.path)]
        print(f"killed pid {victim.pid} at {killed_at} P lines (P lines per pid: {by_pid})")

        def all_processed() -> bool:
            members.check_alive(survivors)
            journal.refresh()
            return not journal.missing(all_offsets)

        wait_until("every record to be processed", all_processed, 150, progress)

        # Every record has a P line, possibly from the killed member only: wait for the new
        # owners to process those again and commit everything.
        def all_committed() -> bool:
            members.check_alive(survivors)
            return committed_offsets(reader, topic) == ends

        wait_until(
            "the committed offsets to reach the end offsets",
            all_committed,
            120,
            lambda: f"committed {committed_offsets(reader, topic)}, end {ends}",
        )
        members.terminate(survivors)
        journal.refresh()
        phase1_lines = list(journal.lines)

        # (a) every record processed at least once
        assert not journal.missing(all_offsets)
        beyond = {p: [o for o in journal.processed[p] if o >= ends[p]] for p in range(PARTITIONS)}
        assert not any(beyond.values()), f"P lines past the end offsets: {beyond}"
        # (b) no commit passed an unprocessed record (needs out-of-order completions to mean much)
        problems = commit_violations(phase1_lines)
        assert not problems, "\n".join(problems[:20])
        behind = commits_behind_newest_processed(phase1_lines)
        assert behind > 0, "no commit trailed the newest processed record: (b) would catch no wrong watermark"
        assert any(kind == "C" for kind, *_ in phase1_lines)
        # (c) the group's commits are the end offsets, after the clean shutdown too
        final_commits = committed_offsets(reader, topic)
        assert final_commits == ends, f"committed {final_commits}, end offsets {ends}"

        p_count = sum(1 for line in phase1_lines if line[0] == "P")
        print(
            f"phase 1: {p_count} P lines for {RECORDS} records ({p_count - RECORDS} redeliveries), "
            f"{len(phase1_lines) - p_count} C lines ({behind} behind the newest processed record), "
            f"{out_of_order_completions(phase1_lines)} P lines out of order, "
            f"{time.monotonic() - started:.1f} s"
        )

        # Phase 2 (d): more records and the group restarted with one member, which must
        # resume from the commits. Its periodic commits are turned off (a minute apart), so
        # the commit of the new records is the one made on SIGTERM.
        produce(playground, topic, MORE_RECORDS, first=RECORDS)
        new_ends = end_offsets(playground, topic)
        assert sum(new_ends) == RECORDS + MORE_RECORDS, new_ends
        new_offsets = [range(old, new) for old, new in zip(ends, new_ends, strict=True)]
        journal2 = Journal(tmp_path / "journal2.txt")
        restarted = members.start(journal2.path, commit_interval_ms=60_000)

        def all_new_processed() -> bool:
            members.check_alive([restarted])
            journal2.refresh()
            return not journal2.missing(new_offsets)

        wait_until(
            "the restarted group to process the new records",
            all_new_processed,
            90,
            lambda: f"missing {journal2.missing(new_offsets)}",
        )
        members.terminate([restarted])
        journal2.refresh()
        for part in range(PARTITIONS):
            assert journal2.processed[part] == set(new_offsets[part]), (
                f"partition {part}: the restarted group processed offsets "
                f"{sorted(journal2.processed[part] - set(new_offsets[part]))[:20]} outside "
                f"{new_offsets[part]} (committed before the restart: {final_commits[part]})"
            )
        restart_commits = committed_offsets(reader, topic)
        assert restart_commits == new_ends, (
            f"after SIGTERM the group committed {restart_commits}, end offsets {new_ends}"
        )
        problems = commit_violations(phase1_lines + journal2.lines)
        assert not problems, "\n".join(problems[:20])
        print(f"done in {time.monotonic() - started:.1f} s")
    except BaseException:
        print(f"logs of the example's processes:\n{members.all_logs()}", file=sys.stderr)
        raise
    finally:
        reader.close()
        members.kill_all()
