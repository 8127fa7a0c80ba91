"""Hierarchical timing wheels on a manual clock: exact expirations across levels, cascading,
O(1) cancel, a delay queue of buckets, Kafka's firing guarantee (property test), and the
asyncio driver on the real clock."""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from skiff.agent.timing_wheel import AsyncTimerDriver, SystemTimer, TimerTask, TimerTaskList, monotonic_ms


class ManualClock:
    """Milliseconds moved by the test; `sleep` (the timer's) moves them too. Shared with the
    purgatory and commit watch tests."""

    def __init__(self, now: int = 0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += round(seconds * 1000)


class Rec(TimerTask):
    """Records (name, clock) into `log` when it runs."""

    __slots__ = ("name", "log", "clock")

    def __init__(
        self, delay_ms: int, name: object, log: list[tuple[object, int]], clock: ManualClock
    ) -> None:
        super().__init__(delay_ms)
        self.name = name
        self.log = log
        self.clock = clock

    def run(self) -> None:
        self.log.append((self.name, self.clock()))


def make(start: int = 0) -> tuple[ManualClock, SystemTimer, list[tuple[object, int]]]:
    clock = ManualClock(start)
    return clock, SystemTimer(now_ms=clock, sleep=clock.sleep), []


LEVEL_DELAYS = [0, 1, 19, 20, 21, 399, 400, 401, 7999, 8000, 8001, 159_999, 160_000, 10**6]


@pytest.mark.parametrize("start", [0, 7, 12_345, 1_000_000_019])
def test_expirations_are_exact_across_levels_stepping_every_ms(start: int) -> None:
    clock, timer, log = make(start)
    for d in LEVEL_DELAYS:
        timer.add(Rec(d, d, log, clock))
    assert log == [(0, start)]  # delay 0 runs inside add()
    assert timer.size == len(LEVEL_DELAYS) - 1
    end = start + 10**6
    while clock.now < end:
        clock.now += 1
        timer.advance_clock()
    assert log == [(d, start + d) for d in LEVEL_DELAYS]
    assert timer.size == 0


@pytest.mark.parametrize("start", [0, 3, 987_654])
def test_expirations_are_exact_when_the_clock_jumps(start: int) -> None:
    """Advance only to just before and exactly at each expiration."""
    clock, timer, log = make(start)
    for d in LEVEL_DELAYS[1:]:
        timer.add(Rec(d, d, log, clock))
    for d in LEVEL_DELAYS[1:]:
        clock.now = start + d - 1
        timer.advance_clock()
        assert (d, start + d - 1) not in log and all(name != d for name, _ in log)
        clock.now = start + d
        assert timer.advance_clock()
        assert log[-1] == (d, start + d)
    assert [name for name, _ in log] == LEVEL_DELAYS[1:]


def test_one_late_advance_fires_everything_due_in_expiration_order() -> None:
    clock, timer, log = make(5)
    rng = random.Random(1)
    delays = [rng.randrange(1, 100_000) for _ in range(2000)]
    for i, d in enumerate(delays):
        timer.add(Rec(d, i, log, clock))
    clock.now += 50_000
    timer.advance_clock()
    fired = [delays[i] for i, _ in log if isinstance(i, int)]
    assert fired == sorted(d for d in delays if d <= 50_000)
    clock.now += 50_000
    timer.advance_clock()
    ids = [i for i, _ in log if isinstance(i, int)]
    assert sorted(ids) == list(range(2000))
    assert [delays[i] for i in ids] == sorted(delays)  # stable across the two advances


def test_overflow_wheels_are_created_on_demand_with_the_lower_interval_as_tick() -> None:
    clock, timer, log = make()
    assert timer.wheel.overflow_wheel is None
    timer.add(Rec(19, "a", log, clock))
    assert timer.wheel.overflow_wheel is None
    timer.add(Rec(20, "b", log, clock))
    assert [w.tick_ms for w in timer.wheel.levels()] == [1, 20]
    timer.add(Rec(10**6, "c", log, clock))
    levels = timer.wheel.levels()
    assert [(w.tick_ms, w.interval_ms) for w in levels] == [
        (1, 20),
        (20, 400),
        (400, 8000),
        (8000, 160_000),
        (160_000, 3_200_000),
    ]


def level_of(timer: SystemTimer, task: TimerTask) -> int:
    for n, wheel in enumerate(timer.wheel.levels()):
        if task.bucket is not None and any(task.bucket is b for b in wheel.buckets):
            return n
    raise AssertionError("task not in any wheel")


def test_cascade_from_overflow_wheels_down_to_the_lowest() -> None:
    clock, timer, log = make()
    task = Rec(7999, "t", log, clock)
    timer.add(task)
    assert level_of(timer, task) == 2  # 400 ms ticks: bucket [7600, 8000)
    assert task.bucket is not None and task.bucket.expiration_ms == 7600
    clock.now = 7599
    timer.advance_clock()
    assert level_of(timer, task) == 2
    clock.now = 7600
    timer.advance_clock()
    assert level_of(timer, task) == 1  # 20 ms ticks: bucket [7980, 8000)
    assert task.bucket is not None and task.bucket.expiration_ms == 7980
    clock.now = 7980
    timer.advance_clock()
    assert level_of(timer, task) == 0
    assert task.bucket is not None and task.bucket.expiration_ms == 7999
    clock.now = 7998
    timer.advance_clock()
    assert log == []
    clock.now = 7999
    timer.advance_clock()
    assert log == [("t", 7999)]
    assert task.bucket is None


def test_cancel_unlinks_the_entry_in_constant_time() -> None:
    clock, timer, log = make()
    a, b, c = (Rec(100, n, log, clock) for n in "abc")
    for t in (a, b, c):
        timer.add(t)
    bucket = b.bucket
    assert isinstance(bucket, TimerTaskList)
    assert a.bucket is bucket and c.bucket is bucket
    assert len(bucket) == 3 and timer.size == 3
    assert b.cancel() is True
    # Unlinked: the neighbours now point at each other; counts dropped by one.
    assert a._next is c and c._prev is a
    assert b.bucket is None
    assert list(bucket) == [a, c]
    assert len(bucket) == 2 and timer.size == 2
    assert b.cancel() is False
    bucket.remove(c)
    assert list(bucket) == [a] and timer.size == 1
    clock.now = 100
    timer.advance_clock()
    assert log == [("a", 100)]


def test_flush_unlinks_every_task_and_resets_the_bucket() -> None:
    clock, timer, log = make()
    tasks = [Rec(100, i, log, clock) for i in range(3)]
    for t in tasks:
        timer.add(t)
    bucket = tasks[0].bucket
    assert bucket is not None and bucket.expiration_ms == 100
    seen: list[TimerTask] = []

    def f(task: TimerTask) -> None:
        seen.append(task)
        tasks[2].cancel()  # a task still in the list: it is then not passed on

    bucket.flush(f)
    assert seen == tasks[:2] and len(bucket) == 0 and timer.size == 0
    assert bucket.expiration_ms == -1 and all(t.bucket is None for t in tasks)


def test_cancel_cost_does_not_depend_on_the_bucket_population() -> None:
    """Cancel touches only the entry and its two neighbours: cancelling the middle task
    of 100,000 in one bucket leaves every other link untouched."""
    clock, timer, log = make()
    tasks = [Rec(50, i, log, clock) for i in range(100_000)]
    for t in tasks:
        timer.add(t)
    bucket = tasks[0].bucket
    assert bucket is not None and len(bucket) == 100_000
    mid = tasks[50_000]
    before, after = tasks[49_999], tasks[50_001]
    links = [(t._prev, t._next) for t in tasks[:49_999] + tasks[50_002:]]
    mid.cancel()
    assert before._next is after and after._prev is before
    assert links == [(t._prev, t._next) for t in tasks[:49_999] + tasks[50_002:]]
    assert len(bucket) == 99_999


def test_delay_queue_holds_buckets_not_tasks() -> None:
    clock, timer, log = make()
    for i in range(1000):
        timer.add(Rec(5, i, log, clock))
    assert timer.queued_buckets == 1 and timer.size == 1000
    for d in (6, 7, 8):
        timer.add(Rec(d, d, log, clock))
    assert timer.queued_buckets == 4
    # 300 and 310 share a 20 ms bucket of the second level: still one entry.
    timer.add(Rec(300, "x", log, clock))
    timer.add(Rec(310, "y", log, clock))
    assert timer.queued_buckets == 5
    assert timer.next_expiration_ms() == 5
    clock.now = 8
    timer.advance_clock()
    assert timer.queued_buckets == 1 and timer.next_expiration_ms() == 300
    # The lowest-level buckets are reused for the next round and enqueued again.
    timer.add(Rec(17, "z", log, clock))  # expires at 25: bucket index 5 again
    assert timer.queued_buckets == 2 and timer.next_expiration_ms() == 25


def test_adding_a_scheduled_task_reschedules_it() -> None:
    clock, timer, log = make()
    t = Rec(10, "t", log, clock)
    timer.add(t)
    clock.now = 5
    t.delay_ms = 100
    timer.add(t)
    assert timer.size == 1
    clock.now = 10
    timer.advance_clock()
    assert log == []
    clock.now = 105
    timer.advance_clock()
    assert log == [("t", 105)]


def test_negative_and_zero_delays_run_at_once() -> None:
    clock, timer, log = make(1000)
    timer.add(Rec(0, "zero", log, clock))
    timer.add(Rec(-5, "neg", log, clock))
    assert log == [("zero", 1000), ("neg", 1000)] and timer.size == 0


def test_advance_clock_waits_up_to_its_timeout_with_the_injected_sleep() -> None:
    clock, timer, log = make()
    assert timer.advance_clock() is False
    assert timer.advance_clock(50) is False and clock.now == 50  # nothing queued
    timer.add(Rec(30, "t", log, clock))  # due at 80
    assert timer.advance_clock(10) is False and clock.now == 60
    assert timer.advance_clock(200) is True  # sleeps only until the bucket is due
    assert clock.now == 80 and log == [("t", 80)]


def test_a_failing_task_does_not_stop_the_others() -> None:
    clock, timer, log = make()

    class Boom(TimerTask):
        def run(self) -> None:
            raise RuntimeError("boom")

    timer.add(Rec(3, "before", log, clock))
    timer.add(Boom(3))
    timer.add(Rec(3, "after", log, clock))
    timer.add(Boom(0))  # runs inside add(); logged, not raised
    clock.now = 3
    assert timer.advance_clock()
    assert log == [("before", 3), ("after", 3)] and timer.size == 0


def test_tasks_may_add_and_cancel_tasks_while_running() -> None:
    clock, timer, log = make()
    victim = Rec(10, "victim", log, clock)

    class Chain(TimerTask):
        def run(self) -> None:
            log.append(("chain", clock()))
            victim.cancel()  # same bucket, not yet run
            timer.add(Rec(0, "now", log, clock))
            timer.add(Rec(25, "later", log, clock))
            assert timer.advance_clock() is False  # re-entrant call: ignored

    timer.add(Chain(10))
    timer.add(victim)
    clock.now = 10
    timer.advance_clock()
    assert log == [("chain", 10), ("now", 10)]
    clock.now = 35
    timer.advance_clock()
    assert log[-1] == ("later", 35) and timer.size == 0


@st.composite
def schedules(draw: st.DrawFn) -> tuple[int, list[tuple[str, int]]]:
    start = draw(st.integers(0, 10**9))
    delay = st.one_of(st.integers(-2, 25), st.integers(0, 1000), st.integers(0, 10**6))
    step = st.one_of(st.integers(0, 25), st.integers(0, 2000), st.integers(0, 10**6))
    ops = draw(
        st.lists(
            st.one_of(
                st.tuples(st.just("add"), delay),
                st.tuples(st.just("advance"), step),  # move the clock, then advance_clock()
                st.tuples(st.just("move"), step),  # move the clock only
                st.tuples(st.just("cancel"), st.integers(0, 10**6)),
            ),
            max_size=120,
        )
    )
    return start, ops


@settings(max_examples=300, deadline=None)
@given(schedules())
def test_every_task_fires_exactly_once_at_the_first_advance_at_or_after_its_expiration(
    schedule: tuple[int, list[tuple[str, int]]],
) -> None:
    start, ops = schedule
    clock, timer, _ = make(start)
    fired: dict[int, list[tuple[int, int]]] = {}  # task -> [(advance call, clock)]
    call = [0]  # index of the advance_clock() call in progress; -1 inside add()

    class T(TimerTask):
        __slots__ = ("i",)

        def __init__(self, delay_ms: int, i: int) -> None:
            super().__init__(delay_ms)
            self.i = i

        def run(self) -> None:
            fired.setdefault(self.i, []).append((call[0], clock()))

    tasks: list[T] = []
    added_at: list[int] = []  # clock at add
    added_call: list[int] = []  # advance calls made before the add
    cancelled: set[int] = set()
    advances: list[int] = []  # clock at each advance_clock() call

    def advance() -> None:
        call[0] = len(advances)
        advances.append(clock())
        timer.advance_clock()

    for kind, n in ops:
        if kind == "add":
            t = T(n, len(tasks))
            tasks.append(t)
            added_at.append(clock())
            added_call.append(len(advances))
            call[0] = -1
            timer.add(t)
        elif kind in ("advance", "move"):
            clock.now += n
            if kind == "advance":
                advance()
        elif tasks:
            i = n % len(tasks)
            if tasks[i].cancel():
                cancelled.add(i)
    clock.now += 2 * 10**6 + 1
    advance()

    assert timer.size == 0
    for i, t in enumerate(tasks):
        expiration = added_at[i] + t.delay_ms
        if i in cancelled:
            assert i not in fired
            continue
        assert len(fired.get(i, [])) == 1, f"task {i} fired {fired.get(i)}"
        ((at_call, at_clock),) = fired[i]
        assert at_clock >= expiration, "fired before its expiration"
        if at_call == -1:
            # Inside add(): only a task that was already due.
            assert expiration <= added_at[i]
        else:
            # At the first advance_clock() after the add whose clock reads >= expiration.
            first = next(k for k in range(added_call[i], len(advances)) if advances[k] >= expiration)
            assert at_call == first


async def test_asyncio_driver_fires_a_50ms_task_not_before_its_expiration() -> None:
    reads: list[int] = []

    def now_ms() -> int:
        reads.append(monotonic_ms())
        return reads[-1]

    timer = SystemTimer(now_ms=now_ms)
    driver = AsyncTimerDriver(timer, max_wait_ms=None)
    driver.start()
    done = asyncio.get_running_loop().create_future()

    class Fire(TimerTask):
        def run(self) -> None:
            done.set_result(now_ms())

    task = Fire(50)
    timer.add(task)
    fired_at = await asyncio.wait_for(done, 10)
    assert fired_at >= task.expiration_ms
    await driver.stop()
    assert not driver.running


async def test_asyncio_driver_wakes_for_an_earlier_bucket() -> None:
    timer = SystemTimer()
    driver = AsyncTimerDriver(timer, max_wait_ms=None)
    driver.start()
    loop = asyncio.get_running_loop()
    order: list[str] = []
    done = loop.create_future()

    class Fire(TimerTask):
        __slots__ = ("name",)

        def __init__(self, delay_ms: int, name: str) -> None:
            super().__init__(delay_ms)
            self.name = name

        def run(self) -> None:
            order.append(self.name)
            if self.name == "soon":
                done.set_result(monotonic_ms())

    far = Fire(60_000, "far")
    timer.add(far)
    await asyncio.sleep(0.01)  # the driver now sleeps for the far bucket (no max wait)
    soon = Fire(30, "soon")
    timer.add(soon)
    fired_at = await asyncio.wait_for(done, 10)
    assert fired_at >= soon.expiration_ms
    assert order == ["soon"]
    far.cancel()
    await driver.stop()
