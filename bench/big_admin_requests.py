"""Benchmark: big admin requests and every other client of the agent (issue 19, item 6).

One `skiff metadata` (SQLite file) and one `skiff agent` per code version. On each:

1. CreateTopics of `--topics` topics (1 partition each, timeout 600 s) on one connection:
   its wall time and the error codes it answered;
2. DescribeConfigs of those topics (all configs, synonyms and documentation) on one
   connection, while another connection sends ApiVersions back to back: that connection's
   round trips while the big request is in flight (p50/p99/max), the pings answered, and the
   big request's wall time.

    python bench/big_admin_requests.py --topics 10000 [--compare-env PYTHONPATH=/path/to/old/checkout]

`--compare-env NAME=VALUE[,NAME=VALUE]` runs the same again with those variables set for the
skiff processes (another checkout on PYTHONPATH: the code before the change); this checkout
is always measured first, as `this`.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import socket
import struct
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kio.schema.api_versions.v3.request import ApiVersionsRequest  # noqa: E402
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest  # noqa: E402
from kio.schema.create_topics.v7.response import CreateTopicsResponse  # noqa: E402
from kio.schema.describe_configs.v4.request import (  # noqa: E402
    DescribeConfigsRequest,
    DescribeConfigsResource,
)
from kio.schema.types import TopicName  # noqa: E402
from kio.static.primitive import i8, i16, i32, i32Timedelta  # noqa: E402
from skiff.agent.protocol import decode_response, encode_request  # noqa: E402

from bench.support import pct, start  # noqa: E402
from tests.support.agents import free_port  # noqa: E402

PING = ApiVersionsRequest(client_software_name="ping", client_software_version="1")


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=900)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _recv(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def _frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", _recv(sock, 4))
    return _recv(sock, size)


def _create(port: int, names: list[str]) -> tuple[float, Counter[str]]:
    request = CreateTopicsRequest(
        topics=tuple(
            CreatableTopic(
                name=TopicName(n),
                num_partitions=i32(1),
                replication_factor=i16(1),
                assignments=(),
                configs=(),
            )
            for n in names
        ),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=600)),
        validate_only=False,
    )
    with _connect(port) as sock:
        t0 = time.perf_counter()
        sock.sendall(encode_request(request, 1))
        frame = _frame(sock)
        wall = time.perf_counter() - t0
    _, resp = decode_response(frame, CreateTopicsResponse)
    return wall, Counter(t.error_code.name for t in resp.topics)


def _describe_while_pinging(port: int, names: list[str]) -> tuple[float, list[float]]:
    request = DescribeConfigsRequest(
        resources=tuple(
            DescribeConfigsResource(resource_type=i8(2), resource_name=n, configuration_keys=None)
            for n in names
        ),
        include_synonyms=True,
        include_documentation=True,
    )
    rtts: list[float] = []
    done = threading.Event()

    def pinger() -> None:
        with _connect(port) as small:
            corr = 0
            while not done.is_set():
                corr += 1
                t0 = time.perf_counter()
                small.sendall(encode_request(PING, corr))
                _frame(small)
                if not done.is_set():
                    rtts.append(time.perf_counter() - t0)

    with _connect(port) as large:
        thread = threading.Thread(target=pinger)
        t0 = time.perf_counter()
        large.sendall(encode_request(request, 1))
        thread.start()
        _frame(large)
        wall = time.perf_counter() - t0
        done.set()
        thread.join()
    return wall, rtts


def run(label: str, extra_env: dict[str, str], topics: int, root: Path) -> None:
    env = {**os.environ, "SKIFF_LOG_LEVEL": "WARNING", **extra_env}
    md_port, port = free_port(), free_port()
    procs = []
    try:
        db = f"sqlite:///{root / label / 'metadata.db'}"
        (root / label).mkdir()
        procs.append(
            start(["metadata", "--db", db, "--port", str(md_port)], md_port, root / label / "md.log", env)
        )
        args = [
            "agent",
            "--bucket",
            f"file://{root / label / 'bucket'}",
            "--metadata",
            f"http://127.0.0.1:{md_port}",
        ]
        args += ["--host", "127.0.0.1", "--port", str(port)]
        procs.append(start(args, port, root / label / "agent.log", {**env, "SKIFF_AGENT_ID": "a1"}))
        names = [f"bench-{i:05d}" for i in range(topics)]
        create_s, codes = _create(port, names)
        print(f"{label}: CreateTopics({topics}) {create_s:.1f} s, codes {dict(codes)}", flush=True)
        describe_s, rtts = _describe_while_pinging(port, names)
        ms = [r * 1000 for r in rtts]
        print(
            f"{label}: DescribeConfigs({topics}) {describe_s:.1f} s; other connection's ApiVersions round trip "
            f"while it ran: {len(ms)} pings, p50 {pct(ms, 0.5):.1f} ms, p99 {pct(ms, 0.99):.1f} ms, "
            f"max {max(ms, default=float('nan')):.1f} ms",
            flush=True,
        )
    finally:
        for p in procs:
            p.terminate()
            p.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topics", type=int, default=10_000)
    ap.add_argument("--compare-env", action="append", default=[], help="NAME=VALUE[,NAME=VALUE]")
    args = ap.parse_args()
    print(f"# {platform.python_version()}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        run("this", {}, args.topics, root)
        for i, spec in enumerate(args.compare_env):
            extra = dict(kv.split("=", 1) for kv in spec.split(","))
            run(f"compare{i}", extra, args.topics, root)


if __name__ == "__main__":
    main()
