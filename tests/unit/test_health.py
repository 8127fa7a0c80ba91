"""agent.health.Readiness: the probe's result is cached for a second (injected clock),
draining answers 503 without probing, and a failing or raising probe means not ready."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from agent.health import Readiness, dependency_probe
from agent.read_deadline import ReadDeadline
from fileformat.objectstore import open_async_store


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    t.join(5)
    loop.close()


def test_probe_result_is_cached_for_a_second(loop: asyncio.AbstractEventLoop) -> None:
    answers = [None, "metadata did not answer within 1000 ms"]
    calls = 0

    async def probe() -> str | None:
        nonlocal calls
        calls += 1
        return answers[min(calls - 1, 1)]

    clock = Clock()
    r = Readiness(probe, loop, timeout_ms=1000, monotonic_s=clock)
    assert r.check().ready
    clock.now_s += 0.999
    assert r.check().ready and calls == 1
    clock.now_s += 0.001
    v = r.check()
    assert not v.ready and v.reason == "metadata did not answer within 1000 ms" and calls == 2


def test_draining_is_not_ready_without_probing(loop: asyncio.AbstractEventLoop) -> None:
    async def probe() -> str | None:
        raise AssertionError("must not probe while draining")

    r = Readiness(probe, loop, timeout_ms=1000, monotonic_s=Clock())
    r.draining = True
    v = r.check()
    assert (v.ready, v.reason) == (False, "draining") and r.probes == 0


def test_a_raising_probe_means_not_ready(loop: asyncio.AbstractEventLoop) -> None:
    async def probe() -> str | None:
        raise RuntimeError("boom")

    v = Readiness(probe, loop, timeout_ms=1000, monotonic_s=Clock()).check()
    assert not v.ready and "boom" in v.reason


class _DeadMetadata:
    async def live_agents(self) -> list[object]:
        raise ConnectionRefusedError("refused")


class _SlowMetadata:
    async def live_agents(self) -> list[object]:
        await asyncio.sleep(3600)
        return []


def test_dependency_probe_names_what_failed() -> None:
    store = open_async_store("memory://health-probe")
    slow = asyncio.run(dependency_probe(_SlowMetadata(), store, 50)())  # type: ignore[arg-type]
    assert slow == "metadata did not answer within 50 ms"
    dead = asyncio.run(dependency_probe(_DeadMetadata(), store, 50)())  # type: ignore[arg-type]
    assert dead is not None and dead.startswith("metadata: ConnectionRefusedError")


def test_expire_now_ends_the_armed_read_as_a_timeout() -> None:
    async def main() -> None:
        deadline = ReadDeadline(asyncio.get_running_loop())
        reader = asyncio.StreamReader()

        async def read() -> bytes:
            deadline.arm(3600)
            try:
                return await reader.readexactly(4)
            except asyncio.CancelledError:
                if deadline.disarm():
                    raise TimeoutError from None
                raise

        task = asyncio.create_task(read())
        await asyncio.sleep(0)
        deadline.expire_now()
        with pytest.raises(TimeoutError):
            await task
        deadline.expire_now()  # disarmed: nothing happens
        deadline.close()

    asyncio.run(main())
