"""An estimate of what the bucket bills: request and storage prices in USD, and the cost
of a store's request counts (`StatsSnapshot`) at those prices.

Defaults are the public Amazon S3 Standard list prices (us-east-1):

| what | default | environment variable |
|---|---|---|
| PUT, COPY, POST, LIST requests | 0.005 USD per 1,000 | `SKIFF_PRICE_WRITE_REQUESTS_PER_1000_USD` |
| GET, HEAD (and every other read) | 0.0004 USD per 1,000 | `SKIFF_PRICE_READ_REQUESTS_PER_1000_USD` |
| DELETE | free | - |
| storage | 0.023 USD per GB-month (GB = 2^30 bytes, month = 730 h) | `SKIFF_PRICE_STORAGE_GB_MONTH_USD` |

The store's request kinds map to them: `put`, `create_if_absent` (a conditional PUT) and
`list` (one per page of up to 1,000 keys) are write-class; `get`, `get_range`,
`stream_get` and `head` read-class; `delete` (one DeleteObjects per 1,000 keys) is free.
Data transfer is not counted (free within a region). Other stores (GCS, Azure, R2, MinIO)
price differently: set the variables.

`CostRate` turns a growing cost into a cost per hour over a sliding window (the last hour
of samples, taken when asked: at scrape time), with an injected clock.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

GIB = 1 << 30
HOURS_PER_MONTH = 730.0
WRITE_KINDS = frozenset({"put", "create_if_absent", "list"})
READ_KINDS = frozenset({"get", "get_range", "stream_get", "head"})
ENV_WRITE = "SKIFF_PRICE_WRITE_REQUESTS_PER_1000_USD"
ENV_READ = "SKIFF_PRICE_READ_REQUESTS_PER_1000_USD"
ENV_STORAGE = "SKIFF_PRICE_STORAGE_GB_MONTH_USD"


@dataclass(frozen=True)
class Prices:
    write_per_1000_usd: float = 0.005
    read_per_1000_usd: float = 0.0004
    storage_gb_month_usd: float = 0.023

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Prices:
        """The defaults, overridden by the environment variables of the module docstring
        (a value that is not a non-negative number is a ValueError naming the variable)."""
        env = os.environ if env is None else env
        d = cls()
        return cls(
            write_per_1000_usd=_price(env, ENV_WRITE, d.write_per_1000_usd),
            read_per_1000_usd=_price(env, ENV_READ, d.read_per_1000_usd),
            storage_gb_month_usd=_price(env, ENV_STORAGE, d.storage_gb_month_usd),
        )

    def request_usd(self, kind: str, count: int) -> float:
        if kind in WRITE_KINDS:
            return count * self.write_per_1000_usd / 1000
        if kind in READ_KINDS:
            return count * self.read_per_1000_usd / 1000
        return 0.0

    def requests_usd(self, requests: Mapping[str, int]) -> float:
        """The cost of request counts by kind (a `StatsSnapshot.requests`)."""
        return sum(self.request_usd(kind, n) for kind, n in requests.items())

    def storage_usd_per_hour(self, stored_bytes: int) -> float:
        return stored_bytes / GIB * self.storage_gb_month_usd / HOURS_PER_MONTH


def _price(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r}: not a number") from None
    if not value >= 0:  # also refuses NaN
        raise ValueError(f"{name}={raw!r}: not a non-negative price")
    return value


class CostRate:
    """Cost per hour over the last `window_s` of samples (`per_hour(total_usd)` adds one)."""

    MAX_SAMPLES = 256  # bounded whatever the scrape rate: older samples are dropped first

    def __init__(self, clock_s: Callable[[], float], window_s: float = 3600.0) -> None:
        self._clock_s = clock_s
        self._window_s = window_s
        self._samples: deque[tuple[float, float]] = deque(maxlen=self.MAX_SAMPLES)
        self._samples.append((clock_s(), 0.0))  # from the start, when nothing was spent

    def per_hour(self, total_usd: float) -> float:
        now = self._clock_s()
        while len(self._samples) > 1 and now - self._samples[1][0] >= self._window_s:
            self._samples.popleft()  # keep one sample at or before the window's start
        first_t, first_usd = self._samples[0]
        self._samples.append((now, total_usd))
        elapsed = now - first_t
        return (total_usd - first_usd) * 3600.0 / elapsed if elapsed > 0 else 0.0
