"""Produce buffer: one file per flush, acks only after commit, commit order, back-pressure.

Tests about when a file is sealed inject a `FakeClock` and advance it (no sleeps); the
rest use the loop's clock with a 20 ms interval, or seal by size, count or flush. Nothing
waits a fixed time: a test waits for the event it needs (a PUT, a commit, an append
parked for space).
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Sequence

import pytest
from skiff.agent.produce_buffer import PendingBatch, ProduceBuffer
from skiff.fileformat.segment import read_footer_from_bytes
from skiff.metadata.errors import KAFKA_STORAGE_ERROR, REQUEST_TIMED_OUT, MetadataUnavailable
from skiff.metadata.types import (
    BatchResult,
    BatchSpec,
    ChunkResult,
    ChunkSpec,
    FileSpec,
    produced_batch_spec,
    stored_batch_result,
)

T1 = uuid.UUID(int=1)


class FakeClock:
    """The buffer's monotonic clock, in seconds, moved only by the test."""

    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        self.now_s += seconds


class FakeStore:
    def __init__(self, clock: FakeClock | None = None) -> None:
        self.objects: dict[str, bytes] = {}
        self.put_seconds: list[float] = []  # how long the next PUTs take, by `clock`
        self.gates: list[asyncio.Event | None] = []  # the next PUTs wait for these
        self.fail_next = 0
        self.clock = clock
        self.put_done = asyncio.Event()

    async def put(self, key: str, data: bytes) -> None:
        gate = self.gates.pop(0) if self.gates else None
        if gate is not None:
            await gate.wait()
        if self.put_seconds:
            assert self.clock is not None
            self.clock.advance(self.put_seconds.pop(0))
        if self.fail_next:
            self.fail_next -= 1
            raise OSError("bucket on fire")
        self.objects[key] = data
        self.put_done.set()


class FakeMetadata:
    """Assigns offsets contiguously per partition, like the real service."""

    def __init__(self) -> None:
        self.hwm: dict[tuple[uuid.UUID, int], int] = {}
        self.commits: list[FileSpec] = []
        self.gate: asyncio.Event | None = None
        self.unavailable = 0
        self.lose_answers = 0  # commits recorded whose answer is then lost
        self.recorded: dict[str, list[ChunkResult]] = {}
        self.called = asyncio.Event()

    async def commit_file(self, file: FileSpec, chunks: Sequence[ChunkSpec]) -> list[ChunkResult]:
        if self.gate is not None:
            await self.gate.wait()
        if self.unavailable:
            self.unavailable -= 1
            raise MetadataUnavailable("down")
        self.commits.append(file)
        self.called.set()
        if file.object_key in self.recorded:  # a repeated commit: what was recorded
            out = self.recorded[file.object_key]
        else:
            out = self._assign(chunks)
            self.recorded[file.object_key] = out
        if self.lose_answers:
            self.lose_answers -= 1
            raise MetadataUnavailable("answer lost")
        return out

    def _assign(self, chunks: Sequence[ChunkSpec]) -> list[ChunkResult]:
        out = []
        for c in chunks:
            results = []
            for b in c.batches:
                base = self.hwm.get((c.topic_id, c.partition), 0)
                self.hwm[(c.topic_id, c.partition)] = base + b.offset_count
                results.append(BatchResult(error_code=0, base_offset=base, log_start_offset=0))
            out.append(ChunkResult(error_code=0, batches=tuple(results)))
        return out


def batch(n: int = 100, records: int = 1) -> PendingBatch:
    return PendingBatch(
        data=b"b" * n, offset_count=records, record_count=records, min_timestamp=1, max_timestamp=2
    )


def make(store: FakeStore, md: FakeMetadata, **kw: int) -> ProduceBuffer:
    args = {"flush_interval_ms": 20, "flush_max_bytes": 10_000, "max_buffered_bytes": 100_000}
    args.update(kw)
    return ProduceBuffer(store=store, metadata=md, agent_id="a1", **args)  # type: ignore[arg-type]


async def test_many_partitions_one_file_one_commit() -> None:
    store, md = FakeStore(), FakeMetadata()
    buf = make(store, md)
    results = await asyncio.gather(*(buf.append(T1, p, [batch()]) for p in range(100)))
    assert all(r[0].error_code == 0 and r[0].base_offset == 0 for r in results)
    assert len(store.objects) == 1 and len(md.commits) == 1
    (data,) = store.objects.values()
    _, entries = read_footer_from_bytes(data)
    assert [e.partition for e in entries] == list(range(100))


async def test_size_triggers_flush_before_interval() -> None:
    store, md = FakeStore(), FakeMetadata()
    buf = make(store, md, flush_interval_ms=60_000, flush_max_bytes=1000)
    r = await asyncio.wait_for(buf.append(T1, 0, [batch(600), batch(600)]), 5)
    assert [x.base_offset for x in r] == [0, 1]
    assert len(store.objects) == 1


async def test_not_acked_before_commit_returns() -> None:
    store, md = FakeStore(), FakeMetadata()
    md.gate = asyncio.Event()
    buf = make(store, md)
    task = asyncio.create_task(buf.append(T1, 0, [batch()]))
    await store.put_done.wait()
    assert len(store.objects) == 1  # the PUT happened ...
    assert not task.done()  # ... but no ack until the commit returns
    md.gate.set()
    assert (await task)[0].error_code == 0


async def test_commits_follow_seal_order_even_when_puts_finish_out_of_order() -> None:
    store, md = FakeStore(), FakeMetadata()
    slow = asyncio.Event()
    store.gates = [slow, None]  # the first file's PUT finishes only after the second's
    buf = make(store, md, flush_max_bytes=100)
    first = asyncio.ensure_future(buf.append_nowait(T1, 0, [batch(100)]))  # sealed: full
    second = asyncio.ensure_future(buf.append_nowait(T1, 0, [batch(100)]))
    futures = [*await first, *await second]
    await store.put_done.wait()  # the second file is stored ...
    assert len(store.objects) == 1 and not md.commits  # ... and waits for the first's commit
    slow.set()
    r1, r2 = await asyncio.gather(*futures)
    assert (r1.base_offset, r2.base_offset) == (0, 1)
    assert len(md.commits) == 2


async def test_put_failure_is_retriable_and_next_file_succeeds() -> None:
    store, md = FakeStore(), FakeMetadata()
    store.fail_next = 1
    buf = make(store, md)
    r = await buf.append(T1, 0, [batch()])
    assert r[0].error_code == KAFKA_STORAGE_ERROR
    r = await buf.append(T1, 0, [batch()])
    assert r[0].error_code == 0 and r[0].base_offset == 0
    assert buf.buffered_bytes == 0


async def test_metadata_unavailable_past_the_retry_time_is_retriable() -> None:
    store, md = FakeStore(), FakeMetadata()
    md.unavailable = 1
    buf = make(store, md, commit_retry_ms=0)
    r = await buf.append(T1, 0, [batch()])
    assert r[0].error_code == REQUEST_TIMED_OUT
    assert (await buf.append(T1, 0, [batch()]))[0].error_code == 0


async def test_an_unanswered_commit_is_retried_and_later_files_wait() -> None:
    """The commit's answer is lost after metadata recorded it: the buffer commits the same
    file again (metadata answers with what it recorded), so the offsets are assigned once,
    the producer is acked with them, and the next file commits only after it."""
    store, md = FakeStore(), FakeMetadata()
    md.lose_answers = 2  # recorded, but the agent hears nothing: twice
    buf = make(store, md, commit_retry_ms=60_000)
    first = asyncio.ensure_future(buf.append(T1, 0, [batch(records=3)]))
    await md.called.wait()  # the first file is sealed and being committed
    second = asyncio.ensure_future(buf.append(T1, 0, [batch(records=2)]))
    r1, r2 = await first, await second
    assert (r1[0].error_code, r1[0].base_offset) == (0, 0)
    assert (r2[0].error_code, r2[0].base_offset) == (0, 3)  # after the first, never before it
    assert md.hwm[(T1, 0)] == 5  # offsets assigned once
    assert buf.commit_retries == 2
    assert [f.object_key for f in md.commits][:3] == [md.commits[0].object_key] * 3


async def test_back_pressure_bounds_buffered_bytes() -> None:
    store, md = FakeStore(), FakeMetadata()
    md.gate = asyncio.Event()
    buf = make(store, md, flush_max_bytes=1000, max_buffered_bytes=2000)
    first = [asyncio.ensure_future(buf.append_nowait(T1, 0, [batch(1000)])) for _ in range(2)]
    first_acks = [f for fs in await asyncio.gather(*first) for f in fs]
    assert buf.buffered_bytes == 2000
    third = asyncio.create_task(buf.append(T1, 0, [batch(1000)]))
    while not buf._budget.waiting:  # the third parks, waiting for space
        await asyncio.sleep(0)
    assert buf.buffered_bytes == 2000  # ... and is not buffered
    md.gate.set()
    results = [[r] for r in await asyncio.gather(*first_acks)] + [await third]
    assert sorted(r[0].base_offset for r in results) == [0, 1, 2]
    assert buf.buffered_bytes == 0


async def test_oversize_batch_alone_is_accepted() -> None:
    store, md = FakeStore(), FakeMetadata()
    buf = make(store, md, flush_max_bytes=1000, max_buffered_bytes=1000)
    r = await asyncio.wait_for(buf.append(T1, 0, [batch(5000)]), 5)
    assert r[0].error_code == 0


async def test_close_flushes_pending() -> None:
    store, md = FakeStore(), FakeMetadata()
    buf = make(store, md, flush_interval_ms=60_000)
    futs = await buf.append_nowait(T1, 0, [batch()])
    await buf.close()
    assert futs[0].result().error_code == 0
    with pytest.raises(RuntimeError):
        await buf.append(T1, 0, [batch()])


async def test_drain_commits_what_is_held_and_later_appends_without_the_interval() -> None:
    store, md = FakeStore(), FakeMetadata()
    buf = make(store, md, flush_interval_ms=3_600_000)
    held = await buf.append_nowait(T1, 0, [batch()])
    await buf.drain()
    assert held[0].result().error_code == 0 and len(md.commits) == 1
    # a request read before the listener stopped appends after the drain began: two
    # appends in one loop iteration still share one file, sealed without the hour's wait
    late = await buf.append_nowait(T1, 0, [batch()])
    late += await buf.append_nowait(T1, 1, [batch()])
    results = await asyncio.gather(*late)
    assert [r.error_code for r in results] == [0, 0] and len(md.commits) == 2


async def test_batch_count_triggers_flush_before_interval() -> None:
    store, md = FakeStore(), FakeMetadata()
    buf = make(store, md, flush_interval_ms=60_000, flush_max_batches=3)
    first = [asyncio.create_task(buf.append(T1, p, [batch()])) for p in range(2)]
    await asyncio.sleep(0)
    assert not store.objects  # two batches: the file stays open
    third = await asyncio.wait_for(buf.append(T1, 2, [batch()]), 5)  # the third seals it
    assert third[0].error_code == 0 and all(t.done() for t in first)
    assert len(store.objects) == 1 and len(md.commits) == 1
    fourth = asyncio.create_task(buf.append(T1, 3, [batch()]))  # opens the next file
    await asyncio.sleep(0)
    assert not fourth.done()
    await buf.flush()
    assert fourth.done() and len(md.commits) == 2


def test_flush_max_batches_must_be_positive() -> None:
    with pytest.raises(ValueError, match="flush batches"):
        make(FakeStore(), FakeMetadata(), flush_max_batches=0)


async def test_acks_go_out_oldest_first_one_chunk_per_loop_iteration() -> None:
    """Arrival order is the reverse of the file's (topic, partition) order here; the oldest
    appends are resolved first, and a chunk at a time: when the first ack's callbacks run,
    only the first chunk is resolved (the loop turned before the rest)."""
    from skiff.agent.produce_buffer import _RESOLVE_CHUNK

    store, md = FakeStore(), FakeMetadata()
    n = 3 * _RESOLVE_CHUNK + 5
    buf = make(store, md, flush_interval_ms=60_000, flush_max_batches=n + 1, flush_max_bytes=100 * n)
    futures = []
    for i in range(n):
        futures += await buf.append_nowait(T1, n - i, [batch()])  # partition n - i: arrival reversed
    order: list[int] = []
    done_at_first_ack: list[int] = []

    def acked(i: int) -> None:
        if not order:
            done_at_first_ack.append(sum(f.done() for f in futures))
        order.append(i)

    for i, f in enumerate(futures):
        f.add_done_callback(lambda _, i=i: acked(i))
    await buf.flush()
    await asyncio.sleep(0)
    assert order == list(range(n))
    assert done_at_first_ack == [_RESOLVE_CHUNK]
    assert all(f.result().base_offset == 0 for f in futures)


class WallClock:
    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def stamped(created_ms: int) -> PendingBatch:
    return PendingBatch(
        data=b"b" * 100, offset_count=1, record_count=1, min_timestamp=created_ms, max_timestamp=created_ms
    )


def open_deadline(buf: ProduceBuffer) -> float:
    """Seconds from the open file's first append to its seal timer."""
    f = buf._open
    assert f is not None and f.timer is not None
    return f.deadline_s - f.opened_s


def leading(store: FakeStore, md: FakeMetadata, wall: WallClock, *, seal_lead_max_ms: int) -> ProduceBuffer:
    """A buffer with the default 250 ms interval, the given lead cap, an injected wall
    clock and the store's fake monotonic clock."""
    return ProduceBuffer(
        store=store,  # type: ignore[arg-type]
        metadata=md,  # type: ignore[arg-type]
        agent_id="a1",
        flush_interval_ms=250,
        seal_lead_max_ms=seal_lead_max_ms,
        wall_clock_ms=wall,
        monotonic_s=store.clock,
    )


async def test_without_a_lead_the_file_seals_exactly_at_the_interval() -> None:
    wall = WallClock()
    buf = leading(FakeStore(FakeClock()), FakeMetadata(), wall, seal_lead_max_ms=0)
    await buf.append_nowait(T1, 0, [stamped(wall.now_ms - 5)])
    assert open_deadline(buf) == pytest.approx(0.250)
    await buf.close()


async def test_the_file_seals_when_the_clock_reaches_its_deadline_and_not_before() -> None:
    clock = FakeClock()
    store, md = FakeStore(clock), FakeMetadata()
    buf = leading(store, md, WallClock(), seal_lead_max_ms=0)
    futures = await buf.append_nowait(T1, 0, [batch()])
    clock.advance(0.249)
    assert not buf.seal_due() and buf._open is not None  # 1 ms early: still open
    futures += await buf.append_nowait(T1, 1, [batch()])  # joins the open file
    clock.advance(0.001)
    assert buf.seal_due()
    results = await asyncio.gather(*futures)
    assert [r.error_code for r in results] == [0, 0] and len(md.commits) == 1
    assert buf.stage_seconds["open"] == pytest.approx(0.250)
    await buf.close()


async def test_the_loops_timer_seals_by_the_injected_clock() -> None:
    """The loop's wakeup fires when it was armed for, but only the injected clock decides:
    behind it, the timer re-arms and the file stays open until the clock gets there."""
    clock = FakeClock()
    store, md = FakeStore(clock), FakeMetadata()
    buf = make(store, md, flush_interval_ms=1)  # the loop's timer: 1 ms
    buf._monotonic_s = clock
    futures = await buf.append_nowait(T1, 0, [batch()])
    first_timer = buf._open.timer if buf._open else None
    while buf._open is not None and buf._open.timer is first_timer:
        await asyncio.sleep(0)  # the loop turns until its timer fired and re-armed
    assert buf._open is not None and not md.commits  # the clock has not moved: still open
    clock.advance(0.001)
    assert (await futures[0]).error_code == 0  # the re-armed timer sealed it
    await buf.close()


async def test_the_client_linger_seals_the_file_earlier_up_to_the_cap() -> None:
    wall = WallClock()
    store, md = FakeStore(FakeClock()), FakeMetadata()
    buf = leading(store, md, wall, seal_lead_max_ms=50)
    await buf.append_nowait(T1, 0, [stamped(wall.now_ms - 5)])  # linger.ms 5
    assert open_deadline(buf) == pytest.approx(0.244, abs=1e-6)  # 5 ms, rounded up to 6
    # A later batch that waited longer in its client moves the seal earlier...
    await buf.append_nowait(T1, 1, [stamped(wall.now_ms - 20)])
    assert open_deadline(buf) < 0.235
    before = open_deadline(buf)
    # ...one that waited less never moves it later, and a replayed old timestamp is capped.
    await buf.append_nowait(T1, 2, [stamped(wall.now_ms)])
    assert open_deadline(buf) == before
    await buf.append_nowait(T1, 3, [stamped(wall.now_ms - 3_600_000)])
    assert open_deadline(buf) >= 0.200 - 1e-6
    await buf.close()


async def test_the_seal_to_commit_time_is_learned_into_the_lead() -> None:
    wall = WallClock()
    store, md = FakeStore(FakeClock()), FakeMetadata()
    buf = leading(store, md, wall, seal_lead_max_ms=50)
    store.put_seconds = [0.030]  # the first file's PUT takes 30 ms
    futures = await buf.append_nowait(T1, 0, [stamped(wall.now_ms)])
    await buf.flush()
    assert futures[0].result().error_code == 0
    assert buf.post_seal_estimate_s == pytest.approx(0.030)
    await buf.append_nowait(T1, 0, [stamped(wall.now_ms)])
    # sealed early by what the first file took from seal to commit (at most the cap)
    assert 0.200 - 1e-6 <= open_deadline(buf) <= 0.220 + 1e-6
    await buf.close()


async def test_under_steady_load_the_lead_costs_no_extra_puts() -> None:
    """Files that run back to back are sealed one whole interval apart whatever the lead
    (the PUT budget: time seals at 1/interval); a file that opens after a pause longer
    than the lead is still sealed early by it."""
    wall = WallClock()
    clock = FakeClock()
    store, md = FakeStore(clock), FakeMetadata()
    buf = leading(store, md, wall, seal_lead_max_ms=50)
    seals: list[float] = []
    for _ in range(5):  # a batch every 10 ms, each having waited 20 ms in its client
        while True:
            await buf.append_nowait(T1, 0, [stamped(wall.now_ms - 20)])
            clock.advance(0.010)
            wall.now_ms += 10
            if buf.seal_due():
                seals.append(clock())
                break
    gaps = [b - a for a, b in zip(seals, seals[1:], strict=False)]
    # 4 PUTs/s, not 1/(250 ms - lead); seals are seen at the 10 ms steps (float sums: +1 step)
    assert len(gaps) == 4 and all(0.250 - 1e-6 <= g <= 0.260 + 1e-6 for g in gaps), gaps
    # After a pause as long as the interval the lead applies in full again.
    clock.advance(0.250)
    wall.now_ms += 250
    await buf.append_nowait(T1, 0, [stamped(wall.now_ms - 20)])
    assert open_deadline(buf) == pytest.approx(0.229, abs=1e-6)  # 20 ms, rounded up to 21
    # A pause shorter than the lead: the file gets what the pause leaves of it.
    await buf.flush()
    clock.advance(0.005)
    wall.now_ms += 5
    await buf.append_nowait(T1, 0, [stamped(wall.now_ms - 20)])
    assert open_deadline(buf) == pytest.approx(0.245, abs=1e-6)
    await buf.close()


def test_produced_batch_spec_equals_the_constructors_and_sets_every_field() -> None:
    args = (40, 120, 5, 4, 1_700_000_000_123, 77, 3, 9, 1, True, "txn-a", 1_700_000_000_001)
    fast = produced_batch_spec(*args)
    slow = BatchSpec(*args[:10], -1, *args[10:])
    assert fast == slow and hash(fast) == hash(slow) and type(fast) is BatchSpec
    assert set(vars(fast)) == {f.name for f in dataclasses.fields(BatchSpec)}
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.byte_offset = 0  # type: ignore[misc]


def test_stored_batch_result_equals_the_constructors_and_sets_every_field() -> None:
    fast = stored_batch_result(42, 1_700_000_000_123, 7)
    slow = BatchResult(0, 42, 1_700_000_000_123, 7)
    assert fast == slow and hash(fast) == hash(slow) and type(fast) is BatchResult
    assert set(vars(fast)) == {f.name for f in dataclasses.fields(BatchResult)}
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.base_offset = 0  # type: ignore[misc]
