"""Produce/consume benchmark: one `skiff agent` process, librdkafka clients, three stores.

    python bench/produce_consume.py [--stores file,moto,seaweedfs] [--mib 256] [--partitions 100]
                                    [--layouts sticky,keyed]

For each store (file://, moto's S3 server, SeaweedFS), in one run:
1. raw ceiling: this process PUTs the same number of bytes as 8 MiB objects, 4 at a time
   (the agent's default flush size and in-flight flushes), straight to the store;
2. produce at full speed: 1 KiB records over 100 partitions, acks=all, no compression,
   in each produce layout asked for (`--layouts`): `sticky`, librdkafka's default for
   unkeyed records (one partition fills a whole ~1 MiB batch before the next, so an 8 MiB
   file holds a handful of partitions), and `keyed`, every record with its own key
   (librdkafka hashes keys over all partitions: the common production pattern, every
   flushed file holds all 100 partitions, each a small chunk);
   MiB/s, ack latency p50/p99 (librdkafka's own per-message latency), PUTs and bytes per
   PUT from the agent's metrics, and the CPU the S3 server process used;
3. produce at a fixed 16 MiB/s (below the 32 MiB/s line): ack latency p50/p99 and PUTs/s;
4. consume everything from a freshly restarted agent (cold cache: every byte comes from
   the store), one consumer of all partitions: MiB/s and ranged GETs per GiB, for each
   layout (each layout is its own topic; only the first one's produce is timed in 2);
5. end-to-end latency: a tailing consumer and a producer at 1,000 records/s (linger 20 ms);
   each value carries its send time.
Prints one markdown table per store, for docs/benchmarks.md.

    python bench/produce_consume.py --sweep [--stores moto] [--rates 10,100,1000,10000]
        [--partition-counts 1,100] [--seconds 8] [--agent-env SKIFF_X=Y,...]

Latency sweep instead: for each rate and partition count, a librdkafka producer with its
defaults (acks=all, linger.ms 5, no idempotence) sends 100-byte records at a steady rate,
round robin over the partitions (record i to partition i % N: one small request per
partition, the worst case for request counts); p50/p99/max ack latency (librdkafka's own
per-message latency, produce() to delivery report). The bound printed beside each row is
the flush interval plus two PUTs (the p99 of 64 KiB PUTs this process makes to the same
store): a produce waits at most one flush interval, then its file's PUT and commit (the
agent seals a file early by the recent seal -> commit time plus the client's linger, up to
`flush_seal_lead_max_ms`; `--agent-env SKIFF_FLUSH_SEAL_LEAD_MAX_MS=0` measures without).
Before each cell one record per partition is sent and flushed, unmeasured (connections and
metadata ready, as in a running producer).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from skiff.fileformat.objectstore import open_store  # noqa: E402

from bench.support import pct  # noqa: E402
from tests.support.agents import free_port, skiff_command, wait_for_port  # noqa: E402
from tests.support.s3servers import S3Server, start_moto, start_seaweed  # noqa: E402

MiB = 1 << 20


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(
            r'^(skiff_\w+?)(?:_total)?(?:\{(?:role="agent",)?(?:kind|api|stage)="(\w+)"\})?(?:\{(?:role="agent",)?direction="(\w+)"\})? ([0-9.e+]+)$',
            line,
        )
        if m:
            name = (
                m.group(1)
                + (f":{m.group(2)}" if m.group(2) else "")
                + (f":{m.group(3)}" if m.group(3) else "")
            )
            out[name] = float(m.group(4))
    return out


class Agent:
    def __init__(
        self, bucket_url: str, db_url: str, env: dict[str, str], workdir: Path, profile_path: str = ""
    ) -> None:
        self.bucket_url, self.db_url, self.env, self.workdir = bucket_url, db_url, env, workdir
        # cProfile output of the agent process (written when it stops), or "" for none
        self.profile_path = profile_path
        self.port = free_port()
        self.metrics_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = self.workdir / "agent.log"
        with log.open("ab") as out:
            command = (
                [sys.executable, "-m", "cProfile", "-o", self.profile_path, "-m", "skiff.cli"]
                if self.profile_path
                else skiff_command()
            )
            self.proc = subprocess.Popen(
                [
                    *command,
                    "--log-level",
                    "WARNING",
                    "agent",
                    "--bucket",
                    self.bucket_url,
                    "--metadata",
                    self.db_url,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--metrics-port",
                    str(self.metrics_port),
                    "--agent-id",
                    "bench",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
            )
        wait_for_port(self.port, self.proc, log)  # type: ignore[arg-type]
        wait_for_port(self.metrics_port, self.proc, log)  # type: ignore[arg-type]

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(30)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


def put_latency_s(url: str, env: dict[str, str], size: int = 64 * 1024, n: int = 100) -> tuple[float, float]:
    """p50 and p99 latency of one `size`-byte PUT to the store (the size of a small flush)."""
    old = dict(os.environ)
    os.environ.update(env)
    try:
        store = open_store(url)
        body = os.urandom(size)
        times = []
        for i in range(n):
            t0 = time.perf_counter()
            store.put(f"latency/{i}.bin", body)
            times.append(time.perf_counter() - t0)
        store.close()
        return pct(times, 0.5), pct(times, 0.99)
    finally:
        os.environ.clear()
        os.environ.update(old)


def raw_ceiling(url: str, total_bytes: int, env: dict[str, str]) -> float:
    old = dict(os.environ)
    os.environ.update(env)
    try:
        store = open_store(url)
        body = os.urandom(8 * MiB)
        n = max(1, total_bytes // len(body))
        t0 = time.perf_counter()
        with ThreadPoolExecutor(4) as ex:
            list(ex.map(lambda i: store.put(f"raw/{i}.bin", body), range(n)))
        elapsed = time.perf_counter() - t0
        store.close()
        return n * len(body) / MiB / elapsed
    finally:
        os.environ.clear()
        os.environ.update(old)


def produce(
    bootstrap: str,
    topic: str,
    total_bytes: int,
    record_bytes: int,
    rate_mib_s: float | None,
    *,
    keyed: bool = False,
) -> dict:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "queue.buffering.max.kbytes": 32 * 1024,
            "enable.idempotence": False,
        }
    )
    latencies: list[float] = []
    errors = 0

    def on_delivery(err: object, m: object) -> None:
        nonlocal errors
        if err:
            errors += 1
        else:
            latencies.append(m.latency())  # type: ignore[attr-defined]

    value = os.urandom(record_bytes)
    n = total_bytes // record_bytes
    t0 = time.perf_counter()
    for i in range(n):
        if rate_mib_s:
            due = t0 + i * record_bytes / (rate_mib_s * MiB)
            # poll() returns as soon as it has served a delivery report: wait out the rest
            while (delay := due - time.perf_counter()) > 0.002:
                p.poll(delay)
        while True:
            try:
                if keyed:  # a key per record: librdkafka hashes it over all partitions
                    p.produce(topic, value, key=b"%d" % i, on_delivery=on_delivery)
                else:
                    p.produce(topic, value, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    p.flush(300)
    elapsed = time.perf_counter() - t0
    return {
        "mib_s": n * record_bytes / MiB / elapsed,
        "p50_ms": pct(latencies, 0.5) * 1000,
        "p99_ms": pct(latencies, 0.99) * 1000,
        "errors": errors,
        "seconds": elapsed,
        "records": n,
    }


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int) -> dict:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 * MiB,
            "max.partition.fetch.bytes": 4 * MiB,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = nbytes = 0
    t0 = time.perf_counter()
    while got < expected and time.perf_counter() - t0 < 600:
        for m in c.consume(10000, 1.0):
            if m.error() is None:
                got += 1
                nbytes += len(m.value() or b"")
    elapsed = time.perf_counter() - t0
    c.close()
    return {"mib_s": nbytes / MiB / elapsed, "records": got}


def end_to_end(bootstrap: str, topic: str, seconds: float = 5.0, rate: int = 1000) -> dict:
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "e2e", "fetch.wait.max.ms": 500, "fetch.min.bytes": 1}
    )
    c.assign([TopicPartition(topic, 0, -1)])  # the tail
    c.poll(1.0)
    lat: list[float] = []
    stop = threading.Event()

    def consume() -> None:
        while not stop.is_set():
            for m in c.consume(1000, 0.2):
                if m.error() is None and m.value():
                    lat.append(time.time() - float(m.value().decode()))

    t = threading.Thread(target=consume)
    t.start()
    # linger 20 ms: a few records per request, as a latency-minded producer would batch
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20})
    t0 = time.perf_counter()
    for i in range(int(seconds * rate)):
        due = t0 + i / rate
        while time.perf_counter() < due:
            p.poll(0.0005)
        p.produce(topic, str(time.time()).encode(), partition=0)
    p.flush(60)
    time.sleep(1.5)
    stop.set()
    t.join()
    c.close()
    return {"p50_ms": pct(lat, 0.5) * 1000, "p99_ms": pct(lat, 0.99) * 1000, "samples": len(lat)}


def paced_latency(bootstrap: str, topic: str, partitions: int, rate: int, seconds: float) -> dict:
    """Produce `rate` 100-byte records/s for `seconds`, record i to partition i % partitions."""
    p = Producer({"bootstrap.servers": bootstrap})  # librdkafka defaults
    latencies: list[float] = []
    errors = 0

    def on_delivery(err: object, m: object) -> None:
        nonlocal errors
        if err:
            errors += 1
        else:
            latencies.append(m.latency())  # type: ignore[attr-defined]

    value = b"v" * 100
    for i in range(partitions):  # warm-up, not measured: connections and metadata are ready
        p.produce(topic, value, partition=i)
    p.flush(60)
    latencies.clear()
    n = int(rate * seconds)
    t0 = time.perf_counter()
    for i in range(n):
        due = t0 + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            p.poll(delay)
        p.produce(topic, value, partition=i % partitions, on_delivery=on_delivery)
        p.poll(0)
    p.flush(120)
    return {
        "p50_ms": pct(latencies, 0.5) * 1000,
        "p99_ms": pct(latencies, 0.99) * 1000,
        "max_ms": max(latencies, default=float("nan")) * 1000,
        "errors": errors,
        "records": n,
    }


def consume_cold(agent: Agent, topic: str, partitions: int, records: int) -> dict:
    """Restart the agent (cold cache: every fetched byte comes from the store) and consume
    `topic` with one consumer of all partitions; adds the ranged GETs made."""
    agent.stop()
    agent.start()
    g0 = scrape(agent.metrics_port)
    cons = consume_all(agent.bootstrap, topic, partitions, records)
    g1 = scrape(agent.metrics_port)
    cons["gets"] = g1.get("skiff_object_store_requests:get_range", 0) - g0.get(
        "skiff_object_store_requests:get_range", 0
    )
    cons["get_bytes"] = g1.get("skiff_object_store_bytes:in", 0) - g0.get("skiff_object_store_bytes:in", 0)
    return cons


def _start_store(kind: str, work: Path) -> tuple[str, dict[str, str], S3Server | None]:
    if kind == "file":
        (work / "bucket").mkdir()
        return f"file://{work / 'bucket'}", {}, None
    (work / kind).mkdir()
    server = (start_moto if kind == "moto" else start_seaweed)(work / kind)
    return f"s3://{server.new_bucket()}", server.env, server


def run_sweep(
    kind: str,
    rates: list[int],
    partition_counts: list[int],
    seconds: float,
    agent_env: dict[str, str],
    profile_path: str = "",
) -> None:
    work = Path(tempfile.mkdtemp(prefix=f"skiff-sweep-{kind}-"))
    url, env, server = _start_store(kind, work)
    agent = Agent(url, f"sqlite:///{work / 'metadata.db'}", {**env, **agent_env}, work, profile_path)
    try:
        put_p50, put_p99 = (t * 1000 for t in put_latency_s(url, env))
        flush_ms = int(agent_env.get("SKIFF_FLUSH_INTERVAL_MS", "250"))
        bound_ms = flush_ms + 2 * put_p99
        agent.start()
        admin = AdminClient({"bootstrap.servers": agent.bootstrap})
        topics = {n: f"sweep-{n}" for n in partition_counts}
        for fut in admin.create_topics([NewTopic(t, n, 1) for n, t in topics.items()]).values():
            fut.result(30)
        extra = f", agent env {agent_env}" if agent_env else ""
        print(f"\n### latency sweep: {kind} (64 KiB PUT p50 {put_p50:.1f} ms, p99 {put_p99:.1f} ms{extra})\n")
        print(f"bound = flush interval {flush_ms} ms + 2 PUTs (p99) = {bound_ms:.0f} ms\n")
        print(
            "| records/s | partitions | p50 ms | p99 ms | max ms | p99 within bound | agent CPU | client CPU |"
            " requests/s | errors |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|")
        stage_rows = []
        for n in partition_counts:
            for rate in rates:
                cpu0, m0, t0 = proc_cpu_s(agent.proc.pid), scrape(agent.metrics_port), time.perf_counter()  # type: ignore[union-attr]
                own0 = time.process_time()
                r = paced_latency(agent.bootstrap, topics[n], n, rate, seconds)
                cpu1, m1, t1 = proc_cpu_s(agent.proc.pid), scrape(agent.metrics_port), time.perf_counter()  # type: ignore[union-attr]
                own = (time.process_time() - own0) / (t1 - t0)
                produces = m1.get("skiff_requests:produce", 0) - m0.get("skiff_requests:produce", 0)
                ok = "yes" if r["p99_ms"] <= bound_ms else "NO"
                print(
                    f"| {rate:,} | {n} | {r['p50_ms']:.0f} | {r['p99_ms']:.0f} | {r['max_ms']:.0f} |"
                    f" {ok} | {(cpu1 - cpu0) / (t1 - t0):.0%} | {own:.0%} | {produces / (t1 - t0):,.0f} | {r['errors']} |",
                    flush=True,
                )
                stage_rows.append((rate, n, _stage_means_ms(m0, m1)))
        print(
            "\nWhere a file's time went (mean ms per file, agent.produce_buffer stages: open = first"
            " append to seal, queued = seal to PUT, put, ordered = waiting for the previous commit,"
            " commit, resolve = commit to the last ack resolved):\n"
        )
        print("| records/s | partitions | files/s | " + " | ".join(_STAGES) + " |")
        print("|---|---|---|" + "---|" * len(_STAGES))
        for rate, n, (files, means) in stage_rows:
            print(
                f"| {rate:,} | {n} | {files / seconds:.1f} | "
                + " | ".join(f"{means[st]:.1f}" for st in _STAGES)
                + " |"
            )
        last = scrape(agent.metrics_port)
        print(
            "\nlongest file per stage over the run (ms): "
            + ", ".join(
                f"{st} {last.get(f'skiff_produce_stage_max_seconds:{st}', 0) * 1000:.1f}" for st in _STAGES
            )
            + f"; seal lead learned at the end (p95 seal -> commit): "
            f"{last.get('skiff_produce_post_seal_estimate_seconds', 0) * 1000:.1f} ms"
        )
    finally:
        agent.stop()
        if server:
            server.process.stop(grace=3)


_STAGES = ("open", "queued", "put", "ordered", "commit", "resolve")


def _stage_means_ms(m0: dict[str, float], m1: dict[str, float]) -> tuple[float, dict[str, float]]:
    """Files committed between two scrapes, and each stage's mean milliseconds per file."""
    files = m1.get("skiff_produce_files", 0) - m0.get("skiff_produce_files", 0)
    means = {
        st: (m1.get(f"skiff_produce_stage_seconds:{st}", 0) - m0.get(f"skiff_produce_stage_seconds:{st}", 0))
        * 1000
        / max(files, 1)
        for st in _STAGES
    }
    return files, means


def run_store(
    kind: str, mib: int, partitions: int, record_bytes: int, agent_env: dict[str, str], layouts: list[str]
) -> None:
    work = Path(tempfile.mkdtemp(prefix=f"skiff-bench-{kind}-"))
    url, env, server = _start_store(kind, work)
    agent = Agent(url, f"sqlite:///{work / 'metadata.db'}", {**env, **agent_env}, work)
    try:
        total = mib * MiB
        ceiling = raw_ceiling(url, total, env)
        agent.start()
        admin = AdminClient({"bootstrap.servers": agent.bootstrap})
        topics = {layout: f"bench-{layout}" for layout in layouts}
        created = admin.create_topics(
            [NewTopic(t, partitions, 1) for t in topics.values()]
            + [NewTopic("paced", partitions, 1), NewTopic("e2e", 1, 1)]
        )
        for fut in created.values():
            fut.result(30)
        time.sleep(1)
        produced: dict[str, dict] = {}
        for layout, topic in topics.items():
            m0 = scrape(agent.metrics_port)
            cpu0 = proc_cpu_s(server.process.pid) if server else 0.0
            agent_cpu0 = proc_cpu_s(agent.proc.pid)  # type: ignore[union-attr]
            run = produce(agent.bootstrap, topic, total, record_bytes, None, keyed=layout == "keyed")
            run["server_cpu"] = (proc_cpu_s(server.process.pid) if server else 0.0) - cpu0
            run["agent_cpu"] = proc_cpu_s(agent.proc.pid) - agent_cpu0  # type: ignore[union-attr]
            m1 = scrape(agent.metrics_port)
            run["puts"] = m1.get("skiff_object_store_requests:put", 0) - m0.get(
                "skiff_object_store_requests:put", 0
            )
            run["files"] = m1["skiff_produce_files"] - m0["skiff_produce_files"]
            run["file_bytes"] = m1["skiff_produce_file_bytes"] - m0["skiff_produce_file_bytes"]
            produced[layout] = run
        full = produced[layouts[0]]
        paced_bytes = min(total, 16 * MiB * 10)
        m2 = scrape(agent.metrics_port)
        paced = produce(agent.bootstrap, "paced", paced_bytes, record_bytes, 16.0)
        m3 = scrape(agent.metrics_port)
        paced_puts = m3.get("skiff_object_store_requests:put", 0) - m2.get(
            "skiff_object_store_requests:put", 0
        )
        e2e = end_to_end(agent.bootstrap, "e2e")
        consumed = {
            layout: consume_cold(agent, topic, partitions, produced[layout]["records"])
            for layout, topic in topics.items()
        }
        gib = total / (1 << 30)
        print(f"\n### {kind} ({mib} MiB of {record_bytes}-byte records, {partitions} partitions)\n")
        print("| measure | value |\n|---|---|")
        print(f"| raw store PUT ceiling (8 MiB objects, 4 in flight) | {ceiling:.1f} MiB/s |")
        for layout, run in produced.items():
            print(
                f"| produce, full speed ({layout}) | {run['mib_s']:.1f} MiB/s "
                f"({run['mib_s'] / ceiling:.0%} of the ceiling) |"
            )
        print(
            f"| produce ack latency p50 / p99 (full speed, {layouts[0]}) | "
            f"{full['p50_ms']:.0f} / {full['p99_ms']:.0f} ms |"
        )
        print(
            f"| produce at 16 MiB/s: ack latency p50 / p99 | {paced['p50_ms']:.0f} / {paced['p99_ms']:.0f} ms |"
        )
        print(f"| produce at 16 MiB/s: PUTs per second | {paced_puts / paced['seconds']:.2f} |")
        for layout, run in produced.items():
            print(
                f"| files written (full speed, {layout}), mean size | {run['files']:.0f}, "
                f"{run['file_bytes'] / max(run['files'], 1) / MiB:.2f} MiB |"
            )
        print(f"| PUTs per GiB produced ({layouts[0]}) | {full['puts'] / gib:.0f} |")
        print(f"| agent CPU per GiB produced ({layouts[0]}) | {full['agent_cpu'] / gib:.1f} s |")
        if server:
            print(f"| S3 server CPU per GiB produced ({layouts[0]}) | {full['server_cpu'] / gib:.1f} s |")
        for layout, cons in consumed.items():
            files = produced[layout]["files"]
            print(f"| consume, cold cache ({layout}) | {cons['mib_s']:.1f} MiB/s |")
            print(
                f"| ranged GETs per GiB consumed ({layout}) | {cons['gets'] / gib:.0f} "
                f"({cons['gets']:.0f} GETs for {files:.0f} files, {cons['get_bytes'] / total:.2f} x the bytes) |"
            )
        print(
            f"| end-to-end latency p50 / p99 (1,000 rec/s) | {e2e['p50_ms']:.0f} / {e2e['p99_ms']:.0f} ms |"
        )
        errors = sum(r["errors"] for r in produced.values()) + paced["errors"]
        short = {k: f"{c['records']}/{produced[k]['records']}" for k, c in consumed.items()}
        if errors or any(c["records"] != produced[k]["records"] for k, c in consumed.items()):
            print(f"| errors | produce {errors}, consumed {short} |")
    finally:
        agent.stop()
        if server:
            server.process.stop(grace=3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stores", default="file,moto,seaweedfs")
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--record-bytes", type=int, default=1024)
    ap.add_argument(
        "--layouts",
        default="sticky,keyed",
        help="produce layouts, each consumed cold: sticky (unkeyed records), keyed (a key per record)",
    )
    ap.add_argument("--sweep", action="store_true", help="run the ack latency sweep instead")
    ap.add_argument("--rates", default="10,100,1000,10000", help="records/s of the sweep")
    ap.add_argument("--partition-counts", default="1,100", help="topic sizes of the sweep")
    ap.add_argument("--seconds", type=float, default=8.0, help="duration of each sweep cell")
    ap.add_argument("--agent-env", default="", help="SKIFF_X=Y,... settings for the agent")
    ap.add_argument(
        "--agent-profile", default="", help="sweep only: run the agent under cProfile, stats to this file"
    )
    args = ap.parse_args()
    agent_env = dict(kv.split("=", 1) for kv in args.agent_env.split(",") if kv)
    if args.sweep:
        print(f"# ack latency sweep, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores")
        for kind in args.stores.split(","):
            run_sweep(
                kind,
                [int(r) for r in args.rates.split(",")],
                [int(n) for n in args.partition_counts.split(",")],
                args.seconds,
                agent_env,
                args.agent_profile,
            )
        return
    layouts = args.layouts.split(",")
    if not layouts or set(layouts) - {"sticky", "keyed"}:
        ap.error("--layouts takes sticky and/or keyed")
    print(f"# produce/consume benchmark, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores")
    for kind in args.stores.split(","):
        run_store(kind, args.mib, args.partitions, args.record_bytes, agent_env, layouts)


if __name__ == "__main__":
    main()
