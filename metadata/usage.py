"""What the object store is asked, cluster-wide, and consumer lag over time: the two
histories the metadata database keeps for the console and /metrics.

Object-store usage. The metadata service never sees the bucket's requests: the processes
that make them report them. Agents (their own store as role `agent`, an in-process
compaction role's as `compactor`), `skiff compact` (`compactor`) and readers (Spark
executors: `reader`; `skiff inspect`, one operator GET, does not) send what they asked since their last report
(`StoreUsage`, a delta: metadata.wire.usage_report keeps the books on their side), and
`record_usage` adds it into the row of its role and minute: one row per role and minute
whatever the number of processes, so the table is bounded (3 roles x `KEEP_MS` / 60 s),
and a restarted process loses nothing it had reported. Rows older than `KEEP_MS` are
deleted by the report that first sees a new minute. The reporting operations are one per
role, each allowed to the token roles that may speak for it (metadata.wire.operations),
so a reader cannot report an agent's requests.

Lag. The database holds committed offsets and high watermarks now, not their past: the
metadata service samples every group's total lag every `LAG_SAMPLE_INTERVAL_MS`
(metadata.server.lag_sampler) and `record_lag` writes one row per group at the sample's
aligned time (replicas sampling the same interval write each row once: INSERT ... ON
CONFLICT DO NOTHING), at most `MAX_LAG_GROUPS` groups (the most lagging) per sample; rows
older than `KEEP_LAG_MS` are deleted as samples are written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from skiff.metadata.db import read_tx, write_tx
from skiff.metadata.rows import Db, insert_on_conflict
from skiff.metadata.schema import lag_samples, object_store_usage
from skiff.metadata.types import STORE_USAGE_FIELDS, StoreUsage
from sqlalchemy import delete, func, select

MINUTE_MS = 60_000
KEEP_MS = 48 * 3_600_000
USAGE_ROLES = ("agent", "compactor", "reader")
LAG_SAMPLE_INTERVAL_MS = 30_000
KEEP_LAG_MS = 6 * 3_600_000
MAX_LAG_GROUPS = 500


@dataclass(frozen=True)
class UsagePoint:
    """One role's usage summed over [start_ms, start_ms + bucket width)."""

    start_ms: int
    role: str
    usage: StoreUsage


def add_usage(a: StoreUsage, b: StoreUsage) -> StoreUsage:
    return StoreUsage(**{f.name: getattr(a, f.name) + getattr(b, f.name) for f in fields(StoreUsage)})


class UsageHistory:
    """The two histories over one database (see the module docstring)."""

    def __init__(self, db: Db) -> None:
        self._db = db

    # ---------------------------------------------------------------- object-store usage

    def record_usage(self, role: str, usage: StoreUsage) -> None:
        if role not in USAGE_ROLES:
            raise ValueError(f"unknown usage role {role!r}")
        if usage.empty:
            return
        now = self._db.clock()
        minute = now - now % MINUTE_MS
        row = {"role": role, "minute_ms": minute, **{f: getattr(usage, f) for f in STORE_USAGE_FIELDS}}
        with write_tx(self._db.engine) as conn:
            ins = insert_on_conflict(conn, object_store_usage)
            t = object_store_usage.c
            conn.execute(
                ins.on_conflict_do_update(
                    index_elements=[t.role, t.minute_ms],
                    set_={f: t[f] + ins.excluded[f] for f in STORE_USAGE_FIELDS},
                ),
                [row],
            )
            first_of_minute = conn.execute(
                select(func.count()).select_from(object_store_usage).where(t.minute_ms == minute)
            ).scalar_one()
            if first_of_minute == 1:  # the first report of a new minute prunes (cheap: indexed)
                conn.execute(delete(object_store_usage).where(t.minute_ms < now - KEEP_MS))

    def usage_totals(self, since_ms: int) -> dict[str, StoreUsage]:
        """Each role's usage summed over the minutes starting at or after `since_ms`."""
        t = object_store_usage.c
        q = (
            select(t.role, *(func.sum(t[f]) for f in STORE_USAGE_FIELDS))
            .where(t.minute_ms >= since_ms)
            .group_by(t.role)
        )
        with read_tx(self._db.engine) as conn:
            rows = conn.execute(q).all()
        return {r[0]: StoreUsage(*(int(v or 0) for v in r[1:])) for r in rows}

    def usage_series(self, now_ms: int, window_ms: int, bucket_ms: int) -> list[UsagePoint]:
        """Usage per role and bucket over the minutes of the last `window_ms`, in buckets
        aligned to multiples of `bucket_ms` (buckets with no report are absent), oldest
        first; at most 3 x (window / bucket + 1) points."""
        assert bucket_ms >= MINUTE_MS and 0 < window_ms // bucket_ms <= 10_000, (window_ms, bucket_ms)
        t = object_store_usage.c
        slot = (t.minute_ms // bucket_ms).label("slot")
        q = (
            select(slot, t.role, *(func.sum(t[f]) for f in STORE_USAGE_FIELDS))
            .where(t.minute_ms >= now_ms - window_ms, t.minute_ms <= now_ms)
            .group_by(slot, t.role)
            .order_by(slot, t.role)
        )
        with read_tx(self._db.engine) as conn:
            rows = conn.execute(q).all()
        return [
            UsagePoint(int(r[0]) * bucket_ms, r[1], StoreUsage(*(int(v or 0) for v in r[2:]))) for r in rows
        ]

    # ---------------------------------------------------------------- lag

    def record_lag(self, totals: Mapping[str, int]) -> int:
        """One sample of each group's total lag (the `MAX_LAG_GROUPS` most lagging), at the
        current interval's aligned time; returns that time."""
        now = self._db.clock()
        at = now - now % LAG_SAMPLE_INTERVAL_MS
        keep = sorted(totals, key=lambda g: (-totals[g], g))[:MAX_LAG_GROUPS]
        rows = [{"group_id": g, "at_ms": at, "lag": max(0, int(totals[g]))} for g in keep]
        with write_tx(self._db.engine) as conn:
            if rows:
                ins = insert_on_conflict(conn, lag_samples)
                conn.execute(ins.on_conflict_do_nothing(), rows)
            conn.execute(delete(lag_samples).where(lag_samples.c.at_ms < now - KEEP_LAG_MS))
        return at

    def lag_series(self, group_id: str, since_ms: int) -> list[tuple[int, int]]:
        """(sample time, total lag) of `group_id` since `since_ms`, oldest first."""
        t = lag_samples.c
        q = select(t.at_ms, t.lag).where(t.group_id == group_id, t.at_ms >= since_ms).order_by(t.at_ms)
        with read_tx(self._db.engine) as conn:
            return [(int(a), int(v)) for a, v in conn.execute(q)]

    def last_lag_sample_ms(self) -> int | None:
        with read_tx(self._db.engine) as conn:
            at = conn.execute(select(func.max(lag_samples.c.at_ms))).scalar_one()
        return None if at is None else int(at)
