"""Bounded memory per connection (issue 11 item 2): a client that pipelines 64 Fetch requests
of max_bytes 1 GiB against a topic holding data and never reads its socket must not grow the
agent by the sum of their responses; the agent mutes that connection once its byte budget
(`connection_max_inflight_bytes`) is full, and keeps serving everyone else.

The agent runs as a `skiff agent` subprocess; its memory is read from /proc/PID/status:
the peak resident size (VmHWM, reset through /proc/PID/clear_refs just before the attack)
against the resident size at that moment. Bound: the budget (16 MiB here) covers one 8 MiB
response held by the writer plus one fetch being built; with the copies a fetch makes while
building its response, the other client's fetches and the allocator's slack, 128 MiB above
the starting point is ample. Without the budget the 64 responses (8 MiB each) took the agent
about 600 MiB above it."""

from __future__ import annotations

import re
import socket
import struct
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.agents import agent_args
from tests.support.kafka_wire import encode_request, fetch_request

MiB = 1 << 20
RECORD_BYTES = 64 * 1024
RECORDS = 128  # 8 MiB in the topic: every fetch from offset 0 answers all of it
PEAK_BOUND_BYTES = 128 * MiB


def _status_bytes(pid: int, field: str) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    m = re.search(rf"^{field}:\s+(\d+) kB$", text, re.M)
    assert m, f"{field} not in /proc/{pid}/status"
    return int(m.group(1)) * 1024


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        assert chunk, "closed"
        buf += chunk
    return bytes(buf)


def _metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    m = re.search(rf"^{name} ([0-9.e+]+)$", text, re.M)
    assert m, f"{name} not served"
    return float(m.group(1))


def _consume_all(bootstrap: str, topic: str) -> int:
    """Read the whole partition from offset 0 on a fresh connection: the other client."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"other-{uuid.uuid4().hex[:6]}"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = 0
        for _ in range(60):
            for m in c.consume(RECORDS, 1.0):
                assert m.error() is None, m.error()
                got += 1
            if got >= RECORDS:
                break
        return got
    finally:
        c.close()


def test_a_client_that_never_reads_its_fetches_is_muted_and_memory_stays_bounded(
    spawn_skiff: Any, tmp_path: Path
) -> None:
    agent = spawn_skiff(
        *agent_args(f"file://{tmp_path / 'bucket'}", f"sqlite:///{tmp_path / 'metadata.db'}"),
        "--metrics-port",
        "{metrics_port}",
        "--agent-id",
        "memory",
        "--connection-max-inflight-bytes",
        "16MiB",
    )
    metrics_port = agent.metrics_port
    assert metrics_port is not None
    (tmp_path / "bucket").mkdir(exist_ok=True)
    topic = "held"
    admin = AdminClient({"bootstrap.servers": agent.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": agent.bootstrap, "linger.ms": 50, "acks": "all"})
    for i in range(RECORDS):
        producer.produce(topic, bytes([i % 251]) * RECORD_BYTES, partition=0)
    assert producer.flush(60) == 0
    assert _consume_all(agent.bootstrap, topic) == RECORDS  # warm: caches and code paths in place

    pid = agent.proc.pid
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # reset the peak to the current size
    start_rss = _status_bytes(pid, "VmRSS")

    attacker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    attacker.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)  # it never reads anyway
    attacker.settimeout(10)
    try:
        attacker.connect(("127.0.0.1", agent.port))
        request = fetch_request(topic, [(0, 0, 1 << 30)], max_bytes=1 << 30)
        attacker.sendall(b"".join(encode_request(request, correlation_id=i) for i in range(64)))
        # Hold it while another client is served normally, twice over (bounded: each read of
        # the topic ends when all of it has arrived).
        for _ in range(2):
            assert _consume_all(agent.bootstrap, topic) == RECORDS
        peak = _status_bytes(pid, "VmHWM")
        assert peak - start_rss < PEAK_BOUND_BYTES, (
            f"agent grew by {(peak - start_rss) / MiB:.0f} MiB (from {start_rss / MiB:.0f} MiB)"
        )
        print(f"agent peak {(peak - start_rss) / MiB:.0f} MiB above its {start_rss / MiB:.0f} MiB")
        assert _metric(metrics_port, "skiff_connections_muted") == 1
        assert agent.alive()
        # Once the client reads, the connection drains and is read again: all 64 are answered.
        attacker.settimeout(60)
        for i in range(64):
            (size,) = struct.unpack(">i", _recv_exactly(attacker, 4))
            frame = _recv_exactly(attacker, size)
            assert struct.unpack(">i", frame[:4])[0] == i
            # each answer carries most of the topic: up to max_partition_fetch_bytes (8 MiB)
            assert size > RECORDS // 2 * RECORD_BYTES
        assert _metric(metrics_port, "skiff_connections_muted") == 0
    finally:
        attacker.close()
