"""agent.network.read_deadline: one lazily re-armed timer cancels a read that overruns its deadline."""

from __future__ import annotations

import asyncio

import pytest
from skiff.agent.network.read_deadline import ReadDeadline


async def _wait_forever(deadline: ReadDeadline, timeout_s: float) -> bool:
    """Arm, wait on a future nobody completes, and report whether the deadline ended it."""
    deadline.arm(timeout_s)
    try:
        await asyncio.get_running_loop().create_future()
    except asyncio.CancelledError:
        return deadline.disarm()
    raise AssertionError("unreachable")


def test_an_overrun_read_is_cancelled_and_reported_as_a_timeout() -> None:
    async def go() -> None:
        deadline = ReadDeadline(asyncio.get_running_loop())
        assert await _wait_forever(deadline, 0.01) is True
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0  # the cancellation was undone
        deadline.close()

    asyncio.run(go())


def test_a_later_deadline_reuses_the_pending_timer_and_is_honoured() -> None:
    async def go() -> None:
        loop = asyncio.get_running_loop()
        deadline = ReadDeadline(loop)
        deadline.arm(0.02)
        first = deadline._handle
        assert deadline.disarm() is False
        deadline.arm(30.0)  # later: no new timer; the early one re-arms itself when it fires
        assert deadline._handle is first
        # the early timer fires while the 30 s deadline is armed: it must not cancel us
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(loop.create_future(), 0.2)
        assert deadline.disarm() is False
        assert deadline._handle is not None and deadline._handle.when() > loop.time() + 20
        deadline.arm(0.01)  # earlier than the pending timer: a new one
        assert deadline._handle.when() < loop.time() + 1
        deadline.disarm()
        deadline.close()

    asyncio.run(go())


def test_a_cancellation_from_elsewhere_is_not_a_timeout() -> None:
    async def go() -> None:
        deadline = ReadDeadline(asyncio.get_running_loop())
        task = asyncio.ensure_future(_wait_forever(deadline, 30.0))
        await asyncio.sleep(0)  # let it arm and start waiting
        task.cancel()
        assert await task is False  # disarm() said: not ours
        deadline.close()

    asyncio.run(go())
