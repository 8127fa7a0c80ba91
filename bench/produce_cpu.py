"""Agent CPU per GiB and per Produce request at full speed, code versions side by side, with profiles.

    python bench/produce_cpu.py [--store moto] [--mib 64] [--partitions 100]
                                [--cells sticky:1024,keyed:1024,sticky:100,keyed:100]
                                [--compare-env PYTHONPATH=<old checkout>]... [--rounds 1]
                                [--py-spy DIR] [--py-spy-rate 500] [--py-spy-gil] [--top 12]
                                [--rate-mib 16]

One store (moto's S3 server by default, or `file`) and one SQLite metadata file per code version for the
whole run. For each cell (layout:record bytes), each round, and each code version in turn
(this checkout first, as `this`, then each `--compare-env`, e.g. `PYTHONPATH=<dir>` where
<dir> holds `skiff/<package>` symlinks to another checkout's top-level folders), a fresh
`skiff agent` process is started and a librdkafka producer with its defaults (acks=all,
linger.ms 5, no idempotence, no compression) sends `--mib` MiB over `--partitions`
partitions as fast as it can: `sticky` is unkeyed records (librdkafka's sticky partitioner
fills one partition's batch at a time), `keyed` gives every record its own key (every
request carries many small batches). Printed per cell and version: the agent process's
CPU seconds (from /proc: event loop and threads) per GiB produced and per Produce request
(requests from the agent's own metrics), the kernel's share of that CPU (system time:
the sockets), MiB/s, and PUTs. Versions alternate within a
cell, so machine load moves both alike; CPU seconds are less sensitive to load than wall
time.

`--rate-mib R` paces the producer at R MiB/s instead and adds PUTs per second and
librdkafka's ack latency p50/p99 (the PUT budget of issue 24 item 5).

`--py-spy DIR` samples each agent with py-spy (installed by `pip install -e ".[bench]"`; `record --format raw --nonblocking`,
`--py-spy-rate` Hz) while it produces, keeps the raw profile in DIR, and prints the top frames by share
of the samples: by own time (the leaf function) and by inclusive time (a function anywhere
on the stack, counted once per sample). py-spy samples every thread that is not idle, so a
thread waiting for the GIL or descheduled on a busy machine is counted too; `--py-spy-gil`
samples only the thread holding the GIL, which is closer to where Python's CPU goes (the
kernel's share, sockets, is in the table above).
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from bench.produce_consume import Agent, MiB, _start_store, produce  # noqa: E402

GiB = 1 << 30


def scrape(port: int) -> dict[str, float]:
    """The agent's counters as {"name:label value,...": value} (labels in their sorted order)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(v for _, v in sorted(s.labels.items()))
            out[f"{s.name}:{labels}" if labels else s.name] = s.value
    return out


def proc_user_sys_s(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of process `pid` (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def parse_env(spec: str) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in spec.split(",") if kv)


def _frame_name(frame: str) -> str:
    """`func (path/to/file.py:123)` -> `func (file.py)`: one entry per function, not per line."""
    name, _, where = frame.partition(" (")
    file = where.rsplit(":", 1)[0].rstrip(")")
    return f"{name} ({Path(file).name})" if file else name


def summarise(raw: Path, top: int) -> list[str]:
    """Top frames by own and by inclusive share of the samples of a py-spy raw profile."""
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_frame_name(f) for f in stack.split(";")]
        total += n
        own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    if not total:
        return ["(no samples)"]
    own_rows = [f"| {n / total:.1%} | `{f}` |" for f, n in own.most_common(top)]
    # the event loop and the process's entry: on every stack, so they say nothing
    skip = (
        "<module>",
        "BaseEventLoop.",
        "Handle._run",
        "run_agent",
        "_run_agent",
        "run_until_exit",
        "main (",
    )
    incl_rows = [f"| {n / total:.1%} | `{f}` |" for f, n in incl.most_common() if not f.startswith(skip)][
        :top
    ]
    return [
        f"{total} samples",
        "",
        "| own % | function (leaf frame) |",
        "|---|---|",
        *own_rows,
        "",
        "| inclusive % | function (anywhere on the stack) |",
        "|---|---|",
        *incl_rows,
    ]


def run_cell(
    agent: Agent,
    topic: str,
    partitions: int,
    layout: str,
    record_bytes: int,
    mib: int,
    spy_out: Path | None,
    rate_hz: int,
    gil_only: bool = False,
    rate_mib_s: float | None = None,
) -> dict[str, float]:
    admin = AdminClient({"bootstrap.servers": agent.bootstrap})
    for fut in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        fut.result(30)
    pid = agent.proc.pid  # type: ignore[union-attr]
    spy = None
    if spy_out is not None:
        spy = subprocess.Popen(
            [
                "py-spy",
                "record",
                "--format",
                "raw",
                "--nonblocking",
                "-r",
                str(rate_hz),
                "-p",
                str(pid),
                *(["--gil"] if gil_only else []),
                "-o",
                str(spy_out),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    m0 = scrape(agent.metrics_port)
    user0, sys0 = proc_user_sys_s(pid)
    run = produce(agent.bootstrap, topic, mib * MiB, record_bytes, rate_mib_s, keyed=layout == "keyed")
    user1, sys1 = proc_user_sys_s(pid)
    cpu = user1 - user0 + sys1 - sys0
    m1 = scrape(agent.metrics_port)
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(60)

    def delta(name: str) -> float:
        return m1.get(name, 0) - m0.get(name, 0)

    requests = delta("skiff_requests_total:produce")
    return {
        "cpu_per_gib": cpu / (mib * MiB / GiB),
        "sys_share": (sys1 - sys0) / max(cpu, 1e-9),
        "user_per_gib": (user1 - user0) / (mib * MiB / GiB),
        "us_per_request": cpu / max(requests, 1) * 1e6,
        "requests": requests,
        "mib_s": run["mib_s"],
        "puts": delta("skiff_object_store_requests_total:put,agent"),
        "puts_per_s": delta("skiff_object_store_requests_total:put,agent") / run["seconds"],
        "p50_ms": run["p50_ms"],
        "p99_ms": run["p99_ms"],
        "errors": run["errors"],
    }


HEADER = (
    "| layout | record B | code | agent CPU s/GiB | user s/GiB | kernel share | agent CPU us/request"
    " | requests | MiB/s | PUTs | errors |\n|---|---|---|---|---|---|---|---|---|---|---|"
)


def row(layout: str, record_bytes: int, name: str, r: dict[str, float]) -> str:
    return (
        f"| {layout} | {record_bytes} | {name} | {r['cpu_per_gib']:.2f} | {r['user_per_gib']:.2f} |"
        f" {r['sys_share']:.0%} | {r['us_per_request']:.0f} | {r['requests']:.0f} | {r['mib_s']:.1f} |"
        f" {r['puts']:.0f} | {r['errors']:.0f} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", default="moto", choices=["moto", "file"])
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--cells", default="sticky:1024,keyed:1024,sticky:100,keyed:100")
    ap.add_argument("--compare-env", action="append", default=[], help="NAME=VALUE[,NAME=VALUE]")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--py-spy", default="", help="directory for py-spy raw profiles (and print top frames)")
    ap.add_argument("--py-spy-rate", type=int, default=500, help="samples per second")
    ap.add_argument(
        "--py-spy-gil", action="store_true", help="sample only the thread holding the GIL (Python's CPU)"
    )
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument(
        "--rate-mib", type=float, default=None, help="pace the producer at this many MiB/s (PUT budget)"
    )
    args = ap.parse_args()
    versions = [("this", {})] + [(f"env {i + 1}", parse_env(s)) for i, s in enumerate(args.compare_env)]
    cells = [(c.split(":")[0], int(c.split(":")[1])) for c in args.cells.split(",")]
    spy_dir = Path(args.py_spy) if args.py_spy else None
    if spy_dir:
        spy_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="skiff-produce-cpu-"))
    url, env, server = _start_store(args.store, work)
    print(
        f"# produce CPU, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores,"
        f" {args.store}, {args.mib} MiB per cell, {args.partitions} partitions"
    )
    for name, venv in versions:
        print(f"# {name}: {venv or 'this checkout'}")
    print(HEADER)
    rows = []
    profiles: list[tuple[str, Path]] = []
    try:
        for ci, (layout, record_bytes) in enumerate(cells):
            for rnd in range(args.rounds):
                for vi, (name, venv) in enumerate(versions):
                    # a metadata file per version: an older checkout may not know a newer schema
                    agent = Agent(url, f"sqlite:///{work / f'metadata-{vi}.db'}", {**env, **venv}, work)
                    agent.start()
                    try:
                        topic = f"cpu-{ci}-{layout}-{record_bytes}-{rnd}-{vi}"
                        spy_out = spy_dir / f"{topic}.txt" if spy_dir and rnd == 0 else None
                        r = run_cell(
                            agent,
                            topic,
                            args.partitions,
                            layout,
                            record_bytes,
                            args.mib,
                            spy_out,
                            args.py_spy_rate,
                            args.py_spy_gil,
                            args.rate_mib,
                        )
                    finally:
                        agent.stop()
                    rows.append((layout, record_bytes, name, r))
                    if spy_out is not None:
                        profiles.append((f"{layout}, {record_bytes} B records, {name}", spy_out))
                    print(row(layout, record_bytes, name, r), flush=True)
    finally:
        if server:
            server.process.stop(grace=3)
    print(f"\n{HEADER}")
    for layout, record_bytes, name, r in rows:
        print(row(layout, record_bytes, name, r))
    if args.rate_mib:
        print(f"\nPaced at {args.rate_mib} MiB/s: PUTs per second and ack latency (librdkafka's)\n")
        print("| layout | record B | code | PUTs/s | ack p50 ms | ack p99 ms |\n|---|---|---|---|---|---|")
        for layout, record_bytes, name, r in rows:
            print(
                f"| {layout} | {record_bytes} | {name} | {r['puts_per_s']:.2f} | {r['p50_ms']:.0f} |"
                f" {r['p99_ms']:.0f} |"
            )
    for title, path in profiles:
        print(f"\n#### {title} ({path.name})\n")
        print("\n".join(summarise(path, args.top)))


if __name__ == "__main__":
    main()
