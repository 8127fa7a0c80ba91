"""The request purgatory: delayed operations that complete by a condition or time out.

After Kafka's `DelayedOperation` / `DelayedOperationPurgatory` (KAFKA-1430). Long-poll
fetches (`max.wait.ms`, `min.bytes`), join-group waits and session expiry are delayed
operations.

Algorithm:

- A `DelayedOperation` is a `TimerTask` with a completed flag. `force_complete()` is the
  only way to complete it: the first call sets the flag, cancels the timer entry (the
  operation leaves the timer at once, O(1)) and calls `on_complete()`; later calls return
  False. The timer's expiration calls `run()`, which is `force_complete()` followed by
  `on_expiration()` if (and only if) that call completed it. So an operation completes
  exactly once, by its condition or by its timeout, never both; as in Kafka,
  `on_complete()` runs in both cases and `on_expiration()` (after it) only on timeout.
- `try_complete_else_watch(op, keys)`: try the condition (`op.try_complete()`); if it
  does not hold, put the operation on the watcher list of every key (partition keys,
  group ids: any hashable) and in the timer (`SystemTimer`, hierarchical timing wheels,
  see `agent.timing_wheel`).
- `check_and_complete(key)` (call it when something that may satisfy operations on `key`
  happened, e.g. new data was committed to a partition): tries every operation watching
  `key`, drops the completed ones from the list and returns how many it completed.
- An operation completed through one key (or by its timeout) stays on the lists of its
  other keys until they are checked or purged. As in Kafka, the purgatory estimates the
  number of such operations as (operations ever watched since the last purge) - (operations
  still in the timer); when that passes `purge_interval` (default 1000), the next
  `advance_clock()` purges completed operations from all lists and drops empty lists.

Contract of `try_complete()`: return True iff the operation can complete now. Like
Kafka's, it may call `self.force_complete()` itself (and return its result); if it returns
True without having done so, the purgatory calls `force_complete()`.

Threading: loop-confined, no locks. Every method of the purgatory and of its operations
must be called from one thread, normally the thread running the agent's event loop (the
timer is driven there by `start()`, an `AsyncTimerDriver`). Another thread that wants to
complete operations (a storage thread pool, the benchmark's completion thread) hands the
work to the loop: `loop.call_soon_threadsafe(op.force_complete)` or
`loop.call_soon_threadsafe(purgatory.check_and_complete, key)`; batch many completions
into one call when they come in bulk (`bench/purgatory.py` does). Why not a lock:

- The agent runs one event loop, so a lock would be paid on every operation and would
  protect nothing; completions from other threads are the exception.
- `on_complete()` resolves asyncio futures and writes to transports, which are not
  thread-safe: it has to run on the loop anyway, so a lock would only move the problem.
- Confinement removes Kafka's second `tryComplete()` after watching (which exists to catch
  an event that raced with the first check): on one thread, nothing can happen between
  the check and the watch.

Callbacks may re-enter the purgatory (complete other operations, watch new ones, check
other keys or the same key): watcher lists are scanned by index and compacted in place,
never replaced, so an operation watched during a scan is never lost, and every operation
on a list is tried at least once after a `check_and_complete()` of its key begins (by that
scan or by a re-entrant one).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Collection, Hashable
from typing import Generic, TypeVar

from skiff.agent.timing_wheel import _NIL, AsyncTimerDriver, SystemTimer, TimerTask

__all__ = ["DelayedOperation", "DelayedOperationPurgatory"]


class DelayedOperation(TimerTask):
    """An operation that completes when its condition holds or after `delay_ms`.

    Subclasses implement `try_complete()`, `on_complete()` and `on_expiration()` and may
    add `__slots__`.
    """

    __slots__ = ("_completed",)

    def __init__(self, delay_ms: int) -> None:
        # TimerTask.__init__, inlined: operations are created on the request path.
        self.delay_ms = delay_ms
        self.expiration_ms = 0
        self._bucket = None
        self._next = self._prev = _NIL
        self._completed = False

    @property
    def is_completed(self) -> bool:
        return self._completed

    def force_complete(self) -> bool:
        """Complete the operation: True iff this call did it (then `on_complete()` ran).

        Cancels the timer entry first, so a completed operation never expires.
        """
        if self._completed:
            return False
        self._completed = True
        bucket = self._bucket
        if bucket is not None:
            # TimerTask.cancel, inlined (hot path).
            prev = self._prev
            nxt = self._next
            prev._next = nxt
            nxt._prev = prev
            self._next = self._prev = _NIL
            self._bucket = None
            bucket.size -= 1
            bucket._counter.count -= 1
        self.on_complete()
        return True

    def run(self) -> None:
        """The timeout: complete the operation if nothing else did, then `on_expiration()`."""
        if self.force_complete():
            self.on_expiration()

    @abstractmethod
    def try_complete(self) -> bool:
        """True iff the operation can complete now (may call `force_complete()` itself)."""

    @abstractmethod
    def on_complete(self) -> None:
        """Completion work (send the response); called exactly once."""

    @abstractmethod
    def on_expiration(self) -> None:
        """Called after `on_complete()` when the operation completed by timing out."""


OpT = TypeVar("OpT", bound=DelayedOperation)


class DelayedOperationPurgatory(Generic[OpT]):
    """Watcher lists by key over a timing-wheel timer (see the module docstring).

    `timer` defaults to a `SystemTimer` on the monotonic clock; pass one on a manual clock
    in tests and drive it with `advance_clock()`. In the agent, `start()` runs the asyncio
    driver and `shutdown()` stops it.
    """

    def __init__(
        self, name: str = "", *, timer: SystemTimer | None = None, purge_interval: int = 1000
    ) -> None:
        self.name = name
        self.purge_interval = purge_interval
        self._timer = timer if timer is not None else SystemTimer()
        self._watchers: dict[Hashable, list[OpT]] = {}
        self._estimated_total = 0
        self._driver: AsyncTimerDriver | None = None

    # -- metrics ---------------------------------------------------------------------

    @property
    def timer(self) -> SystemTimer:
        return self._timer

    @property
    def watched(self) -> int:
        """Entries on all watcher lists (an operation watching k keys counts k times;
        includes completed operations not yet purged), as Kafka's `watched`."""
        return sum(map(len, self._watchers.values()))

    @property
    def delayed(self) -> int:
        """Operations waiting in the timer (Kafka's `numDelayed`)."""
        return self._timer.size

    @property
    def watch_keys(self) -> int:
        """Keys with a watcher list."""
        return len(self._watchers)

    def watchers_for(self, key: Hashable) -> list[OpT]:
        """A copy of the watcher list of `key` (for tests and debugging)."""
        return list(self._watchers.get(key, ()))

    # -- operations ------------------------------------------------------------------

    def try_complete_else_watch(self, op: OpT, keys: Collection[Hashable]) -> bool:
        """Complete `op` now if its condition holds (True), else watch it on `keys` and
        put it in the timer (False). With no keys the operation only waits for its
        timeout or an explicit `force_complete()`. A delay <= 0 expires it inside this
        call (it returns False, as in Kafka: the caller did not complete it)."""
        if op.try_complete():
            if not op._completed:
                op.force_complete()
            return True
        if op._completed:
            return False
        if keys:
            watchers = self._watchers
            for key in keys:
                ops = watchers.get(key)
                if ops is None:
                    watchers[key] = [op]
                else:
                    ops.append(op)
            self._estimated_total += 1
        self._timer.add(op)
        return False

    def check_and_complete(self, key: Hashable) -> int:
        """Try the operations watching `key`; return how many this call completed."""
        ops = self._watchers.get(key)
        if ops is None:
            return 0
        completed = 0
        i = 0
        # By index: operations appended by callbacks during the scan are tried too.
        while i < len(ops):
            op = ops[i]
            i += 1
            if op._completed:
                continue
            if op.try_complete():
                if not op._completed:
                    op.force_complete()
                completed += 1
        self._compact(key, ops)
        return completed

    def cancel_for_key(self, key: Hashable) -> list[OpT]:
        """Stop watching `key`: remove its list and take its not-yet-completed operations
        out of the timer, without completing them (Kafka's `cancelForKey`, used when a
        partition goes away). They stay on other keys' lists until purged."""
        ops = self._watchers.pop(key, None)
        if not ops:
            return []
        cancelled = [op for op in ops if not op._completed]
        for op in cancelled:
            op.cancel()
        return cancelled

    def advance_clock(self, timeout_ms: int = 0) -> bool:
        """Expire due operations (see `SystemTimer.advance_clock`), then purge watcher
        lists if the estimated number of completed-but-watched operations passed
        `purge_interval`. True iff a bucket was due."""
        advanced = self._timer.advance_clock(timeout_ms)
        delayed = self._timer.size
        if self._estimated_total - delayed > self.purge_interval:
            # Reset the estimate to what is still pending; operations completed during
            # the purge leave it a little high, as in Kafka.
            self._estimated_total = delayed
            self.purge_completed()
        return advanced

    def purge_completed(self) -> int:
        """Drop completed operations from every watcher list; return how many entries."""
        purged = 0
        for key, ops in list(self._watchers.items()):
            before = len(ops)
            self._compact(key, ops)
            purged += before - len(ops)
        return purged

    def _compact(self, key: Hashable, ops: list[OpT]) -> None:
        live = [op for op in ops if not op._completed]
        if len(live) != len(ops):
            ops[:] = live  # in place: a re-entrant scan of the same list stays valid
        if not ops and self._watchers.get(key) is ops:
            del self._watchers[key]

    # -- asyncio ---------------------------------------------------------------------

    def start(self) -> None:
        """Drive the timer (and the purge check) from the running event loop."""
        if self._driver is None:
            self._driver = AsyncTimerDriver(self._timer, self.advance_clock)
        self._driver.start()

    async def shutdown(self) -> None:
        """Stop the driver. Pending operations stay pending (neither completed nor expired)."""
        if self._driver is not None:
            await self._driver.stop()
