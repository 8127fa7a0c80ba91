"""Agent CPU per million records produced with broker-side schema validation on and off.

    python bench/produce_schema_validation.py [--records 500000] [--value-bytes 100] [--rounds 2]
                                              [--codecs none,zstd]

Starts `skiff metadata` (SQLite; the schema registry) and one `skiff agent` (file:// bucket)
as separate processes, registers an Avro schema, and creates three topics: `plain` (no
validation), `by-topic` (`confluent.value.schema.validation=true`, TopicNameStrategy) and
`by-record` (the same with RecordNameStrategy). A confluent-kafka producer in this process
sends `--records` records of `--value-bytes` (Confluent's wire format: magic byte, the schema
id, then payload bytes) to each topic in turn, `--rounds` times interleaved, per codec, and
waits for every ack. The agent's process CPU time (from /proc: its event loop and threads)
over each phase gives CPU seconds per million records and per GiB of values; the difference
between a validated topic and `plain` is the validation's cost. The registry cache is warm
after the first batch, so this is the steady state (a cache miss costs one registry call per
subject per 30 s).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient  # noqa: E402

from bench.produce_consume import proc_cpu_s  # noqa: E402
from bench.support import start  # noqa: E402
from tests.support.s3servers import free_port  # noqa: E402

SCHEMA = '{"type":"record","name":"Reading","namespace":"bench","fields":[{"name":"payload","type":"bytes"}]}'
TOPICS = {
    "plain": {},
    "by-topic": {"confluent.value.schema.validation": "true"},
    "by-record": {
        "confluent.value.schema.validation": "true",
        "confluent.value.subject.name.strategy": "RecordNameStrategy",
    },
}


def produce(bootstrap: str, topic: str, value: bytes, records: int, codec: str) -> None:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1 << 20,
            "compression.type": codec,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    failed: list[object] = []

    def report(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    for i in range(records):
        while True:
            try:
                p.produce(topic, value=value, on_delivery=report, partition=0)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10_000 == 0:
            p.poll(0)
    assert p.flush(300) == 0, "records left unacked"
    assert not failed, f"{len(failed)} records refused, first: {failed[0]}"


def setup(workdir: Path) -> tuple[list[subprocess.Popen[bytes]], str, int]:
    """Start metadata and the agent; register the schema under both subjects; create the topics."""
    env = {**os.environ, "SKIFF_FLUSH_INTERVAL_MS": "50", "PYTHONUNBUFFERED": "1"}
    mport, aport = free_port(), free_port()
    metadata = start(
        ["--log-level", "WARNING", "metadata", "--db", f"sqlite:///{workdir / 'm.db'}", "--port", str(mport)],
        mport,
        workdir / "metadata.log",
        env,
    )
    url = f"http://127.0.0.1:{mport}"
    agent_args = ["--log-level", "WARNING", "agent", "--bucket", f"file://{workdir / 'bucket'}"]
    agent_args += ["--metadata", url, "--host", "127.0.0.1", "--port", str(aport)]
    agent = start(agent_args, aport, workdir / "agent.log", env)
    sr = SchemaRegistryClient({"url": url})
    schema_id = sr.register_schema("by-topic-value", Schema(SCHEMA, "AVRO"))
    assert sr.register_schema("bench.Reading", Schema(SCHEMA, "AVRO")) == schema_id
    sr.close()
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{aport}"})
    for name, config in TOPICS.items():
        admin.create_topics([NewTopic(name, 1, 1, config=config)])[name].result(timeout=30)
    return [metadata, agent], f"127.0.0.1:{aport}", schema_id


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--codecs", default="none,zstd")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="skiff-bench-schemas-") as tmp:
        procs, bootstrap, schema_id = setup(Path(tmp))
        agent_pid = procs[1].pid
        value = b"\x00" + schema_id.to_bytes(4, "big") + os.urandom(max(0, args.value_bytes - 5))
        try:
            print(
                f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}"
            )
            print(f"# {args.records} records of {len(value)} bytes per phase, {args.rounds} rounds")
            print("| codec | topic | agent CPU s / 1M records | agent CPU s / GiB of values | records/s |")
            print("|---|---|---|---|---|")
            for codec in args.codecs.split(","):
                totals = {t: [0.0, 0.0] for t in TOPICS}  # CPU s, wall s
                for _ in range(args.rounds):
                    for topic in TOPICS:
                        cpu0, wall0 = proc_cpu_s(agent_pid), time.perf_counter()
                        produce(bootstrap, topic, value, args.records, codec)
                        totals[topic][0] += proc_cpu_s(agent_pid) - cpu0
                        totals[topic][1] += time.perf_counter() - wall0
                n = args.records * args.rounds
                for topic, (cpu_s, wall_s) in totals.items():
                    per_m = cpu_s / n * 1e6
                    per_gib = cpu_s / (n * len(value)) * (1 << 30)
                    print(f"| {codec} | {topic} | {per_m:.2f} | {per_gib:.1f} | {n / wall_s:,.0f} |")
        finally:
            for p in reversed(procs):
                p.terminate()
                p.wait(30)


if __name__ == "__main__":
    main()
