"""An exactly-once consume-transform-produce worker on confluent-kafka (librdkafka), the Python
twin of the Java client's `txn-transform` (tests/java/SkiffJavaClient.java), run as a process
by tests/e2e/test_txn_eos.py:

    python -m tests.e2e.txn_worker --bootstrap B --input T --output U --group G
        --transactional-id X [--batch N] [--max-records N] [--until-end]
        [--pause-before-commit R] [--timeout-ms MS] [--abort-every 0]

A read_committed consumer in group G with every partition of T assigned by hand (positions
from the group's committed offsets, else the earliest), a transactional producer. One
transaction per `consume()` of at most --batch records: each input record (key K, value V)
becomes one output record (key K, value "T-" + V, headers src-partition and src-offset),
then `send_offsets_to_transaction(next offsets, consumer_group_metadata())` and commit.
With --pause-before-commit R, round R flushes its records, prints "paused" and waits for a
line on stdin before committing. Stops once --max-records are committed, or with --until-end
at the first empty consume once every position is at the partition's high watermark (the
input is not transactional, so that is its end).

JSON lines on stdout, as the Java program's: {"type":"ready"}, {"type":"round","round",
"outcome":"committed","count","committed_total","keys","offsets"}, {"type":"paused","round",
"count"}, {"type":"summary","committed_total","rounds","aborted_rounds"}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def caught_up(consumer: Consumer, tps: list[TopicPartition]) -> bool:
    """Every position is at its partition's high watermark (no position yet: the partition is empty)."""
    for tp in consumer.position(tps):
        high = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=30)[1]
        if (tp.offset if tp.offset >= 0 else 0) < high:
            return False
    return True


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--transactional-id", required=True)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--max-records", type=int, default=sys.maxsize)
    ap.add_argument("--until-end", action="store_true")
    ap.add_argument("--pause-before-commit", type=int, default=-1)
    ap.add_argument("--timeout-ms", type=int, default=120_000)
    ap.add_argument(
        "--abort-every", type=int, default=0, help="only 0 (aborting rounds is the Java program's)"
    )
    args = ap.parse_args()
    if args.abort_every:
        ap.error("--abort-every is not supported here")

    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    producer = Producer(
        {"bootstrap.servers": args.bootstrap, "transactional.id": args.transactional_id, "linger.ms": 5}
    )
    deadline = time.monotonic() + args.timeout_ms / 1000
    producer.init_transactions(60)
    emit(type="ready", transactional_id=args.transactional_id)
    topic = consumer.list_topics(args.input, timeout=30).topics[args.input]
    tps = [TopicPartition(args.input, p) for p in sorted(topic.partitions)]
    consumer.assign(tps)  # positions: the group's committed offsets, else auto.offset.reset
    committed_total = rounds = 0
    try:
        while committed_total < args.max_records:
            if time.monotonic() > deadline:
                print(f"committed {committed_total} records within {args.timeout_ms} ms", file=sys.stderr)
                return 1
            msgs = [m for m in consumer.consume(args.batch, 0.2) if m.error() is None]
            if not msgs:
                if args.until_end and caught_up(consumer, tps):
                    break
                continue
            rounds += 1
            producer.begin_transaction()
            nexts: dict[int, int] = {}
            keys = []
            for m in msgs:
                key, value, partition, offset = m.key(), m.value(), m.partition(), m.offset()
                assert key is not None and value is not None and partition is not None and offset is not None
                src: list[tuple[str, str | bytes | None]] = [
                    ("src-partition", str(partition)),
                    ("src-offset", str(offset)),
                ]
                producer.produce(args.output, key=key, value=b"T-" + value, headers=src)
                nexts[partition] = offset + 1
                keys.append(key.decode())
            offsets = [TopicPartition(args.input, p, o) for p, o in nexts.items()]
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 60)
            if rounds == args.pause_before_commit:
                assert producer.flush(60) == 0
                emit(type="paused", round=rounds, count=len(msgs))
                sys.stdin.readline()
            producer.commit_transaction(60)
            committed_total += len(msgs)
            emit(
                type="round",
                round=rounds,
                outcome="committed",
                count=len(msgs),
                committed_total=committed_total,
                keys=keys,
                offsets={str(p): o for p, o in sorted(nexts.items())},
            )
    finally:
        consumer.close()
    emit(type="summary", committed_total=committed_total, rounds=rounds, aborted_rounds=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
