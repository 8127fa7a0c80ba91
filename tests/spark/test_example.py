"""examples/spark_query.py end to end: its producer half sends orders through a live agent
with confluent-kafka, its query half reads them with Spark SQL from the bucket (the bucket
URL from metadata). It runs in the shared SparkSession: a subprocess would pay Spark's
start-up (~18 s) again."""

from __future__ import annotations

import importlib.util
from collections import defaultdict
from pathlib import Path
from types import ModuleType

import pytest

from tests.spark.conftest import Cluster

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_query.py"


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("spark_query_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_spark_query_example(spark, cluster: Cluster, bootstrap: str) -> None:  # type: ignore[no-untyped-def]
    example = _example()
    orders = example.produce_orders(bootstrap, "example-orders", count=300)
    assert sorted(o["id"] for o in orders) == list(range(300))

    top_customers, per_partition = example.order_queries(spark, cluster.metadata_url, "example-orders")

    totals: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for o in orders:
        totals[o["customer"]] += o["amount"]
        counts[o["customer"]] += 1
    expected = sorted(totals, key=lambda c: (-round(totals[c], 1), c))[:5]
    got = top_customers.collect()
    assert [r.customer for r in got] == expected
    for r in got:
        assert r.orders == counts[r.customer]
        assert r.total == pytest.approx(round(totals[r.customer], 1))

    partitions = per_partition.collect()
    assert sum(r.n for r in partitions) == 300
    assert all(r.first == 0 and r.last == r.n - 1 for r in partitions)  # a new topic: no gaps
    assert {r.partition for r in partitions} <= {0, 1, 2}
