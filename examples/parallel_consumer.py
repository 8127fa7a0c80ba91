#!/usr/bin/env python3
"""At-least-once parallel consumption with confluent-kafka: one consumer, N workers.

The pattern many teams run when one partition's records can be processed independently
of each other and one thread per partition is too little parallelism:

    consumer thread --poll--> per-partition bounded buffers --round robin--> worker pool
          ^                                                                      |
          +---- commit (contiguous processed prefix) <---- offset tracker <------+

Threads and what they own
-------------------------
- The **consumer thread** (the main thread) makes every call on the `Consumer`: poll,
  pause/resume, commit, close, and runs the rebalance callbacks (librdkafka serves them
  from inside `consume()`). A confluent-kafka `Consumer` must not be used from several
  threads at once, so nothing else touches it.
- **Workers** (`--workers` threads) take one record at a time and run the pluggable
  processing function on it, then report the completion to the `Dispatcher`, the single
  lock-protected structure the two sides share.

Fair dispatch
-------------
Each assigned partition has a bounded buffer (a deque). Partitions with buffered records
sit in a rotation; a worker takes the partition at the head, pops *one* record from it and
puts the partition back at the tail if it still has records. So records of one hot
partition do not starve the others, and several records of one partition are processed
concurrently, completing out of order.

Offsets: the contiguous low watermark
-------------------------------------
Kafka commits one offset per partition meaning "everything below this is done". With
out-of-order completion, the newest processed offset is NOT safe to commit: an older
record may still be in flight. The `OffsetTracker` of a partition keeps the offsets
received (in order) and the set of those processed; it advances its watermark while the
oldest received offset is processed. The safe offset to commit is the last offset of that
processed prefix + 1 (gaps in the log, e.g. transaction markers, are never received and so
never block it). Every `--commit-interval-ms`, and whenever partitions are given up, the
consumer thread commits, synchronously, the safe offset of every partition whose safe
offset moved since its last successful commit. A failed commit is retried at the next
interval. Records above the watermark are processed again after a crash or a rebalance:
at least once, never "at most once".

Bounded memory: pause and resume
--------------------------------
A partition is paused when its buffer reaches `--max-buffered-records` (the high-water
mark) or when its uncommitted window (records received and not yet below the watermark,
e.g. behind one slow record) reaches `--max-uncommitted-records`; it is resumed once the
buffer has drained to `--resume-buffered-records` (the low-water mark) and the window is
back under its limit. `consume()` is never asked for more records than the fullest
unpaused buffer can take, so a buffer never holds more than `--max-buffered-records`.
librdkafka drops what it had prefetched for a paused partition and, once it is resumed,
fetches again from the last record handed to us at its next fetch round, which can be up
to about a second later: size the low-water mark to what the workers get through in a
second or so, or the workers go idle after every resume. (librdkafka's own prefetch
queue is bounded separately: `queued.max.messages.kbytes`, `queued.min.messages`.)

Rebalances (eager protocol, the default assignors)
-------------------------------------------------
- on_revoke: stop handing out records of the revoked partitions and drop their buffered
  records (they are not committed, the next owner gets them again); wait, up to
  `--revoke-wait-ms`, for their in-flight records to finish; commit the safe offsets;
  forget the partitions. A record still in flight after the wait is simply not committed.
- on_lost (the session expired, someone else may own the partitions already): drop them
  without waiting or committing.
- on_assign: fresh buffers and trackers; the consumer resumes from the committed offsets.

Shutdown (SIGTERM / SIGINT) does what on_revoke does for every partition, then closes
the consumer, which leaves the group.

The command line's processing function appends `P <partition> <offset> <pid>` to a
journal (`--journal`) before the record counts as processed, and the offset manager
appends `C <partition> <offset> <pid>` before each commit is sent (so after every `P`
line that commit covers): the end-to-end test reads that journal to check that no commit
ever passed an unprocessed record. Lines are written with one `os.write` on an
`O_APPEND` descriptor, so several processes can share one journal file.

    python examples/parallel_consumer.py --bootstrap localhost:9092 --topic demo \\
        --group demo-workers --workers 4 --journal /tmp/journal.txt --max-process-ms 5
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

log = logging.getLogger("parallel_consumer")

ProcessFn = Callable[[Message], None]
"""Processes one record; raising means "not processed" (it is retried)."""

CommitHook = Callable[[list[TopicPartition]], None]
"""Called on the consumer thread with the offsets about to be committed, before the commit."""


class OffsetTracker:
    """One partition's received and processed offsets -> the offset that is safe to commit."""

    def __init__(self) -> None:
        self._received: deque[int] = deque()  # received, in order, not yet below the watermark
        self._processed: set[int] = set()  # processed offsets that are still in _received
        self._last_received = -1
        self.safe_offset: int | None = None  # last offset of the processed prefix + 1

    def receive(self, offset: int) -> bool:
        """Record an offset handed out by the consumer; False for a redelivery we already hold."""
        if offset <= self._last_received:
            return False
        self._last_received = offset
        self._received.append(offset)
        return True

    def mark_processed(self, offset: int) -> None:
        self._processed.add(offset)
        while self._received and self._received[0] in self._processed:
            head = self._received.popleft()
            self._processed.discard(head)
            self.safe_offset = head + 1

    @property
    def uncommitted_records(self) -> int:
        """Records received and not yet below the watermark (buffered, in flight or done above it)."""
        return len(self._received)


@dataclass(eq=False)
class PartitionState:
    """One assigned partition. Fields are guarded by the Dispatcher's lock except `paused`
    and `committed_offset`, which only the consumer thread uses."""

    topic: str
    partition: int
    buffer: deque[Message] = field(default_factory=deque)
    tracker: OffsetTracker = field(default_factory=OffsetTracker)
    in_flight_records: int = 0
    in_rotation: bool = False
    retired: bool = False  # revoked, lost or shutting down: hand out nothing more
    paused: bool = False
    committed_offset: int | None = None

    def topic_partition(self, offset: int | None = None) -> TopicPartition:
        if offset is None:
            return TopicPartition(self.topic, self.partition)
        return TopicPartition(self.topic, self.partition, offset)


@dataclass(frozen=True)
class FlowSnapshot:
    state: PartitionState
    buffered_records: int
    uncommitted_records: int


class Dispatcher:
    """The one structure shared by the consumer thread and the workers (one lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._work_available = threading.Condition(self._lock)
        self._retired_idle = threading.Condition(self._lock)
        self._partitions: dict[tuple[str, int], PartitionState] = {}
        self._rotation: deque[PartitionState] = deque()  # partitions that have buffered records
        self._closed = False

    # -- consumer thread -------------------------------------------------------------

    def add_partitions(self, tps: Iterable[TopicPartition]) -> None:
        with self._lock:
            for tp in tps:
                self._partitions[(tp.topic, tp.partition)] = PartitionState(tp.topic, tp.partition)

    def offer(self, msg: Message) -> None:
        """Buffer a polled record (records of partitions we do not own are dropped)."""
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        assert topic is not None and partition is not None and offset is not None
        with self._lock:
            state = self._partitions.get((topic, partition))
            if state is None or not state.tracker.receive(offset):
                return
            state.buffer.append(msg)
            if not state.in_rotation:
                state.in_rotation = True
                self._rotation.append(state)
            self._work_available.notify()  # one wake-up per record: no idle worker left behind

    def retire(self, tps: Iterable[TopicPartition] | None = None) -> list[PartitionState]:
        """Stop handing out records of these partitions (all if None), drop their buffers
        and forget them. Returns their states, for waiting and committing."""
        with self._lock:
            keys = list(self._partitions) if tps is None else [(tp.topic, tp.partition) for tp in tps]
            states = [s for k in keys if (s := self._partitions.pop(k, None)) is not None]
            for state in states:
                state.retired = True
                state.buffer.clear()
            return states

    def wait_idle(self, states: list[PartitionState], timeout_ms: int) -> bool:
        """Wait until no record of these (retired) partitions is in flight."""
        with self._lock:
            return self._retired_idle.wait_for(
                lambda: all(s.in_flight_records == 0 for s in states), timeout_ms / 1000
            )

    def commit_candidates(
        self, states: list[PartitionState] | None = None
    ) -> list[tuple[PartitionState, int]]:
        """(state, safe offset) for every partition whose safe offset moved since its last commit."""
        with self._lock:
            pool = list(self._partitions.values()) if states is None else states
            out = []
            for state in pool:
                safe = state.tracker.safe_offset
                if safe is not None and (state.committed_offset is None or safe > state.committed_offset):
                    out.append((state, safe))
            return out

    def flow_snapshot(self) -> list[FlowSnapshot]:
        with self._lock:
            return [
                FlowSnapshot(s, len(s.buffer), s.tracker.uncommitted_records)
                for s in self._partitions.values()
            ]

    def close(self) -> None:
        """Workers finish their current record and stop."""
        with self._lock:
            self._closed = True
            self._work_available.notify_all()

    # -- workers ---------------------------------------------------------------------

    def take(self) -> tuple[PartitionState, Message] | None:
        """The next record in partition rotation order; None once closed."""
        with self._lock:
            while True:
                while self._rotation:
                    state = self._rotation.popleft()
                    state.in_rotation = False
                    if state.retired or not state.buffer:
                        continue
                    msg = state.buffer.popleft()
                    state.in_flight_records += 1
                    if state.buffer:
                        state.in_rotation = True
                        self._rotation.append(state)
                    return state, msg
                if self._closed:
                    return None
                self._work_available.wait()

    def finish(self, state: PartitionState, offset: int, processed: bool) -> None:
        """A worker is done with a record. Completions of retired partitions still count
        until their final commit (that is what on_revoke waits for)."""
        with self._lock:
            state.in_flight_records -= 1
            if processed:
                state.tracker.mark_processed(offset)
            if state.retired and state.in_flight_records == 0:
                self._retired_idle.notify_all()


@dataclass(frozen=True)
class Settings:
    workers: int = 4
    max_buffered_records: int = 5000  # high-water mark: pause a partition at this many
    resume_buffered_records: int = 2500  # low-water mark: resume it at or below this many
    max_uncommitted_records: int = 20_000  # received but not yet below the watermark
    max_poll_records: int = 500
    poll_timeout_ms: int = 100
    commit_interval_ms: int = 1000
    revoke_wait_ms: int = 10_000
    retry_backoff_ms: int = 500

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError("workers must be at least 1")
        if not 0 <= self.resume_buffered_records < self.max_buffered_records:
            raise ValueError("need 0 <= resume_buffered_records < max_buffered_records")
        if self.max_uncommitted_records < self.max_buffered_records:
            raise ValueError("max_uncommitted_records must be at least max_buffered_records")


class ParallelConsumer:
    def __init__(
        self,
        consumer_config: dict[str, Any],
        topics: list[str],
        process: ProcessFn,
        settings: Settings | None = None,
        before_commit: CommitHook | None = None,
    ) -> None:
        config = {**consumer_config, "enable.auto.commit": False}
        self._consumer = Consumer(config)
        self._topics = topics
        self._process = process
        self._settings = settings or Settings()
        self._before_commit = before_commit
        self._dispatcher = Dispatcher()
        self._stopping = threading.Event()
        self._workers: list[threading.Thread] = []

    # -- consumer thread -------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Consume until `stop` is set, then shut down cleanly."""
        s = self._settings
        for i in range(s.workers):
            t = threading.Thread(target=self._work, name=f"worker-{i}", daemon=True)
            t.start()
            self._workers.append(t)
        self._consumer.subscribe(
            self._topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )
        next_commit = time.monotonic() + s.commit_interval_ms / 1000
        try:
            while not stop.is_set():
                for msg in self._consumer.consume(self._poll_size(), s.poll_timeout_ms / 1000):
                    err = msg.error()
                    if err is None:
                        self._dispatcher.offer(msg)
                    elif err.fatal():
                        raise KafkaException(err)
                    elif err.code() != KafkaError._PARTITION_EOF:
                        log.warning("consumer error: %s", err)
                self._flow_control()
                if time.monotonic() >= next_commit:
                    self._commit(None)
                    next_commit = time.monotonic() + s.commit_interval_ms / 1000
        finally:
            self._shutdown()

    def _poll_size(self) -> int:
        """As many records as the fullest unpaused buffer (and window) can still take."""
        s = self._settings
        room = s.max_poll_records
        for snap in self._dispatcher.flow_snapshot():
            if not snap.state.paused:
                room = min(
                    room,
                    s.max_buffered_records - snap.buffered_records,
                    s.max_uncommitted_records - snap.uncommitted_records,
                )
        return max(room, 1)

    def _flow_control(self) -> None:
        s = self._settings
        to_pause, to_resume = [], []
        for snap in self._dispatcher.flow_snapshot():
            state = snap.state
            full = (
                snap.buffered_records >= s.max_buffered_records
                or snap.uncommitted_records >= s.max_uncommitted_records
            )
            drained = (
                snap.buffered_records <= s.resume_buffered_records
                and snap.uncommitted_records < s.max_uncommitted_records
            )
            if not state.paused and full:
                state.paused = True
                to_pause.append(state.topic_partition())
            elif state.paused and drained:
                state.paused = False
                to_resume.append(state.topic_partition())
        if to_pause:
            self._consumer.pause(to_pause)
            log.debug("paused %s", [tp.partition for tp in to_pause])
        if to_resume:
            self._consumer.resume(to_resume)
            log.debug("resumed %s", [tp.partition for tp in to_resume])

    def _commit(self, states: list[PartitionState] | None) -> None:
        """Commit the safe offset of these partitions (all owned ones if None), if it moved."""
        candidates = self._dispatcher.commit_candidates(states)
        if not candidates:
            return
        offsets = [state.topic_partition(offset) for state, offset in candidates]
        if self._before_commit is not None:
            self._before_commit(offsets)
        try:
            results = self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as e:
            log.warning("commit of %s failed (retried later): %s", _describe(offsets), e.args[0])
            return
        failed = {(tp.topic, tp.partition): tp.error for tp in results or [] if tp.error is not None}
        for state, offset in candidates:
            error = failed.get((state.topic, state.partition))
            if error is None:
                state.committed_offset = offset
            else:
                log.warning("commit of partition %d failed: %s", state.partition, error)
        log.debug("committed %s", _describe(offsets))

    def _give_up(self, tps: list[TopicPartition] | None, reason: str) -> None:
        """Stop, drop buffers, wait for in-flight records (bounded), commit, forget."""
        states = self._dispatcher.retire(tps)
        if not states:
            return
        if not self._dispatcher.wait_idle(states, self._settings.revoke_wait_ms):
            log.warning("%s: records still in flight after %d ms", reason, self._settings.revoke_wait_ms)
        self._commit(states)
        log.info("%s: gave up partitions %s", reason, sorted(s.partition for s in states))

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._dispatcher.add_partitions(partitions)
        consumer.assign(partitions)
        consumer.resume(partitions)  # a pause from a previous assignment must not linger
        log.info("assigned partitions %s", sorted(tp.partition for tp in partitions))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._give_up(partitions, "revoked")

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        states = self._dispatcher.retire(partitions)
        log.warning("lost partitions %s (not committed)", sorted(s.partition for s in states))

    def _shutdown(self) -> None:
        self._stopping.set()
        try:
            self._give_up(None, "shutdown")
            self._consumer.close()  # leaves the group (on_revoke then finds nothing left)
        finally:
            self._dispatcher.close()
            for t in self._workers:
                t.join(timeout=self._settings.revoke_wait_ms / 1000)

    # -- workers ---------------------------------------------------------------------

    def _work(self) -> None:
        while (item := self._dispatcher.take()) is not None:
            state, msg = item
            offset = msg.offset()
            assert offset is not None
            self._dispatcher.finish(state, offset, self._process_with_retry(state, msg))

    def _process_with_retry(self, state: PartitionState, msg: Message) -> bool:
        """True once processed; False if given up because the partition went away."""
        while True:
            try:
                self._process(msg)
                return True
            except Exception:
                log.exception("processing partition %d offset %s failed", state.partition, msg.offset())
            if state.retired or self._stopping.wait(self._settings.retry_backoff_ms / 1000):
                return False


def _describe(offsets: list[TopicPartition]) -> str:
    return ", ".join(f"{tp.partition}@{tp.offset}" for tp in offsets)


class Journal:
    """Appends `P`/`C` lines to a file shared by several processes (one write per line)."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._pid = os.getpid()

    def _append(self, line: str) -> None:
        data = line.encode()
        assert len(data) < 512, "one O_APPEND write per line keeps lines whole"
        os.write(self._fd, data)

    def processed(self, partition: int, offset: int) -> None:
        self._append(f"P {partition} {offset} {self._pid}\n")

    def committing(self, offsets: list[TopicPartition]) -> None:
        for tp in offsets:
            self._append(f"C {tp.partition} {tp.offset} {self._pid}\n")

    def close(self) -> None:
        os.close(self._fd)


def journal_processor(journal: Journal, max_process_ms: float) -> ProcessFn:
    """The default processing: sleep a random 0..max_process_ms (so that completions come
    out of order), then journal the record."""

    def process(msg: Message) -> None:
        if max_process_ms > 0:
            time.sleep(random.uniform(0, max_process_ms) / 1000)
        partition, offset = msg.partition(), msg.offset()
        assert partition is not None and offset is not None
        journal.processed(partition, offset)

    return process


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    d = Settings()
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    p.add_argument("--bootstrap", required=True, help="HOST:PORT of a broker")
    p.add_argument("--topic", required=True, action="append", help="topic to consume (repeatable)")
    p.add_argument("--group", required=True, help="consumer group id")
    p.add_argument("--journal", required=True, help="file to append P/C lines to (shared across processes)")
    p.add_argument("--workers", type=int, default=d.workers)
    p.add_argument("--max-process-ms", type=float, default=0.0, help="random processing delay, 0..this")
    p.add_argument("--max-buffered-records", type=int, default=d.max_buffered_records)
    p.add_argument("--resume-buffered-records", type=int, default=d.resume_buffered_records)
    p.add_argument("--max-uncommitted-records", type=int, default=d.max_uncommitted_records)
    p.add_argument("--max-poll-records", type=int, default=d.max_poll_records)
    p.add_argument("--commit-interval-ms", type=int, default=d.commit_interval_ms)
    p.add_argument("--revoke-wait-ms", type=int, default=d.revoke_wait_ms)
    p.add_argument("--session-timeout-ms", type=int, default=10_000)
    p.add_argument("--heartbeat-interval-ms", type=int, default=1_000)
    p.add_argument("--auto-offset-reset", default="earliest", choices=["earliest", "latest"])
    p.add_argument(
        "-X", dest="extra", action="append", default=[], metavar="KEY=VALUE", help="any librdkafka setting"
    )
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format=f"%(asctime)s {os.getpid()} %(threadName)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    settings = Settings(
        workers=args.workers,
        max_buffered_records=args.max_buffered_records,
        resume_buffered_records=args.resume_buffered_records,
        max_uncommitted_records=args.max_uncommitted_records,
        max_poll_records=args.max_poll_records,
        commit_interval_ms=args.commit_interval_ms,
        revoke_wait_ms=args.revoke_wait_ms,
    )
    config: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "auto.offset.reset": args.auto_offset_reset,
        "session.timeout.ms": args.session_timeout_ms,
        "heartbeat.interval.ms": args.heartbeat_interval_ms,
    }
    for item in args.extra:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"-X expects KEY=VALUE, got {item!r}")
        config[key] = value

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    journal = Journal(args.journal)
    consumer = ParallelConsumer(
        config,
        args.topic,
        journal_processor(journal, args.max_process_ms),
        settings,
        before_commit=journal.committing,
    )
    try:
        consumer.run(stop)
    finally:
        journal.close()
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
