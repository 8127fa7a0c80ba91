"""The console's view of the object-store bill: the requests the cluster's processes reported
(metadata.usage) by role over the overview's window, charted per minute, with their cost and
the storage cost (prices: fileformat.objectstore.pricing, from the environment as everywhere).
Pure: the routes pass the reported usage and the totals in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from skiff.fileformat.objectstore.pricing import HOURS_PER_MONTH, Prices
from skiff.metadata.server.console.views.charts import Point, bar_chart
from skiff.metadata.server.console.views.formats import fmt_clock
from skiff.metadata.server.cost_queries import usage_usd
from skiff.metadata.types import StoreUsage
from skiff.metadata.usage import USAGE_ROLES, UsagePoint, add_usage


@dataclass(frozen=True)
class RoleUsage:
    role: str
    usage: StoreUsage
    puts_per_s: float
    gets_per_s: float
    usd_per_hour: float


@dataclass(frozen=True)
class BillView:
    """The overview's object-store section."""

    window_ms: int
    roles: list[RoleUsage]
    total: RoleUsage
    reported: bool  # any process reported in the window
    stored_bytes: int
    storage_usd_per_month: float
    requests_chart: str  # PUTs per second, per bucket
    gets_chart: str
    cost_chart: str  # the request cost as USD per hour, per bucket
    prices: Prices

    @property
    def usd_per_month(self) -> float:
        return self.total.usd_per_hour * HOURS_PER_MONTH + self.storage_usd_per_month


def _row(role: str, u: StoreUsage, window_ms: int, prices: Prices) -> RoleUsage:
    per_s = 1000 / window_ms
    return RoleUsage(
        role=role,
        usage=u,
        puts_per_s=u.puts * per_s,
        gets_per_s=u.gets * per_s,
        usd_per_hour=usage_usd(u, prices) * 3_600_000 / window_ms,
    )


def bill_view(
    totals: Mapping[str, StoreUsage],
    series: Sequence[UsagePoint],
    bucket_ms: int,
    window_ms: int,
    stored_bytes: int,
    prices: Prices,
) -> BillView:
    rows = [_row(role, totals.get(role, StoreUsage()), window_ms, prices) for role in USAGE_ROLES]
    total = StoreUsage()
    for r in rows:
        total = add_usage(total, r.usage)
    by_slot: dict[int, StoreUsage] = {}
    for p in series:
        by_slot[p.start_ms] = add_usage(by_slot.get(p.start_ms, StoreUsage()), p.usage)
    per_s = 1000 / bucket_ms
    slots = sorted(by_slot)
    puts = [Point(fmt_clock(t), by_slot[t].puts * per_s) for t in slots]
    gets = [Point(fmt_clock(t), by_slot[t].gets * per_s) for t in slots]
    usd = [Point(fmt_clock(t), usage_usd(by_slot[t], prices) * 3_600_000 / bucket_ms) for t in slots]
    return BillView(
        window_ms=window_ms,
        roles=rows,
        total=_row("all", total, window_ms, prices),
        reported=not total.empty,
        stored_bytes=stored_bytes,
        storage_usd_per_month=prices.storage_usd_per_hour(stored_bytes) * HOURS_PER_MONTH,
        requests_chart=bar_chart(puts, title="PUTs per second (all roles)", unit="PUT/s"),
        gets_chart=bar_chart(gets, title="GETs per second (all roles)", unit="GET/s"),
        cost_chart=bar_chart(usd, title="request cost (all roles), USD per hour", unit="USD/h"),
        prices=prices,
    )
