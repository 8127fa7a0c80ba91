"""agent.loop_histogram.LoopHistogram exports what prometheus-client's Histogram exports for
the same observations (bounds, values on a bound, past the last bound, labels)."""

from __future__ import annotations

import random

import pytest
from prometheus_client import Histogram
from prometheus_client.core import Metric
from skiff.agent.loop_histogram import LoopHistogram

BUCKETS = (0.001, 0.005, 0.25, 1.0, 10.0)


def _samples(families: list[Metric]) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
    return sorted(
        (s.name, tuple(sorted(s.labels.items())), float(f"{s.value:.12g}"))  # sums: addition order
        for f in families
        for s in f.samples
        if not s.name.endswith("_created")
    )


def _values() -> list[float]:
    rng = random.Random(7)
    edge = [0.0, -1.0, *BUCKETS, 10.000001, 1e9]  # on every bound, below and above them all
    return edge + [rng.uniform(0, 12) for _ in range(500)] + [rng.expovariate(100) for _ in range(500)]


def test_unlabelled_matches_prometheus_client() -> None:
    ours = LoopHistogram("x_seconds", "help", buckets=BUCKETS)
    theirs = Histogram("x_seconds", "help", buckets=BUCKETS, registry=None)
    values = _values()
    for v in values[:300]:
        ours.observe(v)
        theirs.observe(v)
    ours.observe_many(values[300:])
    for v in values[300:]:
        theirs.observe(v)
    assert _samples(ours.collect()) == _samples(theirs.collect())
    assert ours.collect()[0].type == "histogram"


def test_labelled_matches_prometheus_client() -> None:
    ours = LoopHistogram("y_seconds", "help", ["acks"], buckets=BUCKETS)
    theirs = Histogram("y_seconds", "help", ["acks"], buckets=BUCKETS, registry=None)
    for i, v in enumerate(_values()):
        label = ("0", "1", "all")[i % 3]
        ours.labels(label).observe(v)
        theirs.labels(label).observe(v)
    assert _samples(ours.collect()) == _samples(theirs.collect())
    assert ours.labels("1") is ours.labels("1")


def test_misuse_is_refused() -> None:
    with pytest.raises(ValueError, match="increasing"):
        LoopHistogram("z", "help", buckets=(1.0, 0.5))
    labelled = LoopHistogram("z", "help", ["a"], buckets=BUCKETS)
    with pytest.raises(ValueError, match="labels"):
        labelled.observe(1.0)
    with pytest.raises(ValueError, match="expected labels"):
        labelled.labels("a", "b")
