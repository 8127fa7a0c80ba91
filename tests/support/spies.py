"""Spies: learn, without polling, that the code under test reached a point.

A spy replaces one method of one live object by a wrapper (an instance attribute shadows
the class's method; the method is restored when the `spy` context ends). The wrapper calls
the real method and then, if `counts(args, result)` says so, records a hit in a `Hits`,
which tests wait on:

- `Hits.wait_until(predicate)`: blocks until `predicate()` holds, re-checking it at each hit
  (so a state that only a hit can bring about is not missed: no sleep, no poll interval);
  `wait_for(n)` is `wait_until(lambda: hits.count >= n)`. From a coroutine on the loop the
  spied code runs on: `await asyncio.to_thread(hits.wait_for, n)` (the loop keeps running).
  The deadline only bounds a failing test.
- `parked_fetches(watch)`: hits when a fetch parks in an agent's fetch purgatory
  (`agent.commit_watch.CommitWatch.wait` puts it there with `try_complete_else_watch`, which
  answers False when the operation was watched, not completed).
- `partition_reads(service)`: hits after each `MetadataService.partition_states` read (the
  commit feed's long poll reads the states once before it waits for a commit, and again
  when one wakes it).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skiff.agent.commit_watch import CommitWatch
    from skiff.metadata.service import MetadataService

DEADLINE_S = 30.0


class Hits:
    def __init__(self) -> None:
        self.count = 0
        self._changed = threading.Condition()

    def hit(self) -> None:
        with self._changed:
            self.count += 1
            self._changed.notify_all()

    def wait_until(self, predicate: Callable[[], bool], timeout_s: float = DEADLINE_S) -> None:
        with self._changed:
            assert self._changed.wait_for(predicate, timeout_s), f"not reached after {self.count} hits"

    def wait_for(self, n: int, timeout_s: float = DEADLINE_S) -> None:
        self.wait_until(lambda: self.count >= n, timeout_s)


@contextlib.contextmanager
def spy(
    obj: object, name: str, counts: Callable[[tuple[Any, ...], Any], bool] = lambda _args, _result: True
) -> Iterator[Hits]:
    """Wrap `obj.name` for the context: each call whose `counts(args, result)` holds is a hit."""
    real = getattr(obj, name)
    hits = Hits()

    def wrapper(*args: Any) -> Any:
        result = real(*args)
        if counts(args, result):
            hits.hit()
        return result

    setattr(obj, name, wrapper)
    try:
        yield hits
    finally:
        delattr(obj, name)  # the class's method shows through again


def parked_fetches(watch: CommitWatch) -> contextlib.AbstractContextManager[Hits]:
    """Hits: fetches parked in `watch`'s purgatory (watched, not completed at once)."""
    return spy(
        watch.purgatory,
        "try_complete_else_watch",
        lambda args, completed: not completed and not args[0].is_completed,
    )


def partition_reads(service: MetadataService) -> contextlib.AbstractContextManager[Hits]:
    """Hits: `service.partition_states` reads done (the states are read when the hit counts)."""
    return spy(service, "partition_states")
