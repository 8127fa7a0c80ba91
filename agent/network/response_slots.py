"""A request's place in a connection's response order (the protocol server's slots).

The server's reader queues one `Slot` per request it has read; the writer takes them in
order, awaits each one's `Outcome` (the response frame to write, and whether to close the
connection after it) and writes it. A slot also carries what its request holds of the
byte budgets (see `agent.network.limits`): the request's bytes charged to the agent
until the handler is done, and the connection's charge, swapped for the response's size
when the handler is done and given back once the response has been written.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from skiff.agent.network.limits import REQUEST_OVERHEAD_BYTES, ByteBudget


class _Server(Protocol):
    @property
    def request_budget(self) -> ByteBudget: ...


class SlotOwner(Protocol):
    """What a slot needs of its connection."""

    @property
    def server(self) -> _Server: ...

    @property
    def budget(self) -> ByteBudget: ...


class Outcome:
    __slots__ = ("frame", "close")

    def __init__(self, frame: bytes | bytearray | None, close: bool = False) -> None:
        self.frame = frame  # the response to write, or None
        self.close = close  # close the connection after this slot


CLOSE = Outcome(None, close=True)


class Slot:
    """One request's place in the response order, and what it holds of the byte budgets.

    `settle` (when the handler is done: from its done callback or from the writer, whichever
    comes first) swaps the request's charge for its response's; `release` (after the write
    has drained) gives the rest back. Both are idempotent.
    """

    __slots__ = ("future", "request_bytes", "held", "settled", "conn")

    def __init__(
        self, conn: SlotOwner, future: asyncio.Future[Outcome], request_bytes: int, held: int
    ) -> None:
        self.conn = conn
        self.future = future
        self.request_bytes = request_bytes  # charged to the agent's budget until settled
        self.held = held  # charged to the connection's budget until released
        self.settled = False
        future.add_done_callback(lambda _: self.settle())

    def settle(self) -> None:
        if self.settled:
            return
        self.settled = True
        self.conn.server.request_budget.give(self.request_bytes)
        fut = self.future  # not done when the connection ends with its handler still running
        ok = fut.done() and not fut.cancelled() and fut.exception() is None
        frame = fut.result().frame if ok else None
        answered = REQUEST_OVERHEAD_BYTES + (len(frame) if frame is not None else 0)
        if answered < self.held:
            self.conn.budget.give(self.held - answered)
        else:
            self.conn.budget.take(answered - self.held)
        self.held = answered

    def release(self) -> None:
        self.settle()
        self.conn.budget.give(self.held)
        self.held = 0
