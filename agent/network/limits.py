"""What bounds the protocol server's connections: byte budgets, connection caps, request order.

Byte budgets (`ByteBudget`). Each connection has one, `connection_max_inflight_bytes`; the
agent has one more, `queued_max_request_bytes`, for request bytes across all connections
(Kafka's `queued.max.request.bytes`). A request is charged to its connection's budget:

- while it is read and handled: its size + `REQUEST_OVERHEAD_BYTES` (the Python objects a
  request holds besides its bytes: task, parsed entity) + the response bytes it may produce
  (`response_reserve_bytes`: for a Fetch its `max_bytes` capped by the partitions' limits,
  otherwise 0), reserved before its handler starts;
- once answered: its encoded response + the overhead, until the writer has handed the
  response to the socket and the socket's buffer has drained below its high-water mark;
- then nothing.

The agent budget counts request bytes only, from before the body is read until the handler
is done. The reader of a connection waits (*mutes* the connection, as Kafka's Selector
does: the client's further requests stay in the socket and TCP pushes back) while the next
charge does not fit: `fits(n)` is true when nothing else is charged or `used + n <= limit`,
so one request larger than a budget still runs, alone. A client that pipelines Fetch
requests and never reads its socket thus holds at most about one budget of responses.

Connection caps (`ConnectionLimiter`): a total cap (`max_connections`) and a cap per client
IP address (`max_connections_per_ip`), Kafka's `max.connections` / `max.connections.per.ip`.
A connection over a cap is closed as soon as it is accepted, and counted by reason.

Request order (`runs_alone`): Kafka handles one connection's requests one at a time. Here
only the requests that change no state, or order themselves, run concurrently with their
neighbours (`CONCURRENT_API_KEYS`: Produce, whose handler keeps its own order, Fetch,
ListOffsets, Metadata, FindCoordinator, ApiVersions, DescribeCluster). Every other request
(offset commits, group membership, admin changes, and the reads of that state such as
OffsetFetch or DescribeGroups) runs alone: it starts after every earlier request of its
connection has completed, and later requests start after it has completed, so they take
effect, and observe each other, in the order the connection sent them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from typing import Any

log = logging.getLogger(__name__)

# Measured with tracemalloc: a pipelined one-record Produce request waiting for its flush
# holds about 5.8 KiB besides its frame (handler task and coroutine frames, parsed entity,
# its batch's entry in the produce buffer, response future, queue entry).
REQUEST_OVERHEAD_BYTES = 6 * 1024

PRODUCE, FETCH, LIST_OFFSETS, METADATA, FIND_COORDINATOR, API_VERSIONS, DESCRIBE_CLUSTER = (
    0,
    1,
    2,
    3,
    10,
    18,
    60,
)
CONCURRENT_API_KEYS = frozenset(
    {PRODUCE, FETCH, LIST_OFFSETS, METADATA, FIND_COORDINATOR, API_VERSIONS, DESCRIBE_CLUSTER}
)


def runs_alone(api_key: int, exclusive: bool = False) -> bool:
    """Whether a request must run alone on its connection (see the module doc)."""
    return exclusive or api_key not in CONCURRENT_API_KEYS


def response_reserve_bytes(api_key: int, body: Any) -> int:
    """The response bytes a request may produce, as far as the request itself bounds them.

    Only Fetch asks for a response size: its `max_bytes` (v3+), and never more than the sum
    of its partitions' `partition_max_bytes` (a first batch larger than both is still
    served, KIP-74, and then charged at its real size once answered).
    """
    if api_key != FETCH:
        return 0
    per_partition = sum(max(int(p.partition_max_bytes), 0) for t in body.topics for p in t.partitions)
    max_bytes = getattr(body, "max_bytes", None)
    if max_bytes is None or int(max_bytes) <= 0:
        return per_partition
    return min(int(max_bytes), per_partition)


class ByteBudget:
    """A count of bytes held against a limit, with waiting for room (see the module doc)."""

    def __init__(self, limit: int) -> None:
        if limit <= 0:
            raise ValueError("a byte budget needs a positive limit")
        self.limit = limit
        self.used = 0
        self._freed = asyncio.Event()

    def fits(self, n: int, own: int = 0) -> bool:
        """Whether `n` more bytes may be taken; `own` bytes of `used` belong to the asker."""
        return self.used - own <= 0 or self.used + n <= self.limit

    async def wait_room(self, n: int, own: int = 0) -> None:
        while not self.fits(n, own):
            self._freed.clear()
            await self._freed.wait()

    def take(self, n: int) -> None:
        self.used += n

    def give(self, n: int) -> None:
        self.used -= n
        if n > 0:
            self._freed.set()


class ConnectionLimiter:
    """Open connections in total and per client address, against optional caps."""

    LOG_EVERY_S = 10.0  # refusals are logged at most this often (a flood must not flood the log)

    def __init__(self, max_connections: int | None, max_per_ip: int | None) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.total = 0
        self.per_ip: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()  # by reason: "max_connections", "max_connections_per_ip"
        self._last_log = float("-inf")
        self._unlogged = 0

    def admit(self, ip: str) -> bool:
        """Count a new connection from `ip` and return True, or count a refusal and return False."""
        reason = None
        if self.max_connections is not None and self.total >= self.max_connections:
            reason = "max_connections"
        elif self.max_per_ip is not None and self.per_ip[ip] >= self.max_per_ip:
            reason = "max_connections_per_ip"
        if reason is None:
            self.total += 1
            self.per_ip[ip] += 1
            return True
        self.refused[reason] += 1
        self._unlogged += 1
        now = time.monotonic()
        if now - self._last_log >= self.LOG_EVERY_S:
            log.warning(
                "refused %d connection(s) (latest from %s: %s reached; %d open)",
                self._unlogged,
                ip,
                reason,
                self.total,
            )
            self._last_log, self._unlogged = now, 0
        return False

    def release(self, ip: str) -> None:
        self.total -= 1
        self.per_ip[ip] -= 1
        if self.per_ip[ip] <= 0:
            del self.per_ip[ip]
