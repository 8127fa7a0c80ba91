"""Produce with a Kafka client, then query the topic with Spark SQL straight from the bucket.

Start a playground first (`skiff playground --data-dir ./skiff-data`: Kafka on 9092,
metadata on 9093, bucket file://./skiff-data/bucket), then:

    python examples/spark_query.py --bootstrap localhost:9092 --metadata-url http://localhost:9093

The bucket URL comes from the metadata service; `--bucket URL` overrides it (for a reader
that reaches the bucket under another URL). Needs the spark extra (`pip install -e
'.[spark]'`) and Java 17.

`produce_orders` and `order_queries` are the two halves, importable on their own (the
test suite runs them against its own agent and SparkSession).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]


def produce_orders(bootstrap: str, topic: str, count: int = 1000) -> list[dict[str, Any]]:
    """Create `topic` (3 partitions) unless it exists and send `count` JSON orders, keyed
    by customer; returns the orders the broker acknowledged."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(topic, 3, 1)]).values():
        try:
            fut.result(30)
        except KafkaException as exc:
            if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":
                raise
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "zstd"})
    acked: list[dict[str, Any]] = []
    failed: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(str(err))
        else:
            acked.append(json.loads(msg.value()))

    for i in range(count):
        customer = f"c{i % 17}"
        order = {"id": i, "customer": customer, "amount": (i * 37) % 500 / 10}
        producer.produce(
            topic,
            json.dumps(order).encode(),
            customer.encode(),
            headers=[("source", b"example")],
            on_delivery=report,
        )
    left = producer.flush(30)
    if left or failed:
        raise SystemExit(f"{left} orders unsent after 30 s, {len(failed)} failed: {failed[:3]}")
    return acked


def order_queries(spark: Any, metadata_url: str, topic: str, bucket: str | None = None) -> tuple[Any, Any]:
    """The topic as a temporary view `orders`, and two SQL queries over it: the five
    customers with the largest totals, and per partition the offsets read."""
    reader = (
        spark.read.format("skiff")
        .option("metadata.url", metadata_url)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
    )
    if bucket:
        reader = reader.option("bucket", bucket)
    reader.load().createOrReplaceTempView("orders")
    top_customers = spark.sql(
        """
        SELECT get_json_object(CAST(value AS STRING), '$.customer') AS customer,
               count(*) AS orders,
               round(sum(CAST(get_json_object(CAST(value AS STRING), '$.amount') AS DOUBLE)), 1) AS total
        FROM orders GROUP BY 1 ORDER BY total DESC, customer LIMIT 5
        """
    )
    per_partition = spark.sql(
        "SELECT partition, min(offset) AS first, max(offset) AS last, count(*) AS n"
        " FROM orders GROUP BY partition ORDER BY partition"
    )
    return top_customers, per_partition


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", default="localhost:9092")
    ap.add_argument("--metadata-url", default="http://localhost:9093")
    ap.add_argument("--bucket", help="the bucket URL (default: the one the metadata service serves)")
    ap.add_argument("--topic", default="orders")
    args = ap.parse_args()

    print(f"produced {len(produce_orders(args.bootstrap, args.topic))} orders to {args.topic}")

    from skiff.spark import skiff_session

    # A local session: skiff_session binds its driver to 127.0.0.1 (docs/spark.md)
    spark = skiff_session("skiff-example", "local[2]")
    try:
        top_customers, per_partition = order_queries(spark, args.metadata_url, args.topic, args.bucket)
        top_customers.show()
        per_partition.show()
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
