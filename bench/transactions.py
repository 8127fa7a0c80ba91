"""Transactions benchmark: transactional produce against idempotent produce, in one run.

    python bench/transactions.py [--records 100000] [--record-bytes 100] [--partitions 10]
                                 [--commit-every 100,1000,10000] [--max-txns 300]
                                 [--db sqlite|postgresql://...]

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
"""

from __future__ import annotations

import argparse
import functools
import http.client
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

from tests.support.agents import free_port, skiff_command, wait_for_port  # noqa: E402
from tests.support.s3servers import start_moto  # noqa: E402

IDLE_WINDOW_S = 3.0  # how long the background metadata request rate is measured


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class CountingProxy:
    """An HTTP/1.1 reverse proxy to `skiff metadata` that counts requests by (method, route).
    One upstream connection per proxy thread; bodies are read whole (metadata answers are
    small JSON documents)."""

    def __init__(self, upstream_port: int) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        proxy = self
        local = threading.local()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _forward(self) -> None:
                with proxy._lock:
                    proxy.counts[f"{self.command} {self.path.split('?', 1)[0]}"] += 1
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


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r'^(skiff_\w+?)(?:_total)?(?:\{(?:kind|api)="(\w+)"\})? ([0-9.e+]+)$', line)
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--record-bytes", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=10)
    ap.add_argument("--commit-every", default="100,1000,10000")
    ap.add_argument("--max-txns", type=int, default=300)
    ap.add_argument(
        "--db", default="sqlite", help="sqlite, or a PostgreSQL admin URL to create a database on"
    )
    args = ap.parse_args()
    commit_every = [int(x) for x in args.commit_every.split(",") if x]

    work = Path(tempfile.mkdtemp(prefix="skiff-bench-txn-"))
    moto = start_moto(work)
    db_url, pg_name = fresh_db(args.db, work)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        md_port = free_port()
        procs.append(
            spawn(["metadata", "--db", db_url, "--port", str(md_port)], md_port, work / "metadata.log", {})
        )
        proxy = CountingProxy(md_port)
        port, metrics_port = free_port(), free_port()
        agent_args = ["agent", "--bucket", f"s3://{moto.new_bucket()}", "--metadata", proxy.url]
        agent_args += ["--host", "127.0.0.1", "--port", str(port), "--metrics-port", str(metrics_port)]
        agent = spawn([*agent_args, "--agent-id", "bench"], port, work / "agent.log", moto.env)
        procs.append(agent)
        wait_for_port(metrics_port, agent, work / "agent.log")
        bootstrap = f"127.0.0.1:{port}"
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
        print(
            "| producer | records | records/s | vs idempotent | flush p50/p99 ms | commit p50/p99 ms |"
            " metadata req/commit | Kafka req/commit | PUTs/commit | busiest metadata routes per commit |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|")
        base_rate = None
        routes: list[str] = []
        for name, n in [("idempotent", None), *((f"txn {n}", n) for n in commit_every)]:
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
        print("\nEvery metadata route per commit (background requests included):\n")
        print("\n".join(routes))
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        moto.process.stop(grace=3)
        if pg_name is not None:
            drop_db(args.db, pg_name)


if __name__ == "__main__":
    main()
