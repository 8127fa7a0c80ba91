"""Agent CPU per small Produce request, and requests/s at the agent's CPU ceiling.

    python bench/produce_request_cpu.py [--requests 60000] [--partitions 100] [--window 2000]
                                        [--profile agent.prof] [--compare-env PYTHONPATH=<dir>]...
                                        [--rounds 1]

Starts one `skiff agent` process (file:// bucket, embedded SQLite) and one topic, then
sends ProduceRequests (v9, acks=all) the way librdkafka does at 10,000 records/s over 100
partitions: one request per partition batch, each one batch of one 100-byte record, request
i to partition i % N. The requests are encoded once and pipelined over one connection with
at most `--window` unanswered (enough to cover a 250 ms flush at the agent's rate, so the
agent, not the window, is the limit). Prints the agent process's CPU time per request
(from /proc: its event loop and its threads), requests/s and the agent's CPU share while
it ran. The client side is a few socket calls per request, not librdkafka, so the agent is
the bottleneck: this isolates the server's decode, validation, handler, produce buffer,
commit and response encode cost. `--compare-env PYTHONPATH=<dir>` measures another checkout
in the same run (<dir> holds `skiff/<package>` symlinks to its top-level folders), the
versions alternating within each of `--rounds` rounds.
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kio.schema.produce.v9.request import (  # noqa: E402
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from kio.schema.types import TopicName  # noqa: E402
from kio.static.primitive import i16, i32, i32Timedelta  # noqa: E402
from skiff.agent.protocol import encode_request  # noqa: E402
from skiff.fileformat.record_build import build_batch  # noqa: E402
from skiff.fileformat.record_decode import Record  # noqa: E402

from bench.produce_consume import Agent, proc_cpu_s  # noqa: E402


def thread_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds per thread name of process `pid` (the event loop is the main thread,
    named after the process; SQLite commits run in `skiff-metadata_*`)."""
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        name = (
            "loop"
            if task.name == str(pid)
            else stat[stat.index("(") + 1 : stat.rindex(")")].rstrip("_0123456789")
        )
        fields = stat.rsplit(")", 1)[1].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def frames(topic: str, partitions: int, count: int) -> list[bytes]:
    now_ms = int(time.time() * 1000)
    batch = build_batch([Record(0, now_ms, None, b"v" * 100, ())])
    out = []
    for i in range(count):
        body = ProduceRequest(
            transactional_id=None,
            acks=i16(-1),
            timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
            topic_data=(
                TopicProduceData(
                    name=TopicName(topic),
                    partition_data=(PartitionProduceData(index=i32(i % partitions), records=batch),),
                ),
            ),
        )
        out.append(encode_request(body, correlation_id=i, client_id="rdkafka"))
    return out


def read_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        got = sock.recv(n - len(buf))
        if not got:
            raise ConnectionError("agent closed the connection")
        buf += got
    return bytes(buf)


def run(sock: socket.socket, reqs: list[bytes], window: int) -> None:
    sent = done = 0
    while done < len(reqs):
        while sent < len(reqs) and sent - done < window:
            sock.sendall(reqs[sent])
            sent += 1
        (size,) = struct.unpack(">i", read_exact(sock, 4))
        read_exact(sock, size)
        done += 1


def measure(args: argparse.Namespace, env: dict[str, str]) -> tuple[float, float, float, str]:
    """One agent with `env`: (CPU us/request, requests/s, CPU share, CPU us/request by thread)."""
    work = Path(tempfile.mkdtemp(prefix="skiff-reqcpu-"))
    (work / "bucket").mkdir()
    agent = Agent(
        f"file://{work / 'bucket'}", f"sqlite:///{work / 'metadata.db'}", env, work, profile_path=args.profile
    )
    agent.start()
    try:
        admin = AdminClient({"bootstrap.servers": agent.bootstrap})
        for fut in admin.create_topics([NewTopic("reqcpu", args.partitions, 1)]).values():
            fut.result(30)
        warm = frames("reqcpu", args.partitions, args.partitions * 20)
        reqs = frames("reqcpu", args.partitions, args.requests)
        host, port = agent.bootstrap.split(":")
        with socket.create_connection((host, int(port))) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            run(sock, warm, args.window)
            pid = agent.proc.pid  # type: ignore[union-attr]
            cpu0, threads0, t0 = proc_cpu_s(pid), thread_cpu_s(pid), time.perf_counter()
            run(sock, reqs, args.window)
            cpu1, threads1, t1 = proc_cpu_s(pid), thread_cpu_s(pid), time.perf_counter()
        cpu, wall = cpu1 - cpu0, t1 - t0
        per_thread = {
            name: (threads1[name] - threads0.get(name, 0.0)) / args.requests * 1e6
            for name in sorted(threads1)
            if threads1[name] - threads0.get(name, 0.0) > 0
        }
        return (
            cpu / args.requests * 1e6,
            args.requests / wall,
            cpu / wall,
            ", ".join(f"{k} {v:.0f}" for k, v in per_thread.items()),
        )
    finally:
        agent.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=60_000)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--window", type=int, default=2000)
    ap.add_argument("--profile", default="", help="write the agent's cProfile output here (slows it)")
    ap.add_argument(
        "--compare-env",
        action="append",
        default=[],
        help="NAME=VALUE[,NAME=VALUE]: also measure an agent with these variables (PYTHONPATH=<checkout>)",
    )
    ap.add_argument("--rounds", type=int, default=1, help="versions alternate within each round")
    args = ap.parse_args()
    versions = [("this", {})] + [
        (f"env {i + 1}", dict(kv.split("=", 1) for kv in spec.split(",") if kv))
        for i, spec in enumerate(args.compare_env)
    ]
    for name, env in versions[1:]:
        print(f"# {name}: {env}")
    print(
        "| code | requests | partitions | agent CPU us/request | requests/s | agent CPU | us/request by thread |"
    )
    print("|---|---|---|---|---|---|---|")
    for _ in range(args.rounds):
        for name, env in versions:
            us, rate, share, threads = measure(args, env)
            print(
                f"| {name} | {args.requests:,} | {args.partitions} | {us:.0f} | {rate:,.0f} | {share:.0%} | {threads} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
