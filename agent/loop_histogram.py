"""Histograms observed on the event loop's hot paths (every Produce and Fetch request).

prometheus-client's `Histogram.observe` costs 2-3 us a call: a check, a lock for the sum,
and a Python loop over the buckets with a lock for the bucket found. At ten thousand small
Produce requests a second that is a few per cent of the agent's CPU (docs/benchmarks.md,
"Produce CPU per small request"). `LoopHistogram` keeps the same series (`_bucket` by `le`
with `+Inf`, `_count`, `_sum`; no `_created`) with a C bisect over the bounds and plain
list increments: about a quarter of the cost.

Threads: observed from one thread (the agent's event loop), read by the metrics server's
thread. Reads take no lock: a scrape may see a bucket count and the sum of one
observation apart, as a scrape between two observations would; each value only grows.
`observe_many` counts a batch of values with one call (a file's committed batches).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Sequence

from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString


class _Child:
    """One label set's counts: a count per bucket (the last one +Inf) and the sum."""

    __slots__ = ("_bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # bisect_left: the first bound >= value, Prometheus's `le` (a value equal to a
        # bound is counted in that bound's bucket); past the last bound, +Inf.
        self.counts[bisect_left(self._bounds, value)] += 1
        self.sum += value

    def observe_many(self, values: Iterable[float]) -> None:
        bounds, counts = self._bounds, self.counts
        total = 0.0
        for value in values:
            counts[bisect_left(bounds, value)] += 1
            total += value
        self.sum += total


class LoopHistogram:
    """A Prometheus histogram family for one observing thread (see the module doc): the
    same `labels(...)`, `observe(...)` and `collect()` as prometheus-client's."""

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str] = (), *, buckets: Sequence[float]
    ) -> None:
        bounds = tuple(float(b) for b in buckets if not math.isinf(b))
        if list(bounds) != sorted(set(bounds)):
            raise ValueError(f"{name}: buckets must be strictly increasing")
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._bounds = bounds
        self._children: dict[tuple[str, ...], _Child] = {}
        self._unlabelled = _Child(bounds) if not self.labelnames else None

    def labels(self, *values: str) -> _Child:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name}: expected labels {self.labelnames}, got {values}")
        key = tuple(str(v) for v in values)
        child = self._children.get(key)
        if child is None:
            child = self._children.setdefault(key, _Child(self._bounds))
        return child

    def observe(self, value: float) -> None:
        self._only().observe(value)

    def observe_many(self, values: Iterable[float]) -> None:
        self._only().observe_many(values)

    def _only(self) -> _Child:
        if self._unlabelled is None:
            raise ValueError(f"{self.name} has labels {self.labelnames}: observe through labels(...)")
        return self._unlabelled

    def collect(self) -> list[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        children = [((), self._unlabelled)] if self._unlabelled is not None else list(self._children.items())
        for label_values, child in children:
            counts = list(child.counts)  # one moment's copy: cumulated below
            cumulative, buckets = 0, []
            for bound, n in zip((*self._bounds, math.inf), counts, strict=True):
                cumulative += n
                buckets.append((_le(bound), cumulative))
            family.add_metric(list(label_values), buckets, child.sum)
        return [family]


def _le(bound: float) -> str:
    """A bound as prometheus-client writes `le` ("0.005", "10.0", "+Inf")."""
    return str(floatToGoString(bound))  # type: ignore[no-untyped-call]
