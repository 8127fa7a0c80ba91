"""Produce with a Kafka client, then query the topic with Spark SQL straight from the bucket.

Start a playground first (`skiff playground --data-dir ./skiff-data`: Kafka on 9092,
metadata on 9093, bucket file://./skiff-data/bucket), then:

    python examples/spark_query.py --bootstrap localhost:9092 \
        --metadata-url http://localhost:9093 --bucket file://$PWD/skiff-data/bucket

Needs the spark extra (`pip install -e '.[spark]'`) and Java 17.
"""

from __future__ import annotations

import argparse
import json

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", default="localhost:9092")
    ap.add_argument("--metadata-url", default="http://localhost:9093")
    ap.add_argument("--bucket", required=True, help="the bucket URL the agents write to")
    ap.add_argument("--topic", default="orders")
    args = ap.parse_args()

    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    for fut in admin.create_topics([NewTopic(args.topic, 3, 1)]).values():
        try:
            fut.result(30)
        except Exception as exc:  # already there from an earlier run
            print(f"create topic: {exc}")
    producer = Producer({"bootstrap.servers": args.bootstrap, "compression.type": "zstd"})
    for i in range(1000):
        order = {"id": i, "customer": f"c{i % 17}", "amount": (i * 37) % 500 / 10}
        producer.produce(
            args.topic, json.dumps(order).encode(), f"c{i % 17}".encode(), headers=[("source", b"example")]
        )
    producer.flush(30)

    from spark import skiff_session

    spark = skiff_session("skiff-example", "local[2]")
    orders = (
        spark.read.format("skiff")
        .option("metadata.url", args.metadata_url)
        .option("bucket", args.bucket)
        .option("subscribe", args.topic)
        .option("includeHeaders", "true")
        .load()
    )
    orders.createOrReplaceTempView("orders")
    spark.sql(
        """
        SELECT get_json_object(CAST(value AS STRING), '$.customer') AS customer,
               count(*) AS orders,
               round(sum(CAST(get_json_object(CAST(value AS STRING), '$.amount') AS DOUBLE)), 1) AS total
        FROM orders GROUP BY 1 ORDER BY total DESC LIMIT 5
        """
    ).show()
    spark.sql("SELECT partition, min(offset), max(offset), count(*) FROM orders GROUP BY partition").show()
    spark.stop()


if __name__ == "__main__":
    main()
