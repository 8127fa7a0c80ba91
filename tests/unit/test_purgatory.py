"""The purgatory on a manual clock: watch/complete/expire exactly once, completed
operations leave the timer at once, purge of completed watchers, re-entrant callbacks,
completions from another thread through the loop, and the asyncio driver."""

from __future__ import annotations

import asyncio
import threading

from hypothesis import given, settings
from hypothesis import strategies as st
from skiff.agent.purgatory import DelayedOperation, DelayedOperationPurgatory
from skiff.agent.timing_wheel import SystemTimer, monotonic_ms

from tests.unit.test_timing_wheel import ManualClock


class Op(DelayedOperation):
    """Completes when `ready`; `kafka_style` ops call force_complete() in try_complete()."""

    __slots__ = ("ready", "kafka_style", "completions", "expirations", "tries", "hook")

    def __init__(self, delay_ms: int, *, ready: bool = False, kafka_style: bool = False) -> None:
        super().__init__(delay_ms)
        self.ready = ready
        self.kafka_style = kafka_style
        self.completions = 0
        self.expirations = 0
        self.tries = 0
        self.hook: object = None

    def try_complete(self) -> bool:
        self.tries += 1
        if not self.ready:
            return False
        return self.force_complete() if self.kafka_style else True

    def on_complete(self) -> None:
        self.completions += 1
        if callable(self.hook):
            self.hook()

    def on_expiration(self) -> None:
        self.expirations += 1


def make(purge_interval: int = 1000) -> tuple[ManualClock, DelayedOperationPurgatory[Op]]:
    clock = ManualClock(1000)
    timer = SystemTimer(now_ms=clock, sleep=clock.sleep)
    return clock, DelayedOperationPurgatory("test", timer=timer, purge_interval=purge_interval)


def test_an_operation_whose_condition_holds_completes_without_being_watched() -> None:
    _, p = make()
    for style in (False, True):
        op = Op(100, ready=True, kafka_style=style)
        assert p.try_complete_else_watch(op, ["a"]) is True
        assert op.is_completed and op.completions == 1 and op.expirations == 0
    assert p.watched == 0 and p.delayed == 0 and p.watch_keys == 0


def test_watch_then_complete_by_condition_leaves_the_timer_at_once() -> None:
    clock, p = make()
    op = Op(100)
    assert p.try_complete_else_watch(op, ["a", "b"]) is False
    assert op.tries == 1  # one check: nothing can slip in between check and watch
    assert p.watched == 2 and p.delayed == 1 and p.watch_keys == 2
    assert p.check_and_complete("a") == 0
    op.ready = True
    assert p.check_and_complete("a") == 1
    assert op.completions == 1 and op.expirations == 0
    assert p.delayed == 0 and op.bucket is None  # cancelled in the timer at once
    assert p.watchers_for("a") == [] and p.watch_keys == 1  # "a" dropped, "b" not yet
    assert p.check_and_complete("b") == 0  # already completed: just dropped
    assert p.watch_keys == 0 and p.watched == 0
    clock.now += 1000
    p.advance_clock()
    assert op.expirations == 0 and op.completions == 1


def test_an_operation_expires_exactly_at_its_timeout() -> None:
    clock, p = make()
    op = Op(250)
    p.try_complete_else_watch(op, ["a"])
    clock.now += 249
    p.advance_clock()
    assert not op.is_completed
    clock.now += 1
    assert p.advance_clock()
    assert op.completions == 1 and op.expirations == 1 and p.delayed == 0
    op.ready = True
    assert p.check_and_complete("a") == 0
    assert op.completions == 1


def test_zero_delay_expires_inside_try_complete_else_watch() -> None:
    _, p = make()
    op = Op(0)
    assert p.try_complete_else_watch(op, ["a"]) is False
    assert op.completions == 1 and op.expirations == 1 and p.delayed == 0


def test_condition_and_timeout_at_the_same_instant_complete_once() -> None:
    # Condition first, then the timer at the same millisecond.
    clock, p = make()
    op = Op(50)
    p.try_complete_else_watch(op, ["k"])
    clock.now += 50
    op.ready = True
    assert p.check_and_complete("k") == 1
    p.advance_clock()
    assert (op.completions, op.expirations) == (1, 0)
    # Timer first, then the condition at the same millisecond.
    op2 = Op(50)
    p.try_complete_else_watch(op2, ["k"])
    clock.now += 50
    assert p.advance_clock()
    op2.ready = True
    assert p.check_and_complete("k") == 0
    assert (op2.completions, op2.expirations) == (1, 1)


def test_check_and_complete_twice_and_force_complete_twice() -> None:
    _, p = make()
    ops = [Op(100, kafka_style=i % 2 == 0) for i in range(4)]
    for op in ops:
        p.try_complete_else_watch(op, ["k"])
    for op in ops[:3]:
        op.ready = True
    assert p.check_and_complete("k") == 3
    assert p.check_and_complete("k") == 0
    assert [op.completions for op in ops] == [1, 1, 1, 0]
    assert ops[0].force_complete() is False
    assert ops[3].force_complete() is True and ops[3].force_complete() is False
    assert [op.completions for op in ops] == [1, 1, 1, 1]
    assert all(op.expirations == 0 for op in ops) and p.delayed == 0


def test_purge_runs_when_completed_but_watched_operations_pass_the_interval() -> None:
    clock, p = make(purge_interval=10)
    ops = [Op(1000) for _ in range(30)]
    for op in ops:
        p.try_complete_else_watch(op, ["a", "b"])
    for op in ops[:8]:
        op.ready = True
    assert p.check_and_complete("a") == 8
    # "b" still holds the 8 completed ones; 8 <= 10: no purge yet.
    p.advance_clock()
    assert len(p.watchers_for("b")) == 30 and p.watched == 22 + 30
    for op in ops[8:25]:
        op.force_complete()  # e.g. from elsewhere: both lists keep them
    assert p.watched == 22 + 30 and p.delayed == 5
    p.advance_clock()  # estimate 30 - delayed 5 = 25 > 10: purge
    assert p.watchers_for("a") == ops[25:] and p.watchers_for("b") == ops[25:]
    assert p.watched == 10
    # Operations completed at once or never watched do not count toward the estimate.
    for op in ops[25:]:
        op.force_complete()
    p.advance_clock()  # estimate 5 - delayed 0 = 5 <= 10: no purge
    assert p.watched == 10
    assert p.purge_completed() == 10 and p.watch_keys == 0


def test_default_purge_interval_is_kafkas() -> None:
    assert DelayedOperationPurgatory("x").purge_interval == 1000


def test_callbacks_may_reenter_the_purgatory_on_the_same_key() -> None:
    _, p = make()
    first, second, late = Op(100), Op(100), Op(100)
    for op in (first, second):
        p.try_complete_else_watch(op, ["k"])

    def on_first_complete() -> None:
        # Makes `second` ready and checks the same key while the outer scan runs,
        # then watches a new operation on that key.
        second.ready = True
        assert p.check_and_complete("k") == 1
        p.try_complete_else_watch(late, ["k"])

    first.hook = on_first_complete
    first.ready = True
    assert p.check_and_complete("k") == 1
    assert first.completions == 1 and second.completions == 1
    assert p.watchers_for("k") == [late] and p.delayed == 1
    late.ready = True
    assert p.check_and_complete("k") == 1 and p.watch_keys == 0


def test_cancel_for_key_removes_operations_without_completing_them() -> None:
    clock, p = make()
    a, b = Op(100), Op(100)
    p.try_complete_else_watch(a, ["gone", "x"])
    p.try_complete_else_watch(b, ["gone"])
    b.force_complete()
    assert p.cancel_for_key("gone") == [a]
    assert p.delayed == 0 and not a.is_completed and p.watchers_for("gone") == []
    clock.now += 200
    p.advance_clock()
    assert a.completions == 0 and a.expirations == 0


def test_an_operation_without_keys_only_times_out() -> None:
    clock, p = make()
    op = Op(10)
    assert p.try_complete_else_watch(op, []) is False
    assert p.watched == 0 and p.delayed == 1
    clock.now += 10
    p.advance_clock()
    assert op.expirations == 1


@st.composite
def scripts(draw: st.DrawFn) -> tuple[list[int], list[tuple[str, int]]]:
    delays = draw(st.lists(st.integers(0, 600), min_size=1, max_size=30))
    events = draw(
        st.lists(
            st.one_of(
                st.tuples(st.just("ready"), st.integers(0, 29)),  # condition becomes true
                st.tuples(st.just("check"), st.integers(0, 2)),  # check_and_complete(key)
                st.tuples(st.just("force"), st.integers(0, 29)),
                st.tuples(st.just("tick"), st.integers(0, 300)),
            ),
            max_size=80,
        )
    )
    return delays, events


@settings(max_examples=200, deadline=None)
@given(scripts(), st.integers(1, 5))
def test_every_operation_completes_exactly_once(
    script: tuple[list[int], list[tuple[str, int]]], purge: int
) -> None:
    delays, events = script
    clock, p = make(purge_interval=purge)
    ops = [Op(d, kafka_style=i % 2 == 0) for i, d in enumerate(delays)]
    start = clock.now
    for i, op in enumerate(ops):
        p.try_complete_else_watch(op, [i % 3, (i + 1) % 3])
    forced: set[int] = set()
    for kind, n in events:
        if kind == "ready":
            ops[n % len(ops)].ready = True
        elif kind == "check":
            p.check_and_complete(n)
        elif kind == "force":
            if ops[n % len(ops)].force_complete():
                forced.add(n % len(ops))
        else:
            clock.now += n
            p.advance_clock()
            # Nothing still pending has passed its deadline.
            assert all(op.is_completed or clock.now < start + op.delay_ms for op in ops)
    clock.now += 1000
    p.advance_clock()
    for i, op in enumerate(ops):
        assert op.completions == 1
        assert op.expirations <= 1
        if op.expirations:
            assert i not in forced
    assert p.delayed == 0


async def test_completions_from_another_thread_go_through_the_loop() -> None:
    """The documented pattern: a thread hands completions to the loop in batches."""
    loop = asyncio.get_running_loop()
    p: DelayedOperationPurgatory[Op] = DelayedOperationPurgatory("threads")
    p.start()
    ops = [Op(60_000) for _ in range(1000)]
    for op in ops:
        p.try_complete_else_watch(op, ["k"])
    done = loop.create_future()

    def complete_batch(batch: list[Op]) -> None:
        for op in batch:
            op.force_complete()
        if all(op.is_completed for op in ops) and not done.done():
            done.set_result(None)

    def completer() -> None:
        for i in range(0, 1000, 100):
            loop.call_soon_threadsafe(complete_batch, ops[i : i + 100])

    thread = threading.Thread(target=completer)
    thread.start()
    await asyncio.wait_for(done, 10)
    thread.join()
    assert all(op.completions == 1 and op.expirations == 0 for op in ops)
    assert p.delayed == 0
    await p.shutdown()


async def test_the_driver_expires_a_50ms_operation() -> None:
    loop = asyncio.get_running_loop()
    p: DelayedOperationPurgatory[Op] = DelayedOperationPurgatory("driver")
    p.start()
    expired = loop.create_future()
    op = Op(50)
    op.hook = lambda: expired.set_result(monotonic_ms())
    p.try_complete_else_watch(op, ["k"])
    fired_at = await asyncio.wait_for(expired, 10)
    assert fired_at >= op.expiration_ms
    assert op.expirations == 1 and p.delayed == 0
    await p.shutdown()
