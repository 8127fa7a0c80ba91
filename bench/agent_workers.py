"""Every core of a pod: produce throughput of `skiff agent --workers N`, and its PUTs.

    python bench/agent_workers.py [--store file|moto] [--workers 1,2] [--mib 256]
                                  [--partitions 100] [--record-bytes 1024] [--producers 2]
                                  [--keyed] [--rounds 2] [--rate-mib R] [--producer kcat]

One store and one SQLite metadata file for the whole run. For each round and each worker
count in turn (alternating, so machine load moves all alike), a fresh `skiff agent --workers
N` is started (N = 1 is the plain agent) and `--producers` librdkafka producer processes
(acks=all, linger.ms 5, no idempotence) send `--mib` MiB between them over `--partitions`
partitions as fast as they can. Printed per run: MiB/s (all the bytes over the wall time from
the first record to the last ack), the pod's CPU seconds per GiB (the agent process and its
children, from /proc), segment files written (the PUTs of produce: objects under
`segments/` counted in the store), PUTs per second and per GiB, and the ratio of MiB/s to
the first worker count's in the same round.

`--producer kcat` sends with kcat processes instead (librdkafka from C, reading the records
from a file: a producer that costs far less CPU per record than a Python loop, so the pod,
not the producers, is what the cores are short of); with `--keyed`, each record has its own
key; not with `--rate-mib`.

`--rate-mib R` paces the producers at R MiB/s in all instead (the PUT budget: one file per
flush interval whatever the worker count, about 4 PUTs/s at the default 250 ms).

The producers, the store (moto: an S3 server in Python) and the pod share the machine's
cores: on a 2-core machine the pod never has two cores to itself, so the ratio is a lower
bound of what N workers give where the pod has N cores.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.produce_consume import MiB, _start_store, produce  # noqa: E402
from tests.support.agents import child_pids, skiff_command  # noqa: E402
from tests.support.s3servers import _port_is_free  # noqa: E402

GiB = 1 << 30


def free_run(count: int, start: int = 30000) -> int:
    for base in range(start, 60000, 97):
        if all(_port_is_free(base + i) for i in range(count)):
            return base
    raise RuntimeError("no run of free ports")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_s(pid: int) -> tuple[float, float]:
    """CPU seconds of `pid` (the agent, or the pod's writer) and of its children (the workers)."""
    return cpu_s(pid), sum(cpu_s(c) for c in child_pids(pid))


class Pod:
    def __init__(self, workers: int, bucket_url: str, db_url: str, env: dict[str, str], work: Path) -> None:
        self.workers = workers
        self.port = free_run(workers)
        self.metrics_port = free_run(workers + 1, self.port + workers + 1)
        log = (work / f"pod-{workers}.log").open("ab")
        self.proc = subprocess.Popen(
            [
                *skiff_command(),
                "--log-level",
                "WARNING",
                "agent",
                "--bucket",
                bucket_url,
                "--metadata",
                db_url,
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--metrics-port",
                str(self.metrics_port),
                "--agent-id",
                f"bench-{workers}",
                "--workers",
                str(workers),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"the pod exited {self.proc.returncode}: see {work}")
            time.sleep(0.2)
        raise RuntimeError("the pod never became ready")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(120)


def _produce_part(args: tuple[str, str, int, int, bool, float | None]) -> dict:
    bootstrap, topic, total_bytes, record_bytes, keyed, rate_mib_s = args
    return produce(bootstrap, topic, total_bytes, record_bytes, rate_mib_s, keyed=keyed)


def _produce_kcat(bootstrap: str, topic: str, total_bytes: int, args: argparse.Namespace) -> list[dict]:
    """`--producers` kcat processes, each sending its share of the records from one file."""
    records = total_bytes // args.record_bytes // args.producers
    value = os.urandom(args.record_bytes).hex()[: args.record_bytes - 1]
    layout = "keyed" if args.keyed else "sticky"
    path = Path(tempfile.gettempdir()) / f"skiff-bench-records-{layout}-{args.record_bytes}-{records}.txt"
    if not path.exists():
        if args.keyed:  # `key:value` lines (kcat -K:), a key per record: librdkafka hashes them
            path.write_bytes("".join(f"{i}:{value}\n" for i in range(records)).encode())
        else:
            path.write_bytes(f"{value}\n".encode() * records)
    procs = [
        subprocess.Popen(
            [
                "kcat",
                "-P",
                "-b",
                bootstrap,
                "-t",
                topic,
                "-l",
                str(path),
                *(["-K", ":"] if args.keyed else []),
                "-X",
                "linger.ms=5",
                "-X",
                "acks=all",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for _ in range(args.producers)
    ]
    out = []
    for p in procs:
        _, err = p.communicate(timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"kcat failed: {err.decode()[-500:]}")
        out.append({"errors": 0, "p99_ms": float("nan")})
    return out


def segment_count(store: str, work: Path, env: dict[str, str]) -> int:
    if store == "file":
        root = work / "bucket" / "segments"
        return sum(1 for _ in root.rglob("*.seg")) if root.exists() else 0
    import boto3

    client = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1")
    bucket = env["BENCH_BUCKET"]
    n = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="segments/"):
        n += len(page.get("Contents", []))
    return n


def run(pod: Pod, args: argparse.Namespace, topic: str, count_segments: callable) -> dict[str, float]:  # type: ignore[valid-type]
    admin = AdminClient({"bootstrap.servers": pod.bootstrap})
    for fut in admin.create_topics([NewTopic(topic, args.partitions, 1)]).values():
        fut.result(30)
    total = args.mib * MiB
    files0 = count_segments()
    top0, kids0 = tree_cpu_s(pod.proc.pid)
    t0 = time.perf_counter()
    if args.producer == "kcat":
        results = _produce_kcat(pod.bootstrap, topic, total, args)
    else:
        rate = args.rate_mib / args.producers if args.rate_mib else None
        parts = [(pod.bootstrap, topic, total // args.producers, args.record_bytes, args.keyed, rate)]
        with multiprocessing.get_context("spawn").Pool(args.producers) as pool:
            results = pool.map(_produce_part, parts * args.producers)
    seconds = time.perf_counter() - t0
    top1, kids1 = tree_cpu_s(pod.proc.pid)
    cpu = top1 - top0 + kids1 - kids0
    files = count_segments() - files0
    return {
        "mib_s": total / MiB / seconds,
        "cpu_per_gib": cpu / (total / GiB),
        # with workers: the writer's own share (the one process every byte goes through)
        "writer_per_gib": (top1 - top0) / (total / GiB) if pod.workers > 1 else float("nan"),
        "files": files,
        "puts_per_s": files / seconds,
        "puts_per_gib": files / (total / GiB),
        "errors": sum(r["errors"] for r in results),
        "p99_ms": max(r["p99_ms"] for r in results),  # nan for kcat (no per-record latency)
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", default="file", choices=["file", "moto"])
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--record-bytes", type=int, default=1024)
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--keyed", action="store_true")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--producer", default="python", choices=["python", "kcat"])
    ap.add_argument(
        "--rate-mib", type=float, default=None, help="pace the producers at this many MiB/s in all"
    )
    args = ap.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    work = Path(tempfile.mkdtemp(prefix="skiff-workers-"))
    url, env, server = _start_store(args.store, work)
    if server is not None:
        env = {**env, "BENCH_BUCKET": url[len("s3://") :]}
    print(
        f"# agent workers, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores,"
        f" {args.store}, {args.mib} MiB per run, {args.partitions} partitions, {args.record_bytes} B records,"
        f" {'keyed' if args.keyed else 'sticky'}, {args.producers} {args.producer} producer processes,"
        f" {f'paced at {args.rate_mib} MiB/s' if args.rate_mib else 'full speed'},"
        f" load average {os.getloadavg()[0]:.1f}"
    )
    print(
        "| round | workers | MiB/s | ratio | pod CPU s/GiB | writer CPU s/GiB | files (PUTs) | PUTs/s | PUTs/GiB"
        " | ack p99 ms | errors |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    try:
        for rnd in range(args.rounds):
            first = None
            for w in counts:
                pod = Pod(w, url, f"sqlite:///{work / 'metadata.db'}", env, work)
                try:
                    r = run(pod, args, f"w{w}-r{rnd}", lambda: segment_count(args.store, work, env))
                finally:
                    pod.stop()
                first = first or r["mib_s"]
                print(
                    f"| {rnd + 1} | {w} | {r['mib_s']:.1f} | {r['mib_s'] / first:.2f}x | {r['cpu_per_gib']:.2f} | {r['writer_per_gib']:.2f} |"
                    f" {r['files']:.0f} | {r['puts_per_s']:.2f} | {r['puts_per_gib']:.0f} | {r['p99_ms']:.0f} |"
                    f" {r['errors']:.0f} |",
                    flush=True,
                )
    finally:
        if server is not None:
            server.process.stop(grace=3)
    print(f"# load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
