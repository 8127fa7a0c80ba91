"""A workaround for a kafka-python 3.0.12 client bug: a finished group join is thrown away.

kafka-python runs a member's JoinGroup + SyncGroup round trip as a task on its IO thread;
`poll(timeout_ms=N)` waits for that task only until its timer runs out and leaves it running.
When the task finishes before the next `poll()`, `BaseCoordinator.join_group_async` sees a
task that is done (`if self._join_task is None or self._join_task.is_done`), starts a new one
and drops the result: the client applies no assignment, stays REBALANCING and sends JoinGroup
again. A follower's extra JoinGroup is answered with the current generation; a leader's starts
a new rebalance (as Kafka's coordinator does for a leader rejoining a Stable group), and on a
busy machine this can go on past a test's deadline. The broker's answers are Kafka's; the bug
and the measurements are in docs/testing.md. The workaround hands the client its finished
result as a task still pending, so that its own code takes it.

Used two ways, one rule:
- tests/e2e/test_group_clients.py calls `keep_finished_join(coordinator)` before each poll;
- tests/kafka_python_suite/run.py copies this file into the extracted suite and loads it as a
  pytest plugin (`-p skiff_keep_finished_join`), whose `pytest_configure` wraps
  `join_group_async` with the same call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_MARK = "_skiff_keeps_finished_join"


def pending_join_task(value: Any) -> Any:
    """A kafka-python Future that looks pending but hands `value` to whoever waits on it."""
    from kafka.future import Future as KafkaFuture

    class PendingJoinTask(KafkaFuture):  # type: ignore[misc]
        def add_callback(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            f(*args, value, **kwargs)
            return self

    return PendingJoinTask()


def keep_finished_join(coordinator: Any) -> None:
    """If the coordinator's join task finished with a result, make it look pending with that
    result, so that the next `join_group_async` takes it instead of joining again."""
    task = coordinator._join_task
    if task is not None and task.is_done and task.succeeded():
        coordinator._join_task = pending_join_task(task.value)


def install() -> None:
    """Wrap kafka-python's `BaseCoordinator.join_group_async` (once per process)."""
    from kafka.coordinator.base import BaseCoordinator

    original = BaseCoordinator.join_group_async
    if getattr(original, _MARK, False):
        return

    async def join_group_async(self: Any, timeout_ms: Any = None) -> Any:
        keep_finished_join(self)
        return await original(self, timeout_ms)

    setattr(join_group_async, _MARK, True)
    BaseCoordinator.join_group_async = join_group_async


def pytest_configure(config: Any) -> None:
    """As a pytest plugin (the kafka-python suite's run)."""
    install()
