"""A bound on bytes held, waited for in arrival order: the produce buffer's `max_buffered_bytes`
(agent.produce_buffer) and a pod worker's (agent.workers.writer_client).

An item fits when its bytes and those held stay within `max_bytes`, or when nothing is held
(one item larger than the bound is still admitted alone, else it could never be). It takes
room at once when it fits and nobody is waiting (`has_room` then `take_now`, or `take`);
once anyone waits, later takers wait too (`take`), each taking room as soon as it fits when
woken. `release` gives room back and wakes the waiters; `wake` wakes them to re-check the
owner's own reason to stop waiting (`take`'s `give_up`: a buffer that lost its writer).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


def _never() -> bool:
    return False


class ByteBudget:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.held_bytes = 0
        self._room = asyncio.Condition()
        self._waiters = 0

    @property
    def waiting(self) -> int:
        """Takers parked for room."""
        return self._waiters

    def fits(self, size: int) -> bool:
        return self.held_bytes == 0 or self.held_bytes + size <= self.max_bytes

    def has_room(self, size: int) -> bool:
        """`size` bytes can be taken now without passing anyone waiting."""
        return not self._waiters and self.fits(size)

    def take_now(self, size: int) -> None:
        """Take room checked by `has_room` in the same synchronous step."""
        self.held_bytes += size

    async def take(self, size: int, give_up: Callable[[], bool] = _never) -> bool:
        """Take `size` bytes, waiting for room in turn; False (nothing taken) if `give_up()`
        became true first."""
        if self.has_room(size):  # nearly every take: no lock, no await between check and take
            self.held_bytes += size
            return True
        self._waiters += 1
        try:
            async with self._room:
                await self._room.wait_for(lambda: give_up() or self.fits(size))
                if give_up():
                    return False
                self.held_bytes += size
                return True
        finally:
            self._waiters -= 1

    async def release(self, size: int) -> None:
        async with self._room:
            self.held_bytes -= size
            self._room.notify_all()

    def release_now(self, size: int) -> None:
        """Give room back without waking anyone yet (a caller releasing many, then `wake`)."""
        self.held_bytes -= size

    async def wake(self) -> None:
        async with self._room:
            self._room.notify_all()
