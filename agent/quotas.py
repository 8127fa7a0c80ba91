"""Client quota math, as Kafka's `ClientQuotaManager` does it (KIP-13, KIP-55, KIP-124, KIP-219).

Pure: no I/O, no asyncio, time passed in (milliseconds of a monotonic clock). The agent's
`agent.quota_cache` feeds it the quotas stored in metadata and the bytes and handler time of
requests, and mutes connections for the throttle times it answers.

Rate. Each client (a *metric key*, below) has a `SampledRate`: Kafka's `Rate` over a
`SampledStat` of `samples` windows of `window_ms` (Kafka's `quota.window.num` = 11 and
`quota.window.size.seconds` = 1). A value is added to the current window (a new one starts
when it is `window_ms` old, reusing the oldest slot); windows older than `samples x
window_ms` are reset when measured. The rate is the sum of the windows over the elapsed
time since the oldest window started, that time taken as at least `samples - 1` whole
windows (so a new client's first bytes are averaged over 10 s, not over the few ms it has
existed).

Throttle. A request's value is recorded first; if the rate is then above the bound, the
throttle time is what brings it back: `(rate - bound) / bound x window size` ms (Kafka's
`QuotaUtils.throttleTime`), bounded by one window for request-time quotas (Kafka's
`ClientRequestQuotaManager`). The response carries it and the connection is muted for it
(KIP-219). A fetch made with no room left is answered empty and its bytes taken back out
of the rate (`unrecord`), as Kafka answers a throttled fetch (agent.quota_cache serves one
that goes over by its last batch). A fetch asks for at most the quota's `room` (what may
still be recorded without going over): Kafka bounds it by `samples - 1` windows of the quota
only, and a consumer reading a backlog then fetches that much, goes over, is answered empty
and throws the bytes away again and again, reaching about half its quota (simulated with
this module); bounded by its room, it reaches the quota.

Resolution. Which quota applies to (user, client-id), for one quota key, is Kafka's order
(`DefaultQuotaCallback`), the most specific entity first:

1. user + client-id          2. user + default client-id    3. user
4. default user + client-id  5. default user + default client-id
6. default user              7. client-id                    8. default client-id

Each level also says who shares the rate (the *metric key*, Kafka's metric tags): at levels
1, 2, 4 and 5 each (user, client-id) has its own; at 3 and 6 all client-ids of a user share
one; at 7 and 8 all users of a client-id share one. No entity: no quota (never throttled).
The user is the principal's name (`User:alice` -> `alice`; unauthenticated clients are
`ANONYMOUS`). Only entities that set the key count (a user with only `consumer_byte_rate`
does not stop produce resolution from going on to client-id quotas), as each Kafka quota
manager keeps its own entities.

Units: byte rates in bytes per second; request time as Kafka's percentage (100 = one
request handler busy for the whole window: nanoseconds x 100 / 1e9 per second).
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from skiff.metadata.security.quota_types import (
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    ClientQuotaEntry,
    QuotaEntity,
)


class QuotaType(enum.StrEnum):
    PRODUCE = "produce"
    FETCH = "fetch"
    REQUEST = "request"


KEY_OF = {
    QuotaType.PRODUCE: PRODUCER_BYTE_RATE,
    QuotaType.FETCH: CONSUMER_BYTE_RATE,
    QuotaType.REQUEST: REQUEST_PERCENTAGE,
}

# Kafka's nanoseconds -> percentage of one thread's second.
PERCENT_PER_NANO = 100.0 / 1e9

# Rates kept per quota type: the least recently used go beyond this many, or after an hour
# unused (Kafka's inactive sensor expiry), whichever first.
MAX_SENSORS = 100_000
SENSOR_EXPIRY_MS = 3_600_000

MetricKey = tuple[str, str]  # (user or "", client-id or ""): who shares one rate


@dataclass(frozen=True)
class WindowConfig:
    samples: int = 11
    window_ms: int = 1_000

    def __post_init__(self) -> None:
        if self.samples < 2 or self.window_ms < 1:
            raise ValueError("a quota window needs at least 2 samples of at least 1 ms")


class SampledRate:
    """Kafka's `Rate` over a `SampledStat` of sums (see the module doc)."""

    __slots__ = ("config", "starts", "values", "current", "last_ms")

    def __init__(self, config: WindowConfig) -> None:
        self.config = config
        self.starts: list[int] = []  # each window's start (Kafka's lastWindowMs)
        self.values: list[float] = []
        self.current = 0
        self.last_ms = 0  # the last record, for expiry

    def record(self, value: float, now_ms: int) -> None:
        if not self.starts:
            self.starts.append(now_ms)
            self.values.append(0.0)
            self.current = 0
        elif now_ms - self.starts[self.current] >= self.config.window_ms:
            self.current = (self.current + 1) % self.config.samples
            if self.current >= len(self.starts):
                self.starts.append(now_ms)
                self.values.append(0.0)
            else:
                self.starts[self.current] = now_ms
                self.values[self.current] = 0.0
        self.values[self.current] += value
        self.last_ms = now_ms

    def _purge(self, now_ms: int) -> None:
        expire_ms = self.config.samples * self.config.window_ms
        for i, start in enumerate(self.starts):
            if now_ms - start >= expire_ms:
                self.starts[i] = now_ms
                self.values[i] = 0.0

    def window_size_ms(self, now_ms: int) -> int:
        """Kafka's `Rate.windowSize`: elapsed since the oldest window, at least samples - 1 windows."""
        self._purge(now_ms)
        oldest = min(self.starts) if self.starts else now_ms
        elapsed = now_ms - oldest
        full = elapsed // self.config.window_ms
        minimum = self.config.samples - 1
        if full < minimum:
            elapsed += (minimum - full) * self.config.window_ms
        return elapsed

    def total(self, now_ms: int) -> float:
        """What the live windows hold."""
        self._purge(now_ms)
        return sum(self.values)

    def rate(self, now_ms: int) -> float:
        """Per second."""
        size_ms = self.window_size_ms(now_ms)
        return sum(self.values) / (size_ms / 1000.0)


def throttle_ms(rate: float, bound: float, window_size_ms: int) -> int:
    """Kafka's `QuotaUtils.throttleTime`: how long until the rate is back at the bound."""
    if rate <= bound:
        return 0
    return round((rate - bound) / bound * window_size_ms)


class QuotaBook:
    """The rates of one quota type, by metric key, and who is throttled until when."""

    def __init__(self, quota_type: QuotaType, config: WindowConfig) -> None:
        self.quota_type = quota_type
        self.config = config
        self.rates: OrderedDict[MetricKey, SampledRate] = OrderedDict()
        self.throttled_until_ms: dict[MetricKey, int] = {}
        # Kafka's max throttle for request-time quotas: one window. Byte rates: none.
        self.max_throttle_ms = config.window_ms if quota_type is QuotaType.REQUEST else None
        self.throttle_ms_total = 0  # for the metrics
        self.throttled_total = 0

    def _rate(self, key: MetricKey, now_ms: int) -> SampledRate:
        rate = self.rates.get(key)
        if rate is None:
            rate = self.rates[key] = SampledRate(self.config)
        else:
            self.rates.move_to_end(key)
        while self.rates:  # the least recently used first
            first_key, first = next(iter(self.rates.items()))
            if len(self.rates) <= MAX_SENSORS and now_ms - first.last_ms < SENSOR_EXPIRY_MS:
                break
            if first is rate:
                break
            del self.rates[first_key]
        return rate

    def record(self, key: MetricKey, bound: float, value: float, now_ms: int) -> int:
        """Add `value`; the throttle time in ms (0: within the quota)."""
        rate = self._rate(key, now_ms)
        rate.record(value, now_ms)
        measured = rate.rate(now_ms)
        if measured <= bound:
            return 0
        throttle = throttle_ms(measured, bound, rate.window_size_ms(now_ms))
        if self.max_throttle_ms is not None:
            throttle = min(throttle, self.max_throttle_ms)
        if throttle > 0:
            self.throttle_ms_total += throttle
            self.throttled_total += 1
            until = now_ms + throttle
            if until > self.throttled_until_ms.get(key, 0):
                self.throttled_until_ms[key] = until
        return throttle

    def room(self, key: MetricKey, bound: float, now_ms: int) -> float:
        """How much may be recorded now without going over the bound (<= 0: none)."""
        rate = self.rates.get(key)
        if rate is None:
            return bound * (self.config.samples - 1) * self.config.window_ms / 1000
        return bound * rate.window_size_ms(now_ms) / 1000 - rate.total(now_ms)

    def unrecord(self, key: MetricKey, value: float, now_ms: int) -> None:
        """Take a recorded value back out (a throttled fetch answered empty)."""
        rate = self.rates.get(key)
        if rate is not None:
            rate.record(-value, now_ms)

    def throttled_clients(self, now_ms: int) -> int:
        """Metric keys throttled at `now_ms` (expired entries are dropped)."""
        expired = [k for k, until in self.throttled_until_ms.items() if until <= now_ms]
        for k in expired:
            del self.throttled_until_ms[k]
        return len(self.throttled_until_ms)


@dataclass(frozen=True)
class Resolution:
    key: MetricKey
    bound: float


def _index(entries: Iterable[ClientQuotaEntry], quota_key: str) -> dict[QuotaEntity, float]:
    return {e.entity: v for e in entries for k, v in e.values if k == quota_key}


def _entity(user: str | None, client_id: str | None, has_user: bool, has_client: bool) -> QuotaEntity:
    parts: list[tuple[str, str | None]] = []
    if has_client:
        parts.append((CLIENT_ID, client_id))
    if has_user:
        parts.append((USER, user))
    return QuotaEntity(tuple(parts))


def _levels(user: str, client_id: str) -> list[tuple[QuotaEntity, MetricKey]]:
    """Kafka's resolution order: (entity looked up, metric key it implies)."""
    both, user_only, client_only = (user, client_id), (user, ""), ("", client_id)
    return [
        (_entity(user, client_id, True, True), both),
        (_entity(user, None, True, True), both),
        (_entity(user, None, True, False), user_only),
        (_entity(None, client_id, True, True), both),
        (_entity(None, None, True, True), both),
        (_entity(None, None, True, False), user_only),
        (_entity(None, client_id, False, True), client_only),
        (_entity(None, None, False, True), client_only),
    ]


class QuotaTable:
    """The quotas of one version, indexed per quota type, with resolutions cached."""

    MAX_CACHED = 10_000

    def __init__(self, entries: Iterable[ClientQuotaEntry] = ()) -> None:
        listed = list(entries)
        self.by_type: Mapping[QuotaType, dict[QuotaEntity, float]] = {
            t: _index(listed, key) for t, key in KEY_OF.items()
        }
        self.empty = not any(self.by_type.values())
        self._cache: dict[tuple[QuotaType, str, str], Resolution | None] = {}

    def has(self, quota_type: QuotaType) -> bool:
        return bool(self.by_type[quota_type])

    def resolve(self, quota_type: QuotaType, user: str, client_id: str) -> Resolution | None:
        """The quota that applies and who shares its rate, or None (unlimited)."""
        index = self.by_type[quota_type]
        if not index:
            return None
        cache_key = (quota_type, user, client_id)
        if cache_key in self._cache:
            return self._cache[cache_key]
        found: Resolution | None = None
        for entity, metric_key in _levels(user, client_id):
            bound = index.get(entity)
            if bound is not None:
                found = Resolution(metric_key, bound)
                break
        if len(self._cache) >= self.MAX_CACHED:
            self._cache.clear()
        self._cache[cache_key] = found
        return found


def user_of(principal: str) -> str:
    """The quota user of a principal (`User:alice` -> `alice`), as Kafka's session user."""
    _, _, name = principal.partition(":")
    return name or principal
