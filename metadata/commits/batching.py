"""Group commit: callers that arrive while a commit runs are committed together next.

Leader/follower, no extra thread: a caller finding no commit running becomes the leader
and runs a group made of the queue's head (itself first, then whoever queued meanwhile,
up to `max_items` requests or `max_weight` total weight, at least one); the followers
sleep until their result is set. When the group is done, the leader hands leadership
to the next queued caller (if any), which runs the next group. Requests keep their
arrival order, inside a group and across groups.

If the group function raises, every request of the group gets the exception.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

Req = TypeVar("Req")
Res = TypeVar("Res")


class _Pending(Generic[Req, Res]):
    __slots__ = ("request", "weight", "wake", "done", "result", "error")

    def __init__(self, request: Req, weight: int) -> None:
        self.request = request
        self.weight = weight
        self.wake = threading.Event()
        self.done = False
        self.result: Res | None = None
        self.error: BaseException | None = None


class GroupCommitter(Generic[Req, Res]):
    def __init__(
        self,
        run_group: Callable[[list[Req]], list[Res]],
        *,
        max_items: int = 64,
        max_weight: int = 20_000,
    ) -> None:
        self._run_group = run_group
        self.max_items = max_items
        self.max_weight = max_weight
        self._lock = threading.Lock()
        self._queue: list[_Pending[Req, Res]] = []
        self._busy = False
        self.groups = 0  # statistics: groups run, requests committed
        self.requests = 0

    def submit(self, request: Req, weight: int = 1) -> Res:
        me: _Pending[Req, Res] = _Pending(request, weight)
        with self._lock:
            self._queue.append(me)
            lead = not self._busy
            self._busy = True
        if not lead:
            me.wake.wait()
            if not me.done:  # promoted: lead the next group (we are at the head of the queue)
                self._lead()
        else:
            self._lead()
        assert me.done
        if me.error is not None:
            raise me.error
        return me.result  # type: ignore[return-value]

    def _take_group(self) -> list[_Pending[Req, Res]]:
        with self._lock:
            group: list[_Pending[Req, Res]] = []
            weight = 0
            for p in self._queue:
                if group and (len(group) >= self.max_items or weight + p.weight > self.max_weight):
                    break
                group.append(p)
                weight += p.weight
            del self._queue[: len(group)]
            return group

    def _lead(self) -> None:
        group = self._take_group()
        try:
            results = self._run_group([p.request for p in group])
            if len(results) != len(group):
                raise RuntimeError(f"group commit returned {len(results)} results for {len(group)} requests")
            for p, r in zip(group, results, strict=True):
                p.result = r
        except BaseException as e:  # boundary: the group's outcome, whatever it is, goes to every waiter
            for p in group:
                p.error = e
        finally:
            with self._lock:
                self.groups += 1
                self.requests += len(group)
                for p in group:
                    p.done = True
                nxt = self._queue[0] if self._queue else None
                if nxt is None:
                    self._busy = False
            for p in group:
                p.wake.set()
            if nxt is not None:
                nxt.wake.set()  # hand over: it runs the next group
