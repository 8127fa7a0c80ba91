"""GETs per file for a cold read by several concurrent consumers (issue 24, item 4).

    python bench/cold_consume_gets.py [--mib 96] [--rate-mib 8] [--partitions 100] [--consumers 4]
                                      [--rounds 2] [--compare-env PYTHONPATH=<old checkout>]...

One moto S3 server and one SQLite metadata file. A `skiff agent` (this checkout) takes
`--mib` MiB of 1 KiB keyed records over `--partitions` partitions at `--rate-mib` MiB/s
(0: full speed; at 8 MiB/s and the default 250 ms flush interval files are ~2 MiB, as in
the issue's 40 files of 2.3 MiB; librdkafka hashes the keys over all partitions: every
file holds every partition, a small chunk each). Then,
for each code version (this checkout first, as `this`, then each `--compare-env`, e.g.
another checkout on PYTHONPATH), `--rounds` times: the agent is restarted (cold caches)
and `--consumers` librdkafka consumers, each assigned every partition from offset 0,
read the whole topic at the same time. Counted:

- at the S3 server (moto's request recorder): the ranged GETs of data files while the
  consumers ran, per file (mean and worst file) and their bytes;
- at the agent: its range cache's count of ranged GETs started (`skiff_fetch_cache_loads`);
- the consumers' combined MiB/s and the machine's load average when the round began.

Prints a markdown table for docs/benchmarks.md. A PYTHONPATH checkout is a directory
holding `skiff/<package>` for each package of pyproject's package-dir (symlinks to a
checkout's top-level folders), so that `import skiff.agent` resolves there.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.produce_consume import Agent, produce, scrape  # noqa: E402
from tests.support.s3servers import S3Server, start_moto  # noqa: E402

MiB = 1 << 20
RECORD_BYTES = 1024
TIMEOUT_S = 900.0


def consume_everything(bootstrap: str, topic: str, partitions: int, expected: int, out: dict) -> None:
    """One consumer of every partition from offset 0 until `expected` records arrive."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"cold-{threading.get_ident()}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 * MiB,
            "max.partition.fetch.bytes": 4 * MiB,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = nbytes = 0
    t0 = time.perf_counter()
    while got < expected and time.perf_counter() - t0 < TIMEOUT_S:
        for m in c.consume(10000, 1.0):
            if m.error() is None:
                got += 1
                nbytes += len(m.value() or b"")
    c.close()
    out.update(records=got, bytes=nbytes)


def cold_round(
    agent: Agent, server: S3Server, topic: str, args: argparse.Namespace, records: int, sizes: dict[str, int]
) -> dict:
    """Restart the agent (cold) and let the consumers read the topic together."""
    agent.stop()
    agent.start()
    load = os.getloadavg()[0]
    m0 = scrape(agent.metrics_port)
    server.start_recording()
    outs: list[dict] = [{} for _ in range(args.consumers)]
    threads = [
        threading.Thread(
            target=consume_everything, args=(agent.bootstrap, topic, args.partitions, records, out)
        )
        for out in outs
    ]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    recorded = server.stop_recording()
    m1 = scrape(agent.metrics_port)
    per_file: Counter[str] = Counter()
    ranges: dict[str, list[tuple[int, int, int]]] = {}  # file -> (GET's index, first, last byte)
    get_bytes = 0
    for n, r in enumerate(recorded):
        if r.method == "GET" and "range" in {k.lower() for k in r.headers} and "/segments/" in r.path:
            per_file[r.path] += 1
            value = {k.lower(): v for k, v in r.headers.items()}["range"]
            lo, _, hi = value.removeprefix("bytes=").partition("-")
            # "bytes=N-": an open-ended GET, read to the object's end (a first fetch's cold read)
            last = int(hi) if hi else sizes[r.path.split("/segments/", 1)[1]] - 1
            get_bytes += last - int(lo) + 1
            ranges.setdefault(r.path, []).append((n, int(lo), last))
    if args.show_split:  # the sequence behind a file read in several GETs
        for path, got in ranges.items():
            if len(got) > 1:
                shown = ", ".join(f"#{n} {lo}-{hi}" for n, lo, hi in got)
                print(f"  split {path.rsplit('/', 1)[-1]}: {shown}", file=sys.stderr, flush=True)
    agent_gets = m1.get("skiff_fetch_cache_loads", 0) - m0.get("skiff_fetch_cache_loads", 0)
    short = [o.get("records", 0) for o in outs if o.get("records", 0) < records]
    return {
        "load": load,
        "gets": sum(per_file.values()),
        "files_read": len(per_file),
        "worst": max(per_file.values(), default=0),
        "get_bytes": get_bytes,
        "agent_gets": agent_gets,
        "mib_s": sum(o.get("bytes", 0) for o in outs) / MiB / elapsed,
        "short": short,
    }


def data_files(server: S3Server, bucket: str) -> dict[str, int]:
    """The topic data objects in the bucket: size by name (without "segments/")."""
    client = server.client()
    sizes = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for o in page.get("Contents", []):
            if o["Key"].startswith("segments/"):
                sizes[o["Key"].removeprefix("segments/")] = o["Size"]
    return sizes


def parse_env(spec: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in spec.split(",") if item)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=96)
    ap.add_argument("--rate-mib", type=float, default=8.0, help="produce rate in MiB/s (0: full speed)")
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--consumers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--compare-env", action="append", default=[], help="NAME=VALUE[,NAME=VALUE]")
    ap.add_argument(
        "--show-split",
        action="store_true",
        help="print to stderr, for every file read in more than one GET, its GETs' byte ranges in the "
        "order the S3 server saw them (#n: the request's place among all recorded requests)",
    )
    args = ap.parse_args()
    versions = [("this", {})] + [(f"env {i + 1}", parse_env(s)) for i, s in enumerate(args.compare_env)]
    work = Path(tempfile.mkdtemp(prefix="skiff-coldgets-"))
    (work / "moto").mkdir()
    server = start_moto(work / "moto")
    bucket = server.new_bucket()
    db = f"sqlite:///{work / 'metadata.db'}"
    agent = Agent(f"s3://{bucket}", db, dict(server.env), work)
    topic = "cold"
    try:
        agent.start()
        admin = AdminClient({"bootstrap.servers": agent.bootstrap})
        for fut in admin.create_topics([NewTopic(topic, args.partitions, 1)]).values():
            fut.result(30)
        made = produce(
            agent.bootstrap, topic, args.mib * MiB, RECORD_BYTES, args.rate_mib or None, keyed=True
        )
        sizes = data_files(server, bucket)
        files, size = len(sizes), sum(sizes.values())
        print(
            f"\n### cold read by {args.consumers} concurrent consumers: {args.partitions} partitions, "
            f"{made['records']:,} keyed 1 KiB records, {files} files of {size / files / MiB:.2f} MiB mean "
            f"({datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
            f"{os.cpu_count()} cores)\n"
        )
        for label, env in versions:
            print(f"- `{label}`: {env or 'this checkout'}")
        print(
            "\n| code | round | load avg (1 min) | GETs at the S3 server | per file (mean) | worst file |"
            " GET MiB / data MiB | agent's range-cache loads | consumers' MiB/s (sum) |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for label, env in versions:
            agent.env = {**server.env, **env}
            for i in range(args.rounds):
                r = cold_round(agent, server, topic, args, made["records"], sizes)
                note = f" (short: {r['short']})" if r["short"] else ""
                print(
                    f"| {label} | {i + 1} | {r['load']:.1f} | {r['gets']} | {r['gets'] / files:.2f} |"
                    f" {r['worst']} | {r['get_bytes'] / size:.2f} | {r['agent_gets']:.0f} |"
                    f" {r['mib_s']:.1f}{note} |",
                    flush=True,
                )
    finally:
        agent.stop()
        server.process.stop(grace=3)


if __name__ == "__main__":
    main()
