"""SIGTERM drain time of an agent under load: signal -> process exit, signal -> last ack.

    python bench/shutdown_drain.py [--runs 5] [--rate 500] [--fetch-wait-ms 500]
                                   [--flush-interval-ms 250] [--message-timeout-ms 5000]

Each run starts a fresh `skiff playground` (SQLite metadata, file bucket; the agent and the
metadata API in one process) with SKIFF_METRICS_PORT set, creates a 4-partition topic
`load` and a 1-partition topic `idle`, then runs two real clients (confluent-kafka):

- a producer thread: `--rate` records/s of 200 B round-robin over `load`'s partitions,
  acks=all, linger.ms=5, paced in 10 ms ticks; its delivery reports are served by
  `poll(<= 5 ms)` between ticks and timed on arrival (so an ack is timed within ~5 ms);
- an idle consumer: `idle` partition 0 assigned, `fetch.wait.max.ms=--fetch-wait-ms`, so
  it always has a long-poll fetch parked in the agent's purgatory.

When the producer has had `--rate` acks (about a second of load) and /metrics shows a
parked fetch (`skiff_purgatory_delayed` >= 1), SIGTERM is sent. With `--no-metrics-port`
the playground serves no /metrics (the agent's `close()` stops that HTTP server with
`http.server`'s `shutdown()`, which waits for its `serve_forever` poll: 0.5 s before
the agent set it to 50 ms) and the
signal goes after the consumer's third 100 ms poll instead. `--random-phase` pauses a random
0..fetch-wait before the signal, so it lands at a random phase of the consumer's fetch (and
of the metrics server's poll), as a SIGTERM from Kubernetes would; without it the bench
signals right after a fetch is seen parked (and after a /metrics request), near the worst
case for both. Measured from the signal:
the process's exit (Popen.wait), the agent's "stopped cleanly" log line (its
timestamp, ms; the rest of the exit is the playground stopping its metadata API and the
interpreter's exit) and the last successful delivery report. The producer goes
on producing until the process has exited, then flushes; records the agent never read
fail after `--message-timeout-ms` with a client-side error (no agent to retry on here).

Checked per run (a failed check is printed as FAIL and makes the exit status 1):
- the agent exited 0 and logged "stopped cleanly";
- no delivery report carries an error the agent answered (a broker error code): every
  produce the agent read was acked. Client-side failures (_MSG_TIMED_OUT, _TRANSPORT: never
  read by the agent) are counted and reported, not failed;
- durability: the playground restarted on the same data directory holds every acked
  (partition, offset) (each below its partition's high watermark), and the log holds as
  many records as were acked (no record committed without its ack being sent).

Expected: exit within about the consumer's fetch wait (its parked fetch is answered at its
max.wait.ms, uniform over the window since the signal's phase is random) plus one flush of
the produce buffer to the file bucket and a commit.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.support.agents import free_port, skiff_command, wait_for_port  # noqa: E402

PARTITIONS = 4
VALUE = b"v" * 200
TICK_S = 0.010
QUIET = logging.getLogger("bench.shutdown_drain.librdkafka")
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


@dataclass
class Playground:
    proc: subprocess.Popen[bytes]
    port: int
    http_port: int
    log: Path

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def metric(self, sample: str) -> float:
        """One sample of /metrics, e.g. `skiff_purgatory_delayed{purgatory="fetch"}` (0 if absent)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/metrics", timeout=10) as r:
            text = r.read().decode()
        m = re.search(rf"^{re.escape(sample)} (\S+)$", text, re.M)
        return float(m.group(1)) if m else 0.0


def start_playground(data: Path, log: Path, flush_interval_ms: int, metrics: bool = True) -> Playground:
    port, mport, hport = free_port(), free_port(), free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "SKIFF_FLUSH_INTERVAL_MS": str(flush_interval_ms)}
    if metrics:
        env["SKIFF_METRICS_PORT"] = str(hport)
    args = ["playground", "--data-dir", str(data), "--port", str(port), "--metadata-port", str(mport)]
    args += ["--compaction-interval-ms", "0"]
    with log.open("ab") as out:
        proc = subprocess.Popen([*skiff_command(), *args], stdout=out, stderr=subprocess.STDOUT, env=env)
    wait_for_port(port, proc, log)
    if metrics:
        wait_for_port(hport, proc, log)
    return Playground(proc, port, hport, log)


@dataclass
class Deliveries:
    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: list[tuple[float, int, int]] = field(default_factory=list)  # (monotonic s, partition, offset)
    errors: list[KafkaError] = field(default_factory=list)
    warm: threading.Event = field(default_factory=threading.Event)
    warm_count: int = 0

    def on_delivery(self, err: KafkaError | None, msg: object) -> None:
        now = time.monotonic()
        with self.lock:
            if err is None:
                self.acked.append((now, msg.partition(), msg.offset()))  # type: ignore[attr-defined]
                if len(self.acked) >= self.warm_count:
                    self.warm.set()
            else:
                self.errors.append(err)


class SteadyProducer(threading.Thread):
    def __init__(self, bootstrap: str, rate: int, message_timeout_ms: int) -> None:
        super().__init__(daemon=True)
        self.rate = rate
        self.deliveries = Deliveries(warm_count=rate)
        self.stop = threading.Event()
        self.sent = 0
        self.unflushed = -1
        self.conf = {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": message_timeout_ms,
            # the agent going away is expected: librdkafka's log of each refused reconnect
            # goes to a silenced logger; failures are counted from the delivery reports
            "logger": QUIET,
            "error_cb": lambda _err: None,
        }

    def run(self) -> None:
        p = Producer(self.conf)
        per_tick = max(1, round(self.rate * TICK_S))
        next_tick = time.monotonic()
        while not self.stop.is_set():
            now = time.monotonic()
            if now >= next_tick:
                for _ in range(per_tick):
                    p.produce(
                        "load",
                        VALUE,
                        partition=self.sent % PARTITIONS,
                        on_delivery=self.deliveries.on_delivery,
                    )
                    self.sent += 1
                next_tick += TICK_S
            p.poll(max(0.0, min(next_tick - time.monotonic(), 0.005)))
        self.unflushed = p.flush(60)


class IdleConsumer(threading.Thread):
    def __init__(self, bootstrap: str, fetch_wait_ms: int) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.polling = threading.Event()  # set after 3 polls of 100 ms: its fetches are going
        self.conf = {
            "bootstrap.servers": bootstrap,
            "group.id": "drain-idle",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": fetch_wait_ms,
            "logger": QUIET,
            "error_cb": lambda _err: None,
        }

    def run(self) -> None:
        c = Consumer(self.conf)
        c.assign([TopicPartition("idle", 0, 0)])
        polls = 0
        while not self.stop.is_set():
            c.poll(0.1)
            polls += 1
            if polls >= 3:
                self.polling.set()
        c.close()


def wait_until(what: str, cond: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.01)


def logged_at(log: Path, text: str) -> float:
    """Epoch seconds of the first log line containing `text` (the CLI's asctime, ms)."""
    for line in log.read_text().splitlines():
        if text in line:
            stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
            return stamp.timestamp()
    return float("nan")


def log_check(pg: Playground, acked: list[tuple[float, int, int]]) -> tuple[int, list[str]]:
    """Records in the restarted log, and the failed durability checks."""
    c = Consumer({"bootstrap.servers": pg.bootstrap, "group.id": "drain-check"})
    try:
        high = {
            p: c.get_watermark_offsets(TopicPartition("load", p), timeout=30)[1] for p in range(PARTITIONS)
        }
    finally:
        c.close()
    fails = []
    lost = [(p, o) for _, p, o in acked if o >= high[p]]
    if lost:
        fails.append(f"{len(lost)} acked records beyond the high watermark, e.g. {lost[:3]}")
    in_log = sum(high.values())
    if in_log != len(acked):
        fails.append(f"log holds {in_log} records, {len(acked)} were acked")
    return in_log, fails


def one_run(root: Path, args: argparse.Namespace) -> dict:
    data, log = root / "data", root / "playground.log"
    pg = start_playground(data, log, args.flush_interval_ms, metrics=not args.no_metrics_port)
    quiet: dict[str, Any] = {"logger": QUIET, "error_cb": lambda _err: None}
    admin = AdminClient({"bootstrap.servers": pg.bootstrap, **quiet})
    for f in admin.create_topics([NewTopic("load", PARTITIONS, 1), NewTopic("idle", 1, 1)]).values():
        f.result(timeout=30)
    producer = SteadyProducer(pg.bootstrap, args.rate, args.message_timeout_ms)
    consumer = IdleConsumer(pg.bootstrap, args.fetch_wait_ms)
    consumer.start()
    producer.start()
    try:
        if not producer.deliveries.warm.wait(60):
            raise TimeoutError("producer warm-up")
        if args.no_metrics_port:
            if not consumer.polling.wait(60):
                raise TimeoutError("consumer polling")
        else:
            wait_until("a parked fetch", lambda: pg.metric('skiff_purgatory_delayed{purgatory="fetch"}') >= 1)
        if args.random_phase:
            time.sleep(random.uniform(0, args.fetch_wait_ms / 1000))
        t_signal, wall_signal = time.monotonic(), time.time()
        pg.proc.send_signal(signal.SIGTERM)
        code = pg.proc.wait(timeout=120)
        t_exit = time.monotonic()
    finally:
        producer.stop.set()
        consumer.stop.set()
        if pg.proc.poll() is None:
            pg.proc.kill()
            pg.proc.wait()
    producer.join(120)
    consumer.join(60)
    d = producer.deliveries
    fails = []
    if code != 0:
        fails.append(f"exit code {code}")
    if "stopped cleanly" not in log.read_text():
        fails.append("no 'stopped cleanly' in the log")
    broker_errors = [e for e in d.errors if e.code() >= 0]  # negative codes: librdkafka's local errors
    if broker_errors:
        fails.append(f"{len(broker_errors)} produces answered with an error, e.g. {broker_errors[:3]}")
    if producer.unflushed != 0:
        fails.append(f"{producer.unflushed} records left unflushed")
    stopped_s = logged_at(log, "stopped cleanly") - wall_signal
    local = sorted({e.name() for e in d.errors if e.code() < 0})
    acked_after = [t for t, _, _ in d.acked if t >= t_signal]
    last_ack = max(t for t, _, _ in d.acked)
    again = start_playground(data, log, args.flush_interval_ms)
    try:
        in_log, log_fails = log_check(again, d.acked)
    finally:
        again.proc.send_signal(signal.SIGTERM)
        again.proc.wait(timeout=120)
    fails += log_fails
    return {
        "exit_s": t_exit - t_signal,
        "stopped_s": stopped_s,
        "last_ack_s": last_ack - t_signal,
        "sent": producer.sent,
        "acked": len(d.acked),
        "acked_after_signal": len(acked_after),
        "unacked": len(d.errors),
        "unacked_kinds": local,
        "in_log": in_log,
        "fails": fails,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rate", type=int, default=500, help="records/s produced")
    ap.add_argument("--fetch-wait-ms", type=int, default=500, help="the idle consumer's fetch.wait.max.ms")
    ap.add_argument("--flush-interval-ms", type=int, default=250, help="SKIFF_FLUSH_INTERVAL_MS")
    ap.add_argument("--message-timeout-ms", type=int, default=5000)
    ap.add_argument(
        "--no-metrics-port",
        action="store_true",
        help="no SKIFF_METRICS_PORT (its HTTP server's shutdown takes up to 0.5 s); "
        "SIGTERM after the consumer's 3rd poll instead of on a parked fetch",
    )
    ap.add_argument(
        "--random-phase",
        action="store_true",
        help="pause a random 0..fetch-wait before the signal (a random phase against the "
        "consumer's fetch and the metrics server's poll)",
    )
    args = ap.parse_args()
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average {loadavg()}; "
        f"rate {args.rate}/s, fetch.wait.max.ms {args.fetch_wait_ms}, flush_interval_ms {args.flush_interval_ms}, "
        f"metrics port {'off' if args.no_metrics_port else 'on'}, random phase {'on' if args.random_phase else 'off'}"
    )
    print(
        f"{'run':>3} {'exit s':>7} {'stopped s':>9} {'last ack s':>10} {'sent':>6} {'acked':>6} {'acked after':>11} "
        f"{'unacked':>7} {'in log':>6}  checks"
    )
    results = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            r = one_run(Path(tmp), args)
        results.append(r)
        checks = "; ".join(r["fails"]) or "ok"
        kinds = f" ({', '.join(r['unacked_kinds'])})" if r["unacked_kinds"] else ""
        print(
            f"{i + 1:>3} {r['exit_s']:>7.3f} {r['stopped_s']:>9.3f} {r['last_ack_s']:>10.3f} {r['sent']:>6} {r['acked']:>6} "
            f"{r['acked_after_signal']:>11} {r['unacked']:>7} {r['in_log']:>6}  {checks}{kinds}"
        )
    exits = [r["exit_s"] for r in results]
    acks = [r["last_ack_s"] for r in results]
    stops = [r["stopped_s"] for r in results]
    print(
        f"signal -> exit: median {statistics.median(exits):.3f} s, max {max(exits):.3f} s; "
        f"signal -> 'stopped cleanly' logged: median {statistics.median(stops):.3f} s, max {max(stops):.3f} s; "
        f"signal -> last ack: median {statistics.median(acks):.3f} s, max {max(acks):.3f} s; "
        f"load average {loadavg()}"
    )
    failed = sum(1 for r in results if r["fails"])
    print(f"runs with a failed check: {failed} of {len(results)}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
