"""Long-poll fetches in the purgatory, woken by commits to the partitions they watch.

A fetch that found fewer than `min_bytes` waits as a `DelayedFetch` in a
`DelayedOperationPurgatory` (agent.purgatory: Kafka's design, on timing wheels): watched
on its partitions, it completes exactly once, either by its condition (a high watermark
this agent knows is past the one the fetch's last read saw, for one of its partitions)
or by its timeout (`max_wait_ms`). The fetch then reads again (agent.handlers.fetch).

News of commits comes from two places:
- this agent's own commits (`committed(key, high_watermark)`, called by the produce
  buffer's commit callback): the watchers of the partition are checked at once;
- commits made through other agents: a follower task long-polls the metadata service's
  `wait_for_commits` (metadata.commits.feed) with the partitions this agent follows and
  the watermarks it knows. Metadata answers as soon as a commit moves one of them, so
  the latency this adds is about one metadata round trip (measured in
  bench/cross_agent_wakeup.py), not a poll interval. Each answer also carries the
  partition's last stable offset at the new watermark, handed to `on_stable` (the chunk
  cache) before waiters are woken: a read_committed fetch parked at an LSO that did not
  move (an open transaction still writing) parks again without a metadata call.

Accounting: each wait that parked (was watched, not completed at once) is counted once
when it completes (a fetch woken with fewer than `min_bytes` parks and counts again), as
`parked_woken` (by news: a commit moved the high watermark of one of its partitions, or
the partition went away) or `parked_expired` (its `max_wait_ms` ran out); the agent
exports both as `skiff_fetch_delayed_completed_total{by="wake"|"expiry"}`. A wait
cancelled while parked (its connection closed) is neither. The fetches of a consumer at
the tail of a partition being produced to should all be woken: an expiry there means a
commit did not reach its waiters.

Following: a partition is followed from the first fetch that waits on it until no fetch
has waited on it for `follow_linger_ms` (on the injected `monotonic_s` clock), so a
consumer at the tail, whose fetches come and go, does not restart the long poll on every
fetch; a newly followed partition restarts it. At most `MAX_FOLLOWED_PARTITIONS` are
followed; fetches on others still complete on this agent's commits and on their timeout.
If the long poll fails (metadata unreachable), the follower retries every
`retry_interval_ms`, so waiting fetches still hear of other agents' commits within about
that interval, or time out.

Loop-confined like the purgatory: every method runs on the agent's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Sequence

from skiff.agent.purgatory import DelayedOperation, DelayedOperationPurgatory
from skiff.agent.timing_wheel import SystemTimer
from skiff.metadata.types import PartitionWatermark
from skiff.metadata.wire.operations import AgentClient

log = logging.getLogger(__name__)

Key = tuple[uuid.UUID, int]

MAX_FOLLOWED_PARTITIONS = 10_000
# How long news from the long poll waits for this agent's own commit of the partition to
# settle (see CommitWatch._follow) before waking fetches anyway.
LOCAL_SETTLE_MS = 50


class DelayedFetch(DelayedOperation):
    """A waiting fetch: done when `known[k] > seen[k]` for one of its partitions `k`.

    `known` is the watch's shared map of the newest watermarks it has heard of; the
    future gets True if the fetch completed by news, False if by its timeout. `expired`
    says which it was for the accounting: the future's value is not enough, since news
    recorded without a check of the waiters (deferred, see `CommitWatch._follow`) makes
    an expiring fetch read again too.
    """

    __slots__ = ("_known", "_seen", "_future", "expired")

    def __init__(
        self, delay_ms: int, known: dict[Key, int], seen: dict[Key, int], future: asyncio.Future[bool]
    ) -> None:
        super().__init__(delay_ms)
        self._known = known
        self._seen = seen
        self._future = future
        self.expired = False

    def _news(self) -> bool:
        known = self._known
        return any(known.get(k, -1) > hwm for k, hwm in self._seen.items())

    def try_complete(self) -> bool:
        return self._news()

    def on_complete(self) -> None:
        if not self._future.done():
            self._future.set_result(self._news())

    def on_expiration(self) -> None:
        self.expired = True

    def wake(self) -> None:
        """Complete now as if by news (the fetch reads again), whatever the watermarks say."""
        if not self._future.done():
            self._future.set_result(True)
        self.force_complete()


class CommitWatch:
    def __init__(
        self,
        metadata: AgentClient,
        *,
        retry_interval_ms: int = 100,
        long_poll_ms: int = 10_000,
        follow_linger_ms: int = 60_000,
        on_high_watermark: Callable[[Key, int], None] | None = None,
        on_stable: Callable[[Key, int, int], None] | None = None,
        timer: SystemTimer | None = None,
        monotonic_s: Callable[[], float] = time.monotonic,
    ) -> None:
        if retry_interval_ms <= 0 or long_poll_ms <= 0 or follow_linger_ms <= 0:
            raise ValueError("retry_interval_ms, long_poll_ms and follow_linger_ms must be positive")
        self._metadata = metadata
        self._retry_s = retry_interval_ms / 1000.0
        self._long_poll_ms = long_poll_ms
        self._linger_s = follow_linger_ms / 1000.0
        self._on_hwm = on_high_watermark
        self._on_stable = on_stable
        self._monotonic_s = monotonic_s  # the follow linger's clock (seconds)
        self.purgatory: DelayedOperationPurgatory[DelayedFetch] = DelayedOperationPurgatory(
            "fetch", timer=timer
        )
        self._known: dict[Key, int] = {}  # followed partitions -> newest watermark heard of
        self._followed: dict[Key, float] = {}  # followed partitions -> last wait (monotonic s)
        self._follow_changed: asyncio.Event | None = None
        self._follower: asyncio.Task[None] | None = None
        self._closed = False
        # Set by the runtime to the produce buffer's `is_committing`.
        self.local_commit_pending: Callable[[Key], bool] = lambda _key: False
        # No long poll has failed since the last answered one (optimistic at the start: a
        # commit the first poll has not seen yet is still reported, since metadata compares
        # with the watermarks the poll carries).
        self._healthy = False
        self.long_polls = 0  # answered long polls (for metrics and tests)
        # Parked fetches completed by news / by their timeout (module docstring: Accounting).
        self.parked_woken = 0
        self.parked_expired = 0

    def start(self) -> None:
        """Drive the purgatory's timer from the running loop."""
        self.purgatory.start()

    @property
    def followed_partitions(self) -> int:
        return len(self._followed)

    @property
    def waiting(self) -> int:
        return self.purgatory.delayed

    def confirms_tail(self, key: Key, high_watermark: int) -> bool:
        """True if `key` is followed, the follower is healthy and the newest watermark it
        knows is `high_watermark`: a later commit through any agent will reach waiting
        fetches, so a fetch at that offset may wait without asking metadata first."""
        return self._healthy and self._known.get(key) == high_watermark

    async def wait(self, seen: dict[Key, int], timeout_ms: int) -> bool:
        """Wait until a commit moves one of `seen`'s partitions past its watermark (True)
        or `timeout_ms` passes (False)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        now = self._monotonic_s()
        added = False
        for key, hwm in seen.items():
            known = self._known.get(key)
            if known is None:
                if key not in self._followed and len(self._followed) >= MAX_FOLLOWED_PARTITIONS:
                    continue
                added |= key not in self._followed
                self._followed[key] = now
                self._known[key] = hwm
            else:
                self._followed[key] = now
                if known > hwm and self._on_hwm is not None:
                    # The read that produced `seen` was behind what we heard: make the
                    # next read ask metadata rather than trust a cached tail.
                    self._on_hwm(key, known)
                elif known < hwm:
                    self._known[key] = hwm
        if added:
            self._start_follower()
        op = DelayedFetch(timeout_ms, self._known, seen, future)
        parked = not self.purgatory.try_complete_else_watch(op, list(seen))
        try:
            news = await future
        finally:
            if not op.is_completed:  # the fetch was cancelled: leave the timer now
                op.force_complete()
        if parked:
            if op.expired:
                self.parked_expired += 1
            else:
                self.parked_woken += 1
        return news

    def committed(self, key: Key, high_watermark: int) -> None:
        """This agent committed data to `key`, which now ends at `high_watermark` (the
        chunk cache already knows the new chunks). Checks the partition's waiters even if
        the long poll told us of this watermark first (deferred news, see _follow)."""
        self._learn(key, high_watermark, force=True)

    def _settle(self, key: Key) -> None:
        hwm = self._known.get(key)
        if hwm is not None:
            self._learn(key, hwm, force=True)

    def _learn(self, key: Key, high_watermark: int, *, force: bool = False) -> None:
        if self._on_hwm is not None:
            self._on_hwm(key, high_watermark)
        if key in self._known and (force or high_watermark > self._known[key]):
            self._known[key] = max(high_watermark, self._known[key])
            self.purgatory.check_and_complete(key)

    def _fail(self, key: Key) -> None:
        """Metadata says the partition is gone: answer its waiters now (their next read
        reports the error) and stop following it."""
        self._followed.pop(key, None)
        self._known.pop(key, None)
        for op in self.purgatory.watchers_for(key):
            op.wake()

    # -- following other agents' commits -----------------------------------------------

    def _start_follower(self) -> None:
        if self._follow_changed is not None:
            self._follow_changed.set()
        if self._follower is None and not self._closed:
            self._follow_changed = asyncio.Event()
            self._follower = asyncio.get_running_loop().create_task(self._follow(), name="commit-follower")

    def _expire_followed(self) -> None:
        cutoff = self._monotonic_s() - self._linger_s
        for key in [k for k, t in self._followed.items() if t < cutoff]:
            if any(not op.is_completed for op in self.purgatory.watchers_for(key)):
                continue
            del self._followed[key]
            self._known.pop(key, None)

    async def _follow(self) -> None:
        changed = self._follow_changed
        assert changed is not None
        self._healthy = True
        try:
            while not self._closed:
                self._expire_followed()
                if not self._followed:
                    break
                changed.clear()
                known = [PartitionWatermark(t, p, self._known[(t, p)]) for t, p in self._followed]
                call = asyncio.ensure_future(self._metadata.wait_for_commits(known, self._long_poll_ms))
                wake = asyncio.ensure_future(changed.wait())
                try:
                    await asyncio.wait({call, wake}, return_when=asyncio.FIRST_COMPLETED)
                except asyncio.CancelledError:
                    call.cancel()
                    raise
                finally:
                    wake.cancel()
                if not call.done():  # a partition was added: ask again with it
                    call.cancel()
                    with contextlib.suppress(BaseException):
                        await call
                    continue
                try:
                    moved = call.result()
                except Exception as exc:  # boundary: the follow task must not die
                    # metadata unreachable: waiters time out normally
                    self._healthy = False
                    log.debug("commit follow failed: %s", exc)
                    await asyncio.sleep(self._retry_s)
                    continue
                self.long_polls += 1
                self._healthy = True
                self._apply_moved(moved)
        finally:
            self._healthy = False
            self._follower = None
            self._follow_changed = None

    def _apply_moved(self, moved: Sequence[PartitionWatermark]) -> None:
        """One long poll's answer: fail the partitions in error, learn the watermarks that
        moved (an answer that is most likely our own commit settles a little later)."""
        loop = asyncio.get_running_loop()
        for m in moved:
            key = (m.topic_id, m.partition)
            if not m.error_code and m.last_stable_offset >= 0 and self._on_stable is not None:
                # before any waiter is woken: its re-read must see this LSO
                self._on_stable(key, m.high_watermark, m.last_stable_offset)
            if m.error_code:
                self._fail(key)
            elif key in self._known and self.local_commit_pending(key):
                # Most likely our own commit, answered to the long poll before our
                # commit call returned: `committed()` will wake the waiters once the
                # chunk cache has the new chunks, so their re-read needs no metadata
                # call. Record the watermark now (the next long poll must not answer
                # it again) and wake them anyway after LOCAL_SETTLE_MS.
                if m.high_watermark > self._known[key]:
                    self._known[key] = m.high_watermark
                    loop.call_later(LOCAL_SETTLE_MS / 1000.0, self._settle, key)
            else:
                self._learn(key, m.high_watermark)

    async def close(self) -> None:
        self._closed = True
        follower = self._follower
        if follower is not None:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower
        await self.purgatory.shutdown()
