"""Retention by time and by size, offset expiry and the garbage collector, over the real
metadata service (SQLite and PostgreSQL, local and HTTP clients) with an injected clock
and a memory:// bucket."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from skiff.compactor import retention as compactor_retention
from skiff.compactor.gc import GarbageCollector, RateLimiter
from skiff.fileformat.objectstore import ObjectInfo, open_store
from skiff.metadata.schema import FILE_DELETING, files
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService
from skiff.metadata.types import DeleteRecordsQuery, GroupOffset
from sqlalchemy import select

from tests.component import test_metadata_service as _ms
from tests.component.test_metadata_service import B, commit, layout
from tests.support.metadata_fixtures import FakeClock

# The metadata service fixtures (`metadata_service`, `md` on both backends with local and
# HTTP clients, the injected `clock`) come from tests/support/metadata_fixtures.py.
anyio_backend = _ms.anyio_backend

pytestmark = pytest.mark.anyio


async def _log_start(md: LocalMetadataClient, topic: str) -> int:
    from skiff.metadata.types import OffsetQuery

    t = (await md.describe_topics([topic]))[topic]
    (a,) = await md.list_offsets([OffsetQuery(t.topic_id, 0, -2)])
    return a.offset


def _file_states(metadata_service: MetadataService) -> dict[str, str]:
    with metadata_service.engine.connect() as conn:
        return {r.object_key: r.state for r in conn.execute(select(files.c.object_key, files.c.state))}


async def test_retention_by_time(md: LocalMetadataClient, clock: FakeClock) -> None:
    t = await md.create_topic("rt-time", 1, {"retention.ms": "1000"})
    now = clock.now
    # Three chunks with max timestamps now-5000, now-1500, now-100.
    for ts in (now - 5000, now - 1500, now - 100):
        await commit(md, [(t.topic_id, 0, [B(2, ts=ts)])])
    results = await md.enforce_retention("rt-time")
    assert [(r.log_start_offset, r.chunks_deleted) for r in results] == [(4, 2)]
    assert await _log_start(md, "rt-time") == 4
    assert await md.enforce_retention("rt-time") == []  # nothing more breached
    clock.advance(1000)
    assert [r.log_start_offset for r in await md.enforce_retention("rt-time")] == [6]
    # Never past the high watermark: the log is empty, log start == high watermark.
    assert await _log_start(md, "rt-time") == 6


async def test_retention_by_size_and_compact_only_untouched(
    md: LocalMetadataClient, clock: FakeClock, metadata_service: MetadataService
) -> None:
    t = await md.create_topic("rt-size", 1, {"retention.bytes": "150", "retention.ms": "-1"})
    c = await md.create_topic("rt-compact", 1, {"cleanup.policy": "compact", "retention.bytes": "1"})
    for _ in range(4):
        await commit(md, [(t.topic_id, 0, [B(1, size=70)]), (c.topic_id, 0, [B(1, size=70)])])
    # Kafka's rule: diff = 280 - 150 = 130; the oldest chunk (70) fits in it, the next does
    # not (60 - 70 < 0): the log never shrinks below retention.bytes.
    (r,) = await md.enforce_retention("rt-size")
    assert (r.log_start_offset, r.chunks_deleted, r.bytes_deleted) == (1, 1, 70)
    assert await md.enforce_retention("rt-compact") == []
    # Files keep the compacted topic's chunks: none became deleting.
    assert FILE_DELETING not in _file_states(metadata_service).values()
    # Once the other topic's chunks are gone too, the files become deleting.
    (d,) = await md.delete_records([DeleteRecordsQuery("rt-compact", 0, 0)])
    assert d.error_code == 44  # POLICY_VIOLATION: compact-only
    await md.alter_topic_configs(
        "rt-compact", {"cleanup.policy": "compact,delete", "retention.ms": "-1"}, [], False
    )
    (r,) = await md.enforce_retention("rt-compact")
    assert r.chunks_deleted == 3  # diff = 279: three chunks of 70 fit, a fourth does not
    # Only the first file lost the chunks of both topics.
    assert sum(s == FILE_DELETING for s in _file_states(metadata_service).values()) == 1


async def test_compactor_driver_covers_all_topics(md: LocalMetadataClient, clock: FakeClock) -> None:
    a = await md.create_topic("drv-a", 1, {"retention.ms": "10"})
    b = await md.create_topic("drv-b", 2, {"retention.ms": "10"})
    await commit(md, [(a.topic_id, 0, [B(3, ts=clock.now)]), (b.topic_id, 1, [B(2, ts=clock.now)])])
    clock.advance(11)
    summary = await compactor_retention.enforce_all(md)
    assert (summary.partitions_changed, summary.chunks_deleted) == (2, 2)
    assert "retention" in await md.last_successes()


async def test_delete_records_metadata(md: LocalMetadataClient) -> None:
    t = await md.create_topic("dr-md", 1, {})
    await commit(md, [(t.topic_id, 0, [B(3)])])
    await commit(md, [(t.topic_id, 0, [B(3)])])
    answers = await md.delete_records(
        [
            DeleteRecordsQuery("dr-md", 0, 4),  # inside the second chunk: the first goes
            DeleteRecordsQuery("dr-md", 0, 7),  # above the high watermark (6)
            DeleteRecordsQuery("dr-md", 1, 0),
            DeleteRecordsQuery("nope", 0, 0),
        ]
    )
    assert [(a.error_code, a.low_watermark) for a in answers] == [(0, 4), (1, -1), (3, -1), (3, -1)]
    (a,) = await md.delete_records([DeleteRecordsQuery("dr-md", 0, -1)])
    assert (a.error_code, a.low_watermark) == (0, 6)


async def test_offset_expiry(md: LocalMetadataClient, clock: FakeClock) -> None:
    await md.create_topic("oe", 1, {})
    week = 7 * 24 * 3_600_000
    await md.commit_offsets("standalone", [GroupOffset("oe", 0, 5)])
    await md.commit_offsets("consumers", [GroupOffset("oe", 0, 7)])
    await md.touch_groups(["consumers"])  # its coordinator saw members
    clock.advance(week - 1)
    await md.touch_groups(["consumers"])
    assert await md.expire_group_offsets(week) == 0
    clock.advance(1)
    # The standalone consumer's commit is a week old; the group was non-empty a moment ago.
    assert await md.expire_group_offsets(week) == 1
    assert await md.groups_with_offsets(None) == ["consumers"]
    clock.advance(week)  # empty (not reported) for a week: all its offsets go
    assert await compactor_retention.expire_offsets(md, week // 60_000) == 1
    assert await md.groups_with_offsets(None) == []


class _MemStoreClock:
    """Wraps a memory store so listed objects look as old as the test wants."""

    def __init__(self, store: object, modified: datetime) -> None:
        self._s = store
        self.modified = modified
        self.deleted: list[str] = []

    def list(self, prefix: str = "") -> object:
        return (ObjectInfo(o.key, o.size, self.modified) for o in self._s.list(prefix))  # type: ignore[attr-defined]

    def delete_many(self, keys: object) -> None:
        keys = list(keys)  # type: ignore[call-overload]
        self.deleted.extend(keys)
        self._s.delete_many(keys)  # type: ignore[attr-defined]

    def put(self, key: str, data: bytes) -> None:
        self._s.put(key, data)  # type: ignore[attr-defined]


async def _no_sleep(_s: float) -> None:
    return None


async def test_gc_deletes_only_unreferenced_files_after_grace(
    md: LocalMetadataClient, clock: FakeClock, metadata_service: MetadataService
) -> None:
    store = _MemStoreClock(open_store(f"memory://gc-{uuid.uuid4().hex}"), datetime.now(UTC))
    t = await md.create_topic("gc", 1, {})
    keys = []
    for _ in range(3):
        f, specs = layout([(t.topic_id, 0, [B(1)])])
        store.put(f.object_key, b"x")
        assert (await md.commit_file(f, specs))[0].error_code == 0
        keys.append(f.object_key)
    (a,) = await md.delete_records([DeleteRecordsQuery("gc", 0, 2)])  # files 0 and 1 lose their chunk
    assert a.low_watermark == 2

    def gc() -> GarbageCollector:
        return GarbageCollector(
            md,
            store,
            grace_ms=60_000,
            claim_ms=30_000,
            wall_ms=clock,
            limiter=RateLimiter(1e9),  # type: ignore[arg-type]
        )

    g1, g2 = gc(), gc()
    assert await g1.collect_once() == 0  # inside the grace period
    clock.advance(60_000)
    # Two collectors: the first claims a batch; the second finds nothing left to claim.
    claimed = await md.claim_deletable_files(g1.token, 1, 60_000, 30_000)
    assert len(claimed) == 1
    assert await g2.collect_once() == 1  # only the other file
    assert await g1.collect_once() == 0  # its own claim is taken only once... and nothing else left
    await md.forget_files(g1.token, [c.file_id for c in claimed])
    assert sorted(store.deleted) == sorted([k for k in keys[:2] if k != claimed[0].object_key])
    states = _file_states(metadata_service)
    assert keys[2] in states and states[keys[2]] == "live"  # the referenced file stays
    assert keys[2] not in store.deleted
    # An expired claim is taken over by another collector.
    clock.advance(30_000)
    assert "gc" in await md.last_successes()


async def test_gc_expired_claim_is_retried(md: LocalMetadataClient, clock: FakeClock) -> None:
    store = _MemStoreClock(open_store(f"memory://gc2-{uuid.uuid4().hex}"), datetime.now(UTC))
    t = await md.create_topic("gc2", 1, {})
    f, specs = layout([(t.topic_id, 0, [B(1)])])
    store.put(f.object_key, b"x")
    await md.commit_file(f, specs)
    await md.delete_records([DeleteRecordsQuery("gc2", 0, -1)])
    clock.advance(60_000)
    crashed = await md.claim_deletable_files("crashed", 10, 60_000, 30_000)
    assert [c.object_key for c in crashed] == [f.object_key]
    g = GarbageCollector(md, store, grace_ms=60_000, wall_ms=clock, limiter=RateLimiter(1e9))  # type: ignore[arg-type]
    assert await g.collect_once() == 0  # still claimed
    clock.advance(30_000)
    assert await g.collect_once() == 1
    assert store.deleted == [f.object_key]
    assert await md.forget_files("crashed", [crashed[0].file_id]) == 0  # not its claim any more


async def test_orphans_removed_after_grace(md: LocalMetadataClient, clock: FakeClock) -> None:
    store = _MemStoreClock(open_store(f"memory://orph-{uuid.uuid4().hex}"), datetime.now(UTC))
    t = await md.create_topic("orph", 1, {})
    f, specs = layout([(t.topic_id, 0, [B(1)])])
    store.put(f.object_key, b"committed")
    await md.commit_file(f, specs)
    store.put("segments/orphan-1.seg", b"never committed")
    wall = clock.now
    store.modified = datetime.fromtimestamp(wall / 1000, tz=UTC)
    g = GarbageCollector(md, store, orphan_grace_ms=3_600_000, wall_ms=lambda: wall, limiter=RateLimiter(1e9))  # type: ignore[arg-type]
    assert await g.collect_orphans() == 0  # too young: may still be committed
    wall += 3_600_000
    assert await g.collect_orphans() == 1
    assert store.deleted == ["segments/orphan-1.seg"]
    assert g.stats.objects_scanned == 4
    assert "orphans" in await md.last_successes()


class _AskSpy:
    """A metadata client that records which keys the orphan scan asks about."""

    def __init__(self, md: LocalMetadataClient) -> None:
        self._md = md
        self.asked: list[str] = []

    async def unknown_object_keys(self, keys: list[str]) -> list[str]:
        self.asked.extend(keys)
        return await self._md.unknown_object_keys(keys)

    def __getattr__(self, name: str) -> object:
        return getattr(self._md, name)


async def test_orphan_scan_never_takes_skiff_objects_for_segments(
    md: LocalMetadataClient, clock: FakeClock
) -> None:
    """Objects under _skiff/ (an agent's readiness probe object, fileformat.objectstore.keys)
    are never asked about as segments; a probe object not rewritten for the orphan grace
    belongs to a gone agent and is deleted, any other _skiff/ object is left alone."""
    from skiff.fileformat.objectstore.keys import readiness_key

    store = _MemStoreClock(open_store(f"memory://skiffkeys-{uuid.uuid4().hex}"), datetime.now(UTC))
    store.put(readiness_key("gone-agent"), b"probe")
    store.put("_skiff/something-else", b"x")
    store.put("segments/orphan-2.seg", b"never committed")
    spy = _AskSpy(md)
    wall = clock.now
    store.modified = datetime.fromtimestamp(wall / 1000, tz=UTC)
    g = GarbageCollector(
        spy, store, orphan_grace_ms=3_600_000, wall_ms=lambda: wall, limiter=RateLimiter(1e9)
    )  # type: ignore[arg-type]
    assert await g.collect_orphans() == 0 and store.deleted == []  # a live agent's probe object: young
    wall += 3_600_000
    assert await g.collect_orphans() == 2
    assert sorted(store.deleted) == sorted([readiness_key("gone-agent"), "segments/orphan-2.seg"])
    assert spy.asked == ["segments/orphan-2.seg"]


async def test_rate_limiter_waits_for_tokens() -> None:
    now = [0.0]
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    rl = RateLimiter(10.0, clock_s=lambda: now[0], sleep=sleep)
    await rl.acquire(10)
    await rl.acquire(5)
    assert slept and abs(sum(slept) - 0.5) < 1e-9
