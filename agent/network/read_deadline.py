"""A deadline on one await at a time of a task, with one lazily re-armed timer.

The protocol server puts a deadline on every read (the idle timeout before a request's
size prefix, the request read timeout after it). `asyncio.timeout()` schedules a timer
handle on entry and cancels it on exit, twice per request: ~10% of the agent's CPU per
small produce request at 8,000 requests/s. Nearly all of those timers are cancelled long
before they fire (the deadlines are seconds to minutes; requests arrive every few ms).

Algorithm: `arm(timeout_s)` records the deadline and schedules a timer only when none is
pending or the pending one would fire after the new deadline; a deadline moved later only
updates the record. When the timer fires it compares the clock with the recorded deadline:
disarmed, it stops; not yet due, it re-arms itself at the deadline (so a busy connection
costs about one timer per timeout period, not one per read); due, it cancels the armed
task. `disarm()` clears the record and reports whether this deadline cancelled the task,
undoing that cancellation (`Task.uncancel`) as `asyncio.timeout` does, so that a
cancellation from elsewhere is never mistaken for a timeout. `within(awaitable, timeout_s)`
wraps one await in arm/disarm and turns the deadline's cancellation into TimeoutError.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


class ReadDeadline:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._deadline_s: float | None = None  # loop time; None while disarmed
        self._handle: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[object] | None = None
        self._cancelling = 0  # the task's cancel requests when armed
        self._fired = False

    def arm(self, timeout_s: float) -> None:
        """Cancel the current task if it is still armed `timeout_s` from now."""
        task = asyncio.current_task(self._loop)  # with the loop: no get_running_loop() call
        assert task is not None, "arm() runs inside a task"
        self._task = task
        self._cancelling = task.cancelling()
        self._fired = False
        deadline_s = self._loop.time() + timeout_s
        self._deadline_s = deadline_s
        handle = self._handle
        if handle is None or handle.when() > deadline_s:
            if handle is not None:
                handle.cancel()
            self._handle = self._loop.call_at(deadline_s, self._fire)

    def disarm(self) -> bool:
        """Stop watching; True when the deadline passed and cancelled the task (a timeout)."""
        self._deadline_s = None
        task, self._task = self._task, None
        if not self._fired:
            return False
        self._fired = False
        assert task is not None
        return task.uncancel() <= self._cancelling

    async def within(self, awaitable: Awaitable[T], timeout_s: float) -> T:
        """`awaitable`'s result, or TimeoutError after `timeout_s` (or `expire_now`)."""
        self.arm(timeout_s)
        try:
            return await awaitable
        except asyncio.CancelledError:
            if self.disarm():
                raise TimeoutError from None
            raise
        finally:
            self.disarm()

    def expire_now(self) -> None:
        """End the armed await now, as its deadline passing would (no-op while disarmed):
        a draining agent stops reading without waiting for the next request."""
        if self._deadline_s is None or self._task is None or self._fired:
            return
        self._fired = True
        self._task.cancel()

    def close(self) -> None:
        self._deadline_s = None
        self._task = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        self._handle = None
        deadline_s = self._deadline_s
        if deadline_s is None or self._task is None:
            return
        if self._loop.time() < deadline_s:
            self._handle = self._loop.call_at(deadline_s, self._fire)
            return
        self._fired = True
        self._task.cancel()
