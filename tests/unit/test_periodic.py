"""agent.periodic.Periodic: ticks in the background, a failing tick goes to on_error and the
loop goes on, close() cancels and waits (events, no sleeps)."""

from __future__ import annotations

import asyncio

from skiff.agent.periodic import Periodic


async def test_ticks_survive_a_failure_and_close_stops_them() -> None:
    ticks = 0
    third = asyncio.Event()
    errors: list[Exception] = []

    async def tick() -> None:
        nonlocal ticks
        ticks += 1
        if ticks == 2:
            raise RuntimeError("metadata said no")
        if ticks == 3:
            third.set()

    p = Periodic("test-tick", lambda: 0.0, tick, errors.append)
    assert not p.running
    p.start()
    assert p.running
    await asyncio.wait_for(third.wait(), 10)
    await p.close()
    assert not p.running
    assert [str(e) for e in errors] == ["metadata said no"]
    await p.close()  # closing twice is fine
