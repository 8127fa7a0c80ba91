"""Hierarchical timing wheels: the timer behind the purgatory (Kafka's `kafka.utils.timer`).

Algorithm (after Kafka's `TimingWheel`, `TimerTaskList` and `SystemTimer`, KAFKA-1430):

- A *timing wheel* is a circular array of `wheel_size` buckets, each covering `tick_ms` of
  time, so the wheel spans `interval_ms = tick_ms * wheel_size`. Its `current_time_ms`
  (a multiple of `tick_ms`) is the start of the current tick. A task expiring at `e`
  with `current_time_ms + tick_ms <= e < current_time_ms + interval_ms` goes in bucket
  `(e // tick_ms) % wheel_size`; that bucket's expiration is `(e // tick_ms) * tick_ms`.
  Within one wheel span every bucket index stands for exactly one tick, so buckets are
  reused round after round without ambiguity.
- A task expiring at or beyond `current_time_ms + interval_ms` goes to the *overflow
  wheel*, created on demand, whose tick is the lower wheel's whole interval (1 ms x 20 ->
  20 ms x 20 -> 400 ms x 20 -> 8 s x 20 ...). A task expiring before
  `current_time_ms + tick_ms` of the lowest wheel is already expired: it runs at once.
- Each bucket (`TimerTaskList`) is a circular doubly linked list with a sentinel. The
  list is intrusive: a `TimerTask` is its own list entry (Kafka's `TimerTaskEntry`
  folded into the task, which saves an object per task), so cancelling a task unlinks
  it in O(1) and updates the bucket's and the timer's counts.
- The *delay queue* is a binary heap of buckets keyed by bucket expiration (not of
  tasks): a bucket is pushed only when its expiration changes, i.e. when it receives its
  first task for a new round, so the heap holds at most one entry per bucket and
  inserting a task is O(1) in the common case (O(log #buckets) otherwise).
- `SystemTimer.advance_clock()` polls the delay queue: while the head bucket's
  expiration is <= now, it pops the bucket, advances every wheel's clock to that
  expiration (a wheel advances only by whole ticks), and *flushes* the bucket: each task
  is unlinked and re-added. A task of a lowest-level bucket is then expired and runs; a
  task of a higher-level bucket cascades into a lower wheel, whose bucket is pushed on
  the heap and popped in the same call if due. The clock therefore moves only when a
  bucket is due, and never task by task.

Guarantee: with integer milliseconds and the 1 ms lowest tick, a task added at `t` with
delay `d` runs at the first `advance_clock()` whose clock reads >= `t + d` (the
expiration rounded down to the lowest tick), never before; a task whose expiration is
not after the lowest wheel's current tick runs inside `add()`.

The clock is injected: `now_ms()` returns integer milliseconds (default: the monotonic
clock, the one asyncio's loop uses), so tests run on a manual clock.

Threading: none. A `SystemTimer` is confined to one thread, normally the thread of the
agent's event loop (see `agent.purgatory` for how other threads hand work to it). Tasks
run synchronously inside `add()` or `advance_clock()`; an exception from a task is
logged and does not stop the others. `AsyncTimerDriver` is the asyncio driver: a small
task that sleeps until the next bucket expiration (or `max_wait_ms`), is woken when an
earlier bucket is pushed, and calls `advance_clock()`.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import cast

log = logging.getLogger(__name__)

__all__ = [
    "AsyncTimerDriver",
    "SystemTimer",
    "TimerTask",
    "TimerTaskList",
    "TimingWheel",
    "monotonic_ms",
]


_monotonic_ns = time.monotonic_ns


def monotonic_ms() -> int:
    """Milliseconds of the monotonic clock (the clock of asyncio's event loop)."""
    return _monotonic_ns() // 1_000_000


class _Link:
    """A node of a circular doubly linked list (a bucket's sentinel or a task)."""

    __slots__ = ("_next", "_prev")

    _next: _Link
    _prev: _Link


# What an unlinked task's pointers hold: never None (keeps the list code free of
# Optional checks) and never the task itself (a self-loop would be a reference cycle,
# freed only by the cyclic GC).
_NIL = _Link()
_NIL._next = _NIL._prev = _NIL


class _Counter:
    """Tasks held by all buckets of one timer (Kafka's shared `taskCounter`)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


class TimerTask(_Link, ABC):
    """Something to `run()` once `delay_ms` after it was added to a timer.

    The task is its own bucket-list entry (intrusive list). `cancel()` unlinks it in O(1);
    adding a task that is already scheduled reschedules it.
    """

    __slots__ = ("delay_ms", "expiration_ms", "_bucket")

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = delay_ms
        self.expiration_ms = 0
        self._bucket: TimerTaskList | None = None
        self._next = self._prev = _NIL

    @abstractmethod
    def run(self) -> None:
        """Called once when the task expires (unless it was cancelled first)."""

    @property
    def bucket(self) -> TimerTaskList | None:
        """The bucket holding the task, None when it is not scheduled."""
        return self._bucket

    def cancel(self) -> bool:
        """Remove the task from its bucket in O(1). True iff it was scheduled."""
        bucket = self._bucket
        if bucket is None:
            return False
        prev = self._prev
        nxt = self._next
        prev._next = nxt
        nxt._prev = prev
        self._next = self._prev = _NIL
        self._bucket = None
        bucket.size -= 1
        bucket._counter.count -= 1
        return True


class TimerTaskList(_Link):
    """A bucket: a circular doubly linked list of tasks with the bucket as sentinel."""

    __slots__ = ("expiration_ms", "size", "_counter")

    def __init__(self, counter: _Counter) -> None:
        self._next = self._prev = self
        self.expiration_ms = -1  # -1: not in the delay queue for any round
        self.size = 0
        self._counter = counter

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[TimerTask]:
        node = self._next
        while node is not self:
            assert isinstance(node, TimerTask)
            nxt = node._next
            yield node
            node = nxt

    def add(self, task: TimerTask) -> None:
        """Append `task` (unlinking it from any other bucket first)."""
        if task._bucket is not None:
            task.cancel()
        tail = self._prev
        task._prev = tail
        task._next = self
        tail._next = task
        self._prev = task
        task._bucket = self
        self.size += 1
        self._counter.count += 1

    def remove(self, task: TimerTask) -> None:
        if task._bucket is self:
            task.cancel()

    def set_expiration(self, expiration_ms: int) -> bool:
        """Set the bucket's expiration; True iff it changed (the bucket must be queued)."""
        if self.expiration_ms == expiration_ms:
            return False
        self.expiration_ms = expiration_ms
        return True

    def flush(self, f: Callable[[TimerTask], object]) -> None:
        """Unlink every task, one at a time from the head, and pass it to `f`.

        One at a time so that `f` (or a task it runs) may cancel tasks still in the list.
        """
        while True:
            task = self._next
            if task is self:
                break
            assert isinstance(task, TimerTask)
            task.cancel()
            f(task)
        self.expiration_ms = -1


class _DelayQueue:
    """A heap of buckets keyed by expiration; `on_new_head` is told of an earlier head."""

    __slots__ = ("_heap", "_seq", "on_new_head")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, TimerTaskList]] = []
        self._seq = itertools.count()
        self.on_new_head: Callable[[int], object] | None = None

    def __len__(self) -> int:
        return len(self._heap)

    def offer(self, bucket: TimerTaskList) -> None:
        entry = (bucket.expiration_ms, next(self._seq), bucket)
        heap = self._heap
        heapq.heappush(heap, entry)
        if heap[0] is entry and self.on_new_head is not None:
            self.on_new_head(entry[0])

    def peek_expiration(self) -> int | None:
        heap = self._heap
        return heap[0][0] if heap else None

    def poll(self, now_ms: int) -> TimerTaskList | None:
        """Pop and return the head bucket if it is due at `now_ms`, else None."""
        heap = self._heap
        while heap:
            expiration, _, bucket = heap[0]
            if expiration > now_ms:
                return None
            heapq.heappop(heap)
            # A bucket's expiration changes only after it was flushed, i.e. after its
            # entry left the heap, so this always holds; the check is belt and braces.
            if bucket.expiration_ms == expiration:
                return bucket
        return None


class TimingWheel:
    """One level of the hierarchy; `overflow_wheel` is the next level up (or None)."""

    __slots__ = (
        "tick_ms",
        "wheel_size",
        "interval_ms",
        "current_time_ms",
        "buckets",
        "overflow_wheel",
        "_counter",
        "_queue",
    )

    def __init__(
        self, tick_ms: int, wheel_size: int, start_ms: int, counter: _Counter, queue: _DelayQueue
    ) -> None:
        if tick_ms < 1 or wheel_size < 2:
            raise ValueError("tick_ms must be >= 1 and wheel_size >= 2")
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval_ms = tick_ms * wheel_size
        self.current_time_ms = start_ms - start_ms % tick_ms
        self.buckets = [TimerTaskList(counter) for _ in range(wheel_size)]
        self.overflow_wheel: TimingWheel | None = None
        self._counter = counter
        self._queue = queue

    def _add_overflow_wheel(self) -> TimingWheel:
        if self.overflow_wheel is None:
            self.overflow_wheel = TimingWheel(
                self.interval_ms, self.wheel_size, self.current_time_ms, self._counter, self._queue
            )
        return self.overflow_wheel

    def add(self, task: TimerTask) -> bool:
        """Put an unscheduled `task` in its bucket; False if it is already expired.

        Walks up the levels iteratively (no recursion): a task that does not fit this
        wheel's span goes to the overflow wheel. Only the lowest wheel can find a task
        expired: a task reaching level n expires at or after level n-1's span end, which
        is at or after level n's `current_time_ms + tick_ms`.
        """
        expiration = task.expiration_ms
        wheel = self
        if expiration < wheel.current_time_ms + wheel.tick_ms:
            return False
        while expiration >= wheel.current_time_ms + wheel.interval_ms:
            upper = wheel.overflow_wheel
            wheel = upper if upper is not None else wheel._add_overflow_wheel()
        tick = wheel.tick_ms
        virtual_id = expiration // tick
        bucket = wheel.buckets[virtual_id % wheel.wheel_size]
        # TimerTaskList.add, inlined (hot path; the task is known to be unlinked).
        tail = bucket._prev
        task._prev = tail
        task._next = bucket
        tail._next = task
        bucket._prev = task
        task._bucket = bucket
        bucket.size += 1
        self._counter.count += 1
        bucket_expiration = virtual_id * tick
        if bucket.expiration_ms != bucket_expiration:
            # First task of this bucket for this round: (re)enqueue the bucket.
            bucket.expiration_ms = bucket_expiration
            self._queue.offer(bucket)
        return True

    def advance_clock(self, time_ms: int) -> None:
        """Move this wheel (and, if it moved, the levels above) to the tick holding `time_ms`."""
        wheel: TimingWheel | None = self
        while wheel is not None and time_ms >= wheel.current_time_ms + wheel.tick_ms:
            wheel.current_time_ms = time_ms - time_ms % wheel.tick_ms
            time_ms = wheel.current_time_ms
            wheel = wheel.overflow_wheel

    def levels(self) -> list[TimingWheel]:
        """This wheel and the overflow wheels above it, lowest first."""
        out: list[TimingWheel] = []
        wheel: TimingWheel | None = self
        while wheel is not None:
            out.append(wheel)
            wheel = wheel.overflow_wheel
        return out


class SystemTimer:
    """The timer: hierarchical wheels (lowest tick `tick_ms`, `wheel_size` buckets per
    level) over a delay queue of buckets, on the injected clock `now_ms`.

    `sleep` (seconds) is only used by `advance_clock(timeout_ms > 0)` when nothing is
    due; inject one that moves a manual clock in tests.
    """

    __slots__ = ("_now_ms", "_sleep", "_counter", "_queue", "_wheel", "_advancing")

    def __init__(
        self,
        *,
        tick_ms: int = 1,
        wheel_size: int = 20,
        now_ms: Callable[[], int] = monotonic_ms,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        self._now_ms = now_ms
        self._sleep = sleep
        self._counter = _Counter()
        self._queue = _DelayQueue()
        self._wheel = TimingWheel(tick_ms, wheel_size, now_ms(), self._counter, self._queue)
        self._advancing = False

    @property
    def size(self) -> int:
        """Tasks scheduled (in buckets), across all levels."""
        return self._counter.count

    def __len__(self) -> int:
        return self._counter.count

    @property
    def wheel(self) -> TimingWheel:
        """The lowest wheel (its `overflow_wheel` chain holds the other levels)."""
        return self._wheel

    @property
    def queued_buckets(self) -> int:
        """Entries in the delay queue (buckets, not tasks)."""
        return len(self._queue)

    def now_ms(self) -> int:
        return self._now_ms()

    def next_expiration_ms(self) -> int | None:
        """Expiration of the earliest queued bucket (None when the queue is empty)."""
        return self._queue.peek_expiration()

    def set_wakeup(self, callback: Callable[[int], object] | None) -> None:
        """Call `callback(expiration_ms)` whenever a bucket becomes the queue's new head
        (an earlier expiration than any queued so far): a sleeping driver must wake."""
        self._queue.on_new_head = callback

    def add(self, task: TimerTask) -> None:
        """Schedule `task` to run `task.delay_ms` from now (rescheduling it if it was
        scheduled). A task already expired (delay <= 0, or before the lowest wheel's
        next tick) runs now, inside this call."""
        if task._bucket is not None:
            task.cancel()
        task.expiration_ms = task.delay_ms + self._now_ms()
        if not self._wheel.add(task):
            try:
                task.run()
            except Exception:  # boundary: a timer task's failure must not stop the caller
                log.exception("timer task %r failed", task)

    def advance_clock(self, timeout_ms: int = 0) -> bool:
        """Run every task due now; True iff at least one bucket was due.

        When nothing is due and `timeout_ms > 0`, first sleep (with the injected `sleep`)
        until the head bucket is due or `timeout_ms` has passed, like Kafka's
        `delayQueue.poll(timeoutMs)`. Re-entrant calls (from a running task) return
        False at once.
        """
        if self._advancing:
            return False
        queue = self._queue
        now = self._now_ms()
        head = queue.peek_expiration()
        if head is None or head > now:
            if timeout_ms <= 0:
                return False
            wait_ms = timeout_ms if head is None else min(timeout_ms, head - now)
            self._sleep(wait_ms / 1000)
            now = self._now_ms()
            head = queue.peek_expiration()
            if head is None or head > now:
                return False
        self._advancing = True
        try:
            wheel = self._wheel
            wheel_add = wheel.add
            poll = queue.poll
            bucket = poll(now)
            while bucket is not None:
                wheel.advance_clock(bucket.expiration_ms)
                # Any task expiring before this is expired (lowest wheel's next tick).
                expired_before = wheel.current_time_ms + wheel.tick_ms
                # TimerTaskList.flush, inlined: unlink one at a time from the head, then
                # run (expired) or re-add into a lower wheel (cascade).
                counter = self._counter
                while True:
                    task: TimerTask = bucket._next  # type: ignore[assignment]  # or the sentinel
                    if cast(object, task) is bucket:
                        break
                    nxt = task._next
                    bucket._next = nxt
                    nxt._prev = bucket
                    task._next = task._prev = _NIL
                    task._bucket = None
                    bucket.size -= 1
                    counter.count -= 1
                    if task.expiration_ms < expired_before or not wheel_add(task):
                        try:
                            task.run()
                        except Exception:  # boundary: a timer task must not stop the others
                            log.exception("timer task %r failed", task)
                bucket.expiration_ms = -1
                bucket = poll(now)
        finally:
            self._advancing = False
        return True


class AsyncTimerDriver:
    """Drives a `SystemTimer` from an asyncio task on the running loop.

    The task calls `advance()` (default `timer.advance_clock`), then sleeps until the
    head bucket's expiration, at most `max_wait_ms` (None: no limit; the default 200 ms
    matches Kafka's expiration reaper, so a purgatory's purge check runs even when no
    bucket is due). Pushing a bucket earlier than the one it sleeps for wakes it.
    """

    def __init__(
        self,
        timer: SystemTimer,
        advance: Callable[[], object] | None = None,
        *,
        max_wait_ms: int | None = 200,
    ) -> None:
        self._timer = timer
        self._advance: Callable[[], object] = advance if advance is not None else timer.advance_clock
        self._max_wait_ms = max_wait_ms
        self._task: asyncio.Task[None] | None = None
        self._waiter: asyncio.Future[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start the driver task on the running loop."""
        if self.running:
            return
        self._timer.set_wakeup(self._wake)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="timer-driver")

    async def stop(self) -> None:
        task = self._task
        self._task = None
        self._timer.set_wakeup(None)
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    def _wake(self, _expiration_ms: int) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        timer = self._timer
        advance = self._advance
        max_wait_ms = self._max_wait_ms
        while True:
            try:
                advance()
            except Exception:  # boundary: the timer task must not die
                log.exception("timer advance failed")
            head = timer.next_expiration_ms()
            wait_ms: float | None
            if head is None:
                wait_ms = max_wait_ms
            else:
                wait_ms = head - timer.now_ms()
                if max_wait_ms is not None and wait_ms > max_wait_ms:
                    wait_ms = max_wait_ms
                if wait_ms <= 0:
                    # Already due (a task added while advancing may land in a due
                    # bucket): let other callbacks run, then advance again.
                    await asyncio.sleep(0)
                    continue
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiter = waiter
            handle = None if wait_ms is None else loop.call_later(wait_ms / 1000, _resolve, waiter)
            try:
                await waiter
            finally:
                self._waiter = None
                if handle is not None:
                    handle.cancel()


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
