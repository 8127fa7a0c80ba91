"""Transactions benchmark: transactional produce against idempotent produce, in one run.

    python bench/transactions.py [--records 100000] [--record-bytes 100] [--partitions 10]
                                 [--commit-every 100,1000,10000] [--max-txns 300]
                                 [--db sqlite|postgresql://...]
                                 [--trace 5] [--trace-records 100] [--trace-only]
                                 [--compare-env SKIFF_X=1[,SKIFF_Y=2]]... [--compare-nagle-proxy]
                                 [--idempotent-load N,RATE,SECONDS]

One `skiff agent` on a moto S3 bucket, with `skiff metadata` (SQLite file by default, or the
PostgreSQL URL given; a fresh database either way) as its own process behind a counting HTTP
proxy in this process, so every metadata request the agent makes is counted by route. One
confluent-kafka producer per cell, `--records` records of `--record-bytes` bytes, record i to
partition i % `--partitions` (every transaction of 10 or more records touches every partition):

- `idempotent`: enable.idempotence, linger.ms 5, produce everything, flush;
- `txn N` for each N in `--commit-every`: begin_transaction, N records, flush, then
  commit_transaction, timed on its own (so its latency is the EndTxn round trip and the
  markers, not waiting for the records' acks). A cell sends min(--records, N * --max-txns)
  records, so small N does not take the run hours.

Reported per cell: records/s (wall time including commits), and for transactions the p50/p99
of flush and of commit_transaction, and per commit: metadata HTTP requests (all routes; the
busiest ones named), Kafka requests the agent read (from its /metrics, `skiff_requests`) and
object PUTs (`skiff_object_store_requests{kind="put"}`). The background rate of metadata
requests (heartbeats and the transaction coordinator's scans, measured while idle before the
cells) is printed so it can be subtracted; per-commit counts include it. Every route's
per-commit count follows the table. Counters are read after each producer's warm-up (one
record per partition, in a transaction for the transactional cells), not counted.

The proxy answers with TCP_NODELAY: its headers and body are two writes, and with Nagle's
algorithm the body waited for the agent's delayed ACK (up to 40 ms per metadata call, which
this bench used to report as the transactions' cost).

Trace (`--trace N`, after the table; `--trace-only` without it): N transactions of
`--trace-records` records, one at a time, phase by phase: librdkafka's round trips (its
`protocol` debug lines) of AddPartitionsToTxn, of each wave of ProduceRequests (a wave: the
requests sent before the next response; librdkafka sends one per partition and keeps at
most 5 in flight per connection) and of EndTxn; flush() and commit_transaction() as the
application sees them; and on the agent's side its produce files' stages
(`skiff_produce_stage_seconds`) and each metadata route's calls and mean time through the
proxy. `--compare-env` / `--compare-nagle-proxy` trace more agents, each with its own
metadata, database, proxy and bucket, interleaved transaction by transaction so they see
the same load: settings compared in one run (`--compare-env PYTHONPATH=<another checkout>`
runs that checkout's agent).

Idempotent load (`--idempotent-load N,RATE,SECONDS`, after the trace): N idempotent
producers at RATE records/s each, on each agent in turn: acks, PUTs/s, ack p50/p99.
"""

from __future__ import annotations

import argparse
import functools
import http.client
import logging
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.support import pct  # noqa: E402
from tests.support.agents import free_port, skiff_command, wait_for_port  # noqa: E402
from tests.support.s3servers import S3Server, start_moto  # noqa: E402

IDLE_WINDOW_S = 3.0  # how long the background metadata request rate is measured


class CountingProxy:
    """An HTTP/1.1 reverse proxy to `skiff metadata` that counts requests by (method, route).
    One upstream connection per proxy thread; bodies are read whole (metadata answers are
    small JSON documents)."""

    def __init__(self, upstream_port: int, *, nagle: bool = False) -> None:
        self.counts: Counter[str] = Counter()
        self.seconds: dict[str, float] = {}  # time to the upstream answer, summed per route
        self._lock = threading.Lock()
        proxy = self
        local = threading.local()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # TCP_NODELAY: the answer's headers and body are two writes, and with Nagle's
            # algorithm the body waits for the agent's delayed ACK of the headers (~40 ms
            # per metadata call, which the first version of this bench counted as Skiff's)
            disable_nagle_algorithm = not nagle

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _forward(self) -> None:
                route = f"{self.command} {self.path.split('?', 1)[0]}"
                with proxy._lock:
                    proxy.counts[route] += 1
                started_s = time.perf_counter()
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                for attempt in range(2):
                    conn = getattr(local, "conn", None)
                    if conn is None:
                        conn = local.conn = http.client.HTTPConnection(
                            "127.0.0.1", upstream_port, timeout=120
                        )
                    try:
                        conn.request(self.command, self.path, body=body, headers=headers)
                        resp = conn.getresponse()
                        data = resp.read()
                        break
                    except (http.client.HTTPException, OSError):
                        conn.close()
                        local.conn = None
                        if attempt:
                            raise
                with proxy._lock:
                    proxy.seconds[route] = proxy.seconds.get(route, 0.0) + time.perf_counter() - started_s
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.counts)

    def seconds_snapshot(self) -> dict[str, float]:
        with self._lock:
            return dict(self.seconds)


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(
            r'^(skiff_\w+?)(?:_total)?(?:\{(?:role="agent",)?(?:kind|api|stage)="(\w+)"\})? ([0-9.e+]+)$',
            line,
        )
        if m:
            out[m.group(1) + (f":{m.group(2)}" if m.group(2) else "")] = float(m.group(3))
    return out


def take_snapshot(
    metrics_port: int, proxy: CountingProxy, metrics: dict[str, float], md: Counter[str]
) -> None:
    """The agent's metrics and the proxy's counts, into `metrics` and `md`."""
    metrics.update(scrape(metrics_port))
    md.update(proxy.snapshot())


def spawn(args: list[str], port: int, log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [*skiff_command(), "--log-level", "WARNING", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            cwd=str(REPO),
        )
    wait_for_port(port, proc, log)
    return proc


def fresh_db(db: str, work: Path) -> tuple[str, str | None]:
    """The metadata database URL, and the PostgreSQL database to drop afterwards (or None)."""
    if db == "sqlite":
        return f"sqlite:///{work / 'metadata.db'}", None
    import sqlalchemy

    name = f"bench_txn_{uuid.uuid4().hex[:8]}"
    engine = sqlalchemy.create_engine(db, isolation_level="AUTOCOMMIT")
    with engine.connect() as c:
        c.execute(sqlalchemy.text(f"CREATE DATABASE {name}"))
    engine.dispose()
    return db.rsplit("/", 1)[0] + "/" + name, name


def drop_db(admin_url: str, name: str) -> None:
    import sqlalchemy

    engine = sqlalchemy.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as c:
        c.execute(sqlalchemy.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    engine.dispose()


def run_cell(
    bootstrap: str,
    topic: str,
    partitions: int,
    records: int,
    value: bytes,
    commit_every: int | None,
    warmed_up: Callable[[], None],
) -> dict[str, object]:
    """One producer; `commit_every` None: idempotent, else transactional. `warmed_up` is
    called once the unmeasured warm-up is done (to take the counters' first snapshot)."""
    config: dict[str, object] = {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True}
    if commit_every is not None:
        config["transactional.id"] = f"bench-{uuid.uuid4()}"
    p = Producer(config)
    errors = 0

    def ack(err: object, _msg: object) -> None:
        nonlocal errors
        if err is not None:
            errors += 1

    # Warm-up, unmeasured: connections, metadata, the producer id.
    if commit_every is not None:
        p.init_transactions(60)
        p.begin_transaction()
    for i in range(partitions):
        p.produce(topic, value=value, partition=i)
    if commit_every is not None:
        p.commit_transaction(60)
    else:
        p.flush(60)
    warmed_up()
    flush_s: list[float] = []
    commit_s: list[float] = []
    t0 = time.perf_counter()
    if commit_every is None:
        for i in range(records):
            while True:
                try:
                    p.produce(topic, value=value, partition=i % partitions, on_delivery=ack)
                    break
                except BufferError:
                    p.poll(0.05)
        p.flush(120)
    else:
        for start in range(0, records, commit_every):
            p.begin_transaction()
            for i in range(start, min(records, start + commit_every)):
                while True:
                    try:
                        p.produce(topic, value=value, partition=i % partitions, on_delivery=ack)
                        break
                    except BufferError:
                        p.poll(0.05)
            f0 = time.perf_counter()
            p.flush(120)
            c0 = time.perf_counter()
            p.commit_transaction(120)
            c1 = time.perf_counter()
            flush_s.append(c0 - f0)
            commit_s.append(c1 - c0)
    elapsed = time.perf_counter() - t0
    return {"elapsed_s": elapsed, "errors": errors, "flush_s": flush_s, "commit_s": commit_s}


class _Timeline(logging.Handler):
    """librdkafka's debug lines (protocol), kept for `phases`."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


_RECEIVED = re.compile(r"Received (\w+?)Response \(.*?rtt ([0-9.]+)ms\)")


def phases(lines: list[str]) -> dict[str, list[float]]:
    """Round trips (ms, as librdkafka measured them) per API from its protocol debug lines,
    and `Produce waves`: the Produce round trips grouped into waves (a wave starts at the
    first response after a request). Only round trips: the lines reach Python when the
    application polls, so their arrival times are not the requests' times."""
    out: dict[str, list[float]] = {}
    waves: list[float] = []  # the longest round trip of each wave
    in_wave = False
    for msg in lines:
        if "Sent ProduceRequest" in msg:
            in_wave = False
            continue
        m = _RECEIVED.search(msg)
        if m is None:
            continue
        api, rtt_ms = m.group(1), float(m.group(2))
        out.setdefault(api, []).append(rtt_ms)
        if api == "Produce":
            if in_wave:
                waves[-1] = max(waves[-1], rtt_ms)
            else:
                waves.append(rtt_ms)
                in_wave = True
    out["Produce waves"] = waves
    return out


class Stack:
    """One `skiff metadata` (its own database) behind its own counting proxy, and one agent
    on its own bucket: a configuration traced side by side with others in one run."""

    def __init__(
        self, label: str, work: Path, moto: S3Server, db: str, agent_env: dict[str, str], nagle: bool
    ) -> None:
        self.label = label
        self.work = work
        work.mkdir(parents=True, exist_ok=True)
        self.db = db
        self.procs: list[subprocess.Popen[bytes]] = []
        db_url, self.pg_name = fresh_db(db, work)
        md_port = free_port()
        self.procs.append(
            spawn(["metadata", "--db", db_url, "--port", str(md_port)], md_port, work / "metadata.log", {})
        )
        self.proxy = CountingProxy(md_port, nagle=nagle)
        port, self.metrics_port = free_port(), free_port()
        args = ["agent", "--bucket", f"s3://{moto.new_bucket()}", "--metadata", self.proxy.url]
        args += ["--host", "127.0.0.1", "--port", str(port), "--metrics-port", str(self.metrics_port)]
        agent = spawn([*args, "--agent-id", "bench"], port, work / "agent.log", {**moto.env, **agent_env})
        self.procs.append(agent)
        wait_for_port(self.metrics_port, agent, work / "agent.log")
        self.bootstrap = f"127.0.0.1:{port}"

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.terminate()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        self.proxy.server.shutdown()
        if self.pg_name is not None:
            drop_db(self.db, self.pg_name)


class Tracer:
    """One stack's traced transactional producer and what its transactions took."""

    def __init__(self, stack: Stack, topic: str, partitions: int, value: bytes) -> None:
        self.stack, self.topic, self.partitions, self.value = stack, topic, partitions, value
        self.timeline = _Timeline()
        rdk = logging.getLogger(f"bench.librdkafka.{uuid.uuid4().hex[:6]}")
        rdk.propagate = False
        rdk.addHandler(self.timeline)
        rdk.setLevel(logging.DEBUG)
        self.producer = Producer(
            {
                "bootstrap.servers": stack.bootstrap,
                "linger.ms": 5,
                "transactional.id": f"bench-trace-{uuid.uuid4()}",
                "debug": "protocol",
                "logger": rdk,
            }
        )
        self.producer.init_transactions(60)
        self.one(partitions)  # warm-up: connections, metadata, the partitions' leaders
        self.timeline.lines.clear()
        self.m0 = scrape(stack.metrics_port)
        self.c0, self.s0 = stack.proxy.snapshot(), stack.proxy.seconds_snapshot()
        self.rows: list[dict[str, float]] = []

    def one(self, records: int) -> dict[str, float]:
        p = self.producer
        self.timeline.lines.clear()
        t0 = time.perf_counter()
        p.begin_transaction()
        for i in range(records):
            p.produce(self.topic, value=self.value, partition=i % self.partitions)
        p.flush(60)
        t1 = time.perf_counter()
        p.commit_transaction(60)
        t2 = time.perf_counter()
        p.poll(0)  # the EndTxn lines
        ph = phases(self.timeline.lines)
        return {
            "add": sum(ph.get("AddPartitionsToTxn", [])),
            "waves": len(ph["Produce waves"]),
            "wave": max(ph["Produce waves"], default=float("nan")),
            "flush": (t1 - t0) * 1000,
            "commit": (t2 - t1) * 1000,
            "end": sum(ph.get("EndTxn", [])),
            "total": (t2 - t0) * 1000,
        }

    def report(self, txns: int) -> None:
        m1 = scrape(self.stack.metrics_port)
        c1, s1 = self.stack.proxy.snapshot(), self.stack.proxy.seconds_snapshot()

        def delta(name: str) -> float:
            return m1.get(name, 0) - self.m0.get(name, 0)

        def p50(key: str) -> str:
            return f"{pct([r[key] for r in self.rows], 0.5):.0f}"

        files = delta("skiff_produce_files")
        print(
            f"| {self.stack.label} | {p50('add')} | {p50('waves')} x {p50('wave')} | {p50('flush')} |"
            f" {p50('end')} | {p50('commit')} | {p50('total')} / {pct([r['total'] for r in self.rows], 0.9):.0f} |"
            f" {files / txns:.1f} | {delta('skiff_object_store_requests:put') / txns:.1f} |"
        )
        stages = ("open", "queued", "put", "ordered", "commit", "resolve")
        self.agent_side = (
            f"- {self.stack.label}: produce file stages, mean ms per file: "
            + ", ".join(
                f"{st} {1000 * delta(f'skiff_produce_stage_seconds:{st}') / max(files, 1):.1f}"
                for st in stages
            )
            + "; metadata calls per transaction x mean ms (through the proxy): "
            + ", ".join(
                f"{r.rsplit('/', 1)[-1]} {k / txns:.1f} x {1000 * (s1.get(r, 0.0) - self.s0.get(r, 0.0)) / k:.1f}"
                for r, k in (c1 - self.c0).most_common()
            )
        )


def trace(stacks: list[Stack], partitions: int, txns: int, records: int, value: bytes) -> None:
    """`txns` transactions of `records` records on each stack, one at a time, interleaved
    (the order rotating) so the stacks see the same machine load; median phases per stack."""
    topics = []
    for stack in stacks:  # one at a time: an AdminClient must outlive its futures
        topic = f"bench-trace-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": stack.bootstrap})
        for fut in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
            fut.result(30)
        topics.append(topic)
    tracers = [Tracer(st, t, partitions, value) for st, t in zip(stacks, topics, strict=True)]
    for n in range(txns):
        for k in range(len(tracers)):
            tracer = tracers[(n + k) % len(tracers)]
            tracer.rows.append(tracer.one(records))
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    print(
        f"\nTrace: {txns} transactions of {records} records over {partitions} partitions per agent,"
        f" one at a time, agents interleaved; load average after: {load}. Median ms"
        " (round trips as librdkafka measured them; total p50 / p90):\n"
    )
    print(
        "| agent | AddPartitionsToTxn rtt | Produce waves x slowest rtt | flush() |"
        " EndTxn rtt | commit_transaction() | total | produce files/txn | PUTs/txn |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for tracer in tracers:
        tracer.report(txns)
    print("\nAgent side:\n")
    for tracer in tracers:
        print(tracer.agent_side)


def _timed(into: list[float]) -> Callable[[object, object], None]:
    """A delivery callback appending the seconds from now to the delivery to `into`."""
    t0 = time.perf_counter()

    def done(_err: object, _msg: object) -> None:
        into.append(time.perf_counter() - t0)

    return done


def _paced(
    p: Producer,
    topic: str,
    partitions: int,
    value: bytes,
    rate: float,
    seconds: float,
    acks_s: list[float],
    lock: threading.Lock,
) -> None:
    """One producer of `idempotent_load`: `rate` records/s for `seconds`, then flush; each
    record's produce() -> delivery time appended to `acks_s`."""
    mine: list[float] = []
    end_s = time.perf_counter() + seconds
    i = 0
    while time.perf_counter() < end_s:
        p.produce(topic, value=value, partition=i % partitions, on_delivery=_timed(mine))
        i += 1
        p.poll(0)
        time.sleep(1.0 / rate)  # pacing the offered load, not synchronising
    p.flush(60)
    with lock:
        acks_s.extend(mine)


def idempotent_load(stacks: list[Stack], partitions: int, spec: str, value: bytes) -> None:
    """`spec` = "N,RATE,SECONDS": on each stack in turn, N idempotent producers (one thread
    each, linger.ms 5) produce RATE records/s each, record i to partition i % `partitions`,
    for SECONDS; then each stack's acks, PUTs per second and ack latency (produce() to the
    delivery callback). With more than 5 partitions each producer's requests come in waves
    (see `trace`), which is what this measures under many producers."""
    n, rate, seconds = (float(x) for x in spec.split(","))
    print(
        f"\nIdempotent load: {n:.0f} producers x {rate:.0f} records/s over {partitions} partitions, {seconds:.0f} s:\n"
    )
    print("| agent | acks | PUTs/s | ack p50 ms | ack p99 ms |")
    print("|---|---|---|---|---|")
    for stack in stacks:
        topic = f"bench-load-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": stack.bootstrap})
        for fut in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
            fut.result(30)
        config = {"bootstrap.servers": stack.bootstrap, "linger.ms": 5, "enable.idempotence": True}
        producers = [Producer(config) for _ in range(int(n))]
        for p in producers:  # warm-up: connections, metadata, producer ids
            for i in range(partitions):
                p.produce(topic, value=value, partition=i)
            p.flush(30)
        m0 = scrape(stack.metrics_port)
        acks_s: list[float] = []
        lock = threading.Lock()

        threads = [
            threading.Thread(target=_paced, args=(p, topic, partitions, value, rate, seconds, acks_s, lock))
            for p in producers
        ]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        puts = scrape(stack.metrics_port).get("skiff_object_store_requests:put", 0)
        puts -= m0.get("skiff_object_store_requests:put", 0)
        print(
            f"| {stack.label} | {len(acks_s):,} | {puts / elapsed:.1f} | {1000 * pct(acks_s, 0.5):.0f} |"
            f" {1000 * pct(acks_s, 0.99):.0f} |",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--record-bytes", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=10)
    ap.add_argument("--commit-every", default="100,1000,10000")
    ap.add_argument("--max-txns", type=int, default=300)
    ap.add_argument(
        "--trace", type=int, default=5, help="transactions traced phase by phase after the table (0: none)"
    )
    ap.add_argument("--trace-records", type=int, default=100, help="records per traced transaction")
    ap.add_argument("--trace-only", action="store_true", help="no table: only the traced transactions")
    ap.add_argument(
        "--compare-env",
        action="append",
        default=[],
        metavar="NAME=VALUE[,NAME=VALUE]",
        help="trace one more agent (own metadata, bucket) with these SKIFF_* variables; repeatable",
    )
    ap.add_argument(
        "--compare-nagle-proxy",
        action="store_true",
        help="trace one more agent whose metadata proxy keeps Nagle's algorithm (this bench before its fix)",
    )
    ap.add_argument(
        "--idempotent-load",
        metavar="N,RATE,SECONDS",
        help="after the trace: N idempotent producers at RATE records/s each for SECONDS, on every agent",
    )
    ap.add_argument(
        "--db", default="sqlite", help="sqlite, or a PostgreSQL admin URL to create a database on"
    )
    args = ap.parse_args()
    commit_every = [int(x) for x in args.commit_every.split(",") if x]

    work = Path(tempfile.mkdtemp(prefix="skiff-bench-txn-"))
    moto = start_moto(work)
    stacks: list[Stack] = []
    try:
        stack = Stack("defaults", work / "defaults", moto, args.db, {}, nagle=False)
        stacks.append(stack)
        for i, spec in enumerate(args.compare_env):
            env = dict(kv.split("=", 1) for kv in spec.split(","))
            stacks.append(Stack(spec, work / f"compare-{i}", moto, args.db, env, nagle=False))
        if args.compare_nagle_proxy:
            stacks.append(Stack("defaults, proxy with Nagle", work / "nagle", moto, args.db, {}, nagle=True))
        proxy, metrics_port, bootstrap = stack.proxy, stack.metrics_port, stack.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        names = ["idempotent", *(f"txn {n}" for n in commit_every)]
        topics = {name: f"bench-{i}-{uuid.uuid4().hex[:6]}" for i, name in enumerate(names)}
        for fut in admin.create_topics([NewTopic(t, args.partitions, 1) for t in topics.values()]).values():
            fut.result(30)

        before = proxy.snapshot()
        time.sleep(IDLE_WINDOW_S)  # measuring the idle rate, not synchronising
        idle = sum((proxy.snapshot() - before).values()) / IDLE_WINDOW_S

        value = b"x" * args.record_bytes
        load = Path("/proc/loadavg").read_text().split()[:3]
        print(
            f"\n{args.records:,} records of {args.record_bytes} B, {args.partitions} partitions,"
            f" metadata on {'SQLite' if args.db == 'sqlite' else 'PostgreSQL'}, moto S3;"
            f" load average before: {' '.join(load)};"
            f" background metadata requests while idle: {idle:.1f}/s\n"
        )
        cells = [] if args.trace_only else [("idempotent", None), *((f"txn {n}", n) for n in commit_every)]
        if cells:
            print(
                "| producer | records | records/s | vs idempotent | flush p50/p99 ms | commit p50/p99 ms |"
                " metadata req/commit | Kafka req/commit | PUTs/commit | busiest metadata routes per commit |"
            )
            print("|---|---|---|---|---|---|---|---|---|---|")
        base_rate = None
        routes: list[str] = []
        for name, n in cells:
            records = args.records if n is None else min(args.records, n * args.max_txns)
            m0: dict[str, float] = {}
            c0: Counter[str] = Counter()
            snapshot = functools.partial(take_snapshot, metrics_port, proxy, m0, c0)
            r = run_cell(bootstrap, topics[name], args.partitions, records, value, n, snapshot)
            m1, c1 = scrape(metrics_port), proxy.snapshot()
            rate = records / float(r["elapsed_s"])  # type: ignore[arg-type]
            base_rate = base_rate or rate
            md = c1 - c0
            kafka = sum(v - m0.get(k, 0) for k, v in m1.items() if k.startswith("skiff_requests:"))
            puts = m1.get("skiff_object_store_requests:put", 0) - m0.get("skiff_object_store_requests:put", 0)
            if n is None:
                print(
                    f"| {name} | {records:,} | {rate:,.0f} | 1.00 | | | {sum(md.values())} in all |"
                    f" {kafka:,.0f} in all | {puts:,.0f} in all | |",
                    flush=True,
                )
                continue
            commits = len(r["commit_s"])  # type: ignore[arg-type]
            fl = [x * 1000 for x in r["flush_s"]]  # type: ignore[attr-defined]
            cm = [x * 1000 for x in r["commit_s"]]  # type: ignore[attr-defined]
            busiest = ", ".join(f"{route} {k / commits:.1f}" for route, k in md.most_common(3))
            print(
                f"| {name} | {records:,} | {rate:,.0f} | {rate / base_rate:.2f} |"
                f" {pct(fl, 0.5):.0f} / {pct(fl, 0.99):.0f} | {pct(cm, 0.5):.0f} / {pct(cm, 0.99):.0f} |"
                f" {sum(md.values()) / commits:.1f} | {kafka / commits:.1f} | {puts / commits:.1f} | {busiest} |",
                flush=True,
            )
            if r["errors"]:
                print(f"  ({r['errors']} delivery errors)")
            routes.append(
                f"- {name}: " + ", ".join(f"{route} {k / commits:.2f}" for route, k in md.most_common())
            )
        if routes:
            print("\nEvery metadata route per commit (background requests included):\n")
            print("\n".join(routes))
        if args.trace:
            trace(stacks, args.partitions, args.trace, args.trace_records, value)
        if args.idempotent_load:
            idempotent_load(stacks, args.partitions, args.idempotent_load, value)
    finally:
        for st in stacks:
            st.stop()
        moto.process.stop(grace=3)


if __name__ == "__main__":
    main()
