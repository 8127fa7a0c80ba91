"""The shared byte bound (agent.byte_budget): room taken at once or in turn, one oversize item
alone, release and wake, and giving up."""

from __future__ import annotations

import asyncio

from skiff.agent.byte_budget import ByteBudget


async def test_takers_queue_behind_a_waiter_and_an_oversize_item_goes_alone() -> None:
    budget = ByteBudget(10)
    assert budget.has_room(8)
    budget.take_now(8)
    big = asyncio.ensure_future(budget.take(30))  # larger than the bound: admitted when alone
    await asyncio.sleep(0)
    assert budget.waiting == 1 and not budget.has_room(1)  # no fast path past a waiter
    await budget.release(8)
    assert await big and budget.held_bytes == 30
    small = asyncio.ensure_future(budget.take(1))
    await asyncio.sleep(0)
    assert not small.done()  # 30 held: 1 more does not fit
    await budget.release(30)
    assert await small and budget.held_bytes == 1 and budget.waiting == 0


async def test_a_taker_gives_up_when_woken_with_its_reason() -> None:
    budget = ByteBudget(10)
    budget.take_now(10)
    lost = False
    waiting = asyncio.ensure_future(budget.take(5, give_up=lambda: lost))
    await asyncio.sleep(0)
    budget.release_now(0)
    lost = True
    await budget.wake()
    assert await waiting is False and budget.held_bytes == 10
