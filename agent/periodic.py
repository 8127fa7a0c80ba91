"""`Periodic`: one owner for the agent's "every N ms, in the background, until closed" tasks
(the ACL and client-quota refreshes, the bucket claim): the loop, its naming, its cancellation
and its close, which each of them used to write itself.

`tick()` runs every `interval_s()` seconds (asked again before each wait, so a setting changed
at run time applies), the first one interval after `start()`. An exception from a tick other
than cancellation goes to `on_error` and the loop goes on (a background refresh must not die
with one failed call); `close()` cancels the task and waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable


class Periodic:
    def __init__(
        self,
        name: str,
        interval_s: Callable[[], float],
        tick: Callable[[], Awaitable[object]],
        on_error: Callable[[Exception], None],
    ) -> None:
        self.name = name
        self._interval_s = interval_s
        self._tick = tick
        self._on_error = on_error
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s())
            try:
                await self._tick()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # boundary: a periodic task must not die with one failed tick
                self._on_error(e)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
