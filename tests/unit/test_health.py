"""agent.health: the readiness probe writes and reads the bucket (a store that cannot PUT,
cannot GET or returns other bytes is not ready, and the cause is named), the monitor's
state machine logs one ERROR per turn to not ready and one INFO per turn back (nothing per
probe), tolerates fewer failures in a row than its threshold, runs one probe at a time, and /readyz's view (`Readiness`) answers from the last
probe, draining first, a stale probe as not ready (injected clock)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from skiff.agent.health import Failure, Readiness, ReadinessMonitor, dependency_probe
from skiff.agent.network.read_deadline import ReadDeadline
from skiff.fileformat.objectstore import open_async_store
from skiff.fileformat.objectstore.errors import StorageError
from skiff.fileformat.objectstore.keys import readiness_key
from skiff.fileformat.objectstore.memory import AsyncMemoryStore

KEY = readiness_key("a1")


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


class _Metadata:
    def __init__(self) -> None:
        self.down = False

    async def live_agents(self) -> list[object]:
        if self.down:
            raise ConnectionRefusedError("refused")
        return []


class _SlowMetadata:
    async def live_agents(self) -> list[object]:
        await asyncio.sleep(3600)
        return []


class BrokenStore(AsyncMemoryStore):
    """A memory store whose PUT or GET can be made to fail, or to return other bytes."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.fail_put: str | None = None
        self.fail_get: str | None = None
        self.wrong_bytes = False
        self.puts = 0
        self.gets = 0

    async def put(self, key: str, data: object) -> None:  # type: ignore[override]
        self.puts += 1
        if self.fail_put:
            raise StorageError(self.fail_put, key=key)
        await super().put(key, data)  # type: ignore[arg-type]

    async def get(self, key: str) -> bytes:
        self.gets += 1
        if self.fail_get:
            raise StorageError(self.fail_get, key=key)
        body = await super().get(key)
        return body[::-1] if self.wrong_bytes else body


def _monitor(store: BrokenStore, md: object, clock: Clock, changes: list[bool]) -> ReadinessMonitor:
    probe = dependency_probe(md, store, 1000, key=KEY, agent_id="a1")  # type: ignore[arg-type]
    return ReadinessMonitor(
        probe, agent_id="a1", interval_ms=5000, on_change=changes.append, monotonic_s=clock
    )


def _records(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "skiff.agent.health"]


def test_the_bucket_probe_writes_and_reads_back(caplog: pytest.LogCaptureFixture) -> None:
    store = BrokenStore("health-ok")
    changes: list[bool] = []
    m = _monitor(store, _Metadata(), Clock(), changes)
    caplog.set_level(logging.INFO, logger="skiff.agent.health")
    v = asyncio.run(m.probe())
    assert v.ready and v.reason == "ok"
    assert (store.puts, store.gets) == (1, 1)  # one PUT and one GET per probe
    assert store._sync.get(KEY).startswith(b"skiff readiness probe of agent a1: ")
    assert changes == [True] and _records(caplog) == []  # ready at start: nothing to say


@pytest.mark.parametrize(
    ("broken", "expected"),
    [
        ("put", "bucket memory://health-put: PUT _skiff/readiness/a1 failed: StorageError: NoSuchBucket"),
        ("get", "bucket memory://health-get: GET _skiff/readiness/a1 failed: StorageError: AccessDenied"),
        ("bytes", "bucket memory://health-bytes: GET _skiff/readiness/a1 returned"),
    ],
)
def test_a_store_that_cannot_write_or_read_is_not_ready_and_says_why(
    caplog: pytest.LogCaptureFixture, broken: str, expected: str
) -> None:
    store = BrokenStore(f"health-{broken}")
    store.fail_put = "NoSuchBucket: the bucket does not exist" if broken == "put" else None
    store.fail_get = "AccessDenied: no s3:GetObject" if broken == "get" else None
    store.wrong_bytes = broken == "bytes"
    changes: list[bool] = []
    m = _monitor(store, _Metadata(), Clock(), changes)
    caplog.set_level(logging.INFO, logger="skiff.agent.health")
    v = asyncio.run(m.probe())
    assert not v.ready and v.reason.startswith(expected) and v.failed == ("bucket",)
    assert changes == [False]
    assert m.failures == {"bucket": 1, "metadata": 0}
    assert _records(caplog) == [(logging.ERROR, f"agent a1 not ready: {v.reason}")]


def test_one_error_per_turn_to_not_ready_and_one_info_per_turn_back(caplog: pytest.LogCaptureFixture) -> None:
    store = BrokenStore("health-turns")
    md = _Metadata()
    clock = Clock()
    changes: list[bool] = []
    m = _monitor(store, md, clock, changes)
    caplog.set_level(logging.DEBUG, logger="skiff.agent.health")

    async def main() -> None:
        assert (await m.probe()).ready
        store.fail_put = "NoSuchBucket: gone"
        for _ in range(3):  # still failing: nothing more is logged
            clock.now_s += 5
            assert not (await m.probe()).ready
        md.down = True  # another cause while not ready: not logged either (/readyz shows it)
        clock.now_s += 5
        v = await m.probe()
        assert set(v.failed) == {"bucket", "metadata"} and "metadata: ConnectionRefusedError" in v.reason
        store.fail_put = None
        md.down = False
        for _ in range(2):
            clock.now_s += 5
            assert (await m.probe()).ready
        clock.now_s += 5
        md.down = True
        assert not (await m.probe()).ready

    asyncio.run(main())
    logged = _records(caplog)
    assert [level for level, _ in logged] == [logging.ERROR, logging.INFO, logging.ERROR]
    assert "PUT _skiff/readiness/a1 failed: StorageError: NoSuchBucket: gone" in logged[0][1]
    assert logged[1][1] == "agent a1 ready again after 20.0 s: bucket and metadata answer"
    assert logged[2][1].startswith("agent a1 not ready: metadata: ConnectionRefusedError")
    assert changes == [True, False, True, False]
    assert m.failures == {"bucket": 4, "metadata": 2}


def test_a_ready_agent_tolerates_fewer_failures_in_a_row_than_the_threshold(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One slow or failed probe in an object store's latency tail does not move the agent's
    partitions: with a threshold of 3, the third failure in a row turns it not ready, a pass
    in between starts the count again, and the failures are counted and shown meanwhile."""
    store = BrokenStore("health-threshold")
    clock = Clock()
    changes: list[bool] = []
    probe = dependency_probe(_Metadata(), store, 1000, key=KEY, agent_id="a1")  # type: ignore[arg-type]
    m = ReadinessMonitor(
        probe,
        agent_id="a1",
        interval_ms=5000,
        failure_threshold=3,
        on_change=changes.append,
        monotonic_s=clock,
    )
    r = Readiness(m, timeout_ms=1000, monotonic_s=clock)
    caplog.set_level(logging.INFO, logger="skiff.agent.health")

    async def main() -> None:
        assert (await m.probe()).ready and m.next_probe_in_s() == 5.0
        store.fail_put = "SlowDown: reduce your request rate"
        for n in (1, 2):
            v = await m.probe()
            assert v.ready and v.failed == ("bucket",), v
            assert v.reason.startswith(f"ok, but {n} of 3 probes in a row failed: bucket memory://")
            assert "SlowDown" in v.reason and r.check() == v
            assert m.next_probe_in_s() == 1.0  # a fifth of the interval while failing
        store.fail_put = None
        assert (await m.probe()).reason == "ok" and m.failed_in_a_row == 0
        assert m.next_probe_in_s() == 5.0
        store.fail_put = "NoSuchBucket: gone"
        assert [(await m.probe()).ready for _ in range(3)] == [True, True, False]
        assert not r.check().ready and r.check().reason.startswith("bucket memory://")
        assert m.next_probe_in_s() == 5.0  # not ready: the normal interval again
        store.fail_put = None
        assert (await m.probe()).ready  # one pass turns it ready again

    asyncio.run(main())
    assert changes == [True, False, True]
    assert m.failures == {"bucket": 5, "metadata": 0}
    assert [level for level, _ in _records(caplog)] == [logging.ERROR, logging.INFO]


def test_an_agent_starts_not_ready_whatever_the_threshold() -> None:
    store = BrokenStore("health-start")
    store.fail_put = "NoSuchBucket: the bucket does not exist"
    changes: list[bool] = []
    probe = dependency_probe(_Metadata(), store, 1000, key=KEY, agent_id="a1")  # type: ignore[arg-type]
    m = ReadinessMonitor(
        probe, agent_id="a1", interval_ms=5000, failure_threshold=3, on_change=changes.append
    )
    assert not asyncio.run(m.probe()).ready and changes == [False]
    with pytest.raises(ValueError, match="failure_threshold must be at least 1"):
        ReadinessMonitor(probe, agent_id="a1", interval_ms=5000, failure_threshold=0)


def test_one_probe_at_a_time() -> None:
    release = asyncio.Event()
    calls = 0

    async def probe() -> list[Failure]:
        nonlocal calls
        calls += 1
        await release.wait()
        return []

    async def main() -> None:
        m = ReadinessMonitor(probe, agent_id="a1", interval_ms=5000)
        waiters = [asyncio.ensure_future(m.probe()) for _ in range(5)]
        await asyncio.sleep(0)
        release.set()
        verdicts = await asyncio.gather(*waiters)
        assert calls == 1 and all(v.ready for v in verdicts)
        await m.probe()  # the next one probes again
        assert calls == 2

    asyncio.run(main())


def test_readyz_view_reads_the_last_probe_and_a_stale_one_is_not_ready() -> None:
    clock = Clock()
    answers: list[list[Failure]] = [[], [Failure("metadata", "metadata did not answer within 1000 ms")]]

    async def probe() -> list[Failure]:
        return answers.pop(0)

    m = ReadinessMonitor(probe, agent_id="a1", interval_ms=5000, monotonic_s=clock)
    r = Readiness(m, timeout_ms=1000, monotonic_s=clock)
    assert r.check() == r.check() and not r.check().ready  # not probed yet
    asyncio.run(m.probe())
    assert r.check().ready
    clock.now_s += r.stale_s  # the loop has not probed for a while, but not too long
    assert r.check().ready
    clock.now_s += 0.001
    v = r.check()
    assert not v.ready and "no readiness probe for" in v.reason
    asyncio.run(m.probe())
    v = r.check()
    assert (v.ready, v.reason) == (False, "metadata did not answer within 1000 ms")
    r.draining = True
    assert r.check().reason == "draining" and m.probes == 2  # reading never probes


def test_a_raising_probe_means_not_ready() -> None:
    async def probe() -> list[Failure]:
        raise RuntimeError("boom")

    v = asyncio.run(ReadinessMonitor(probe, agent_id="a1", interval_ms=5000).probe())
    assert not v.ready and "boom" in v.reason


def test_dependency_probe_names_what_failed() -> None:
    store = open_async_store("memory://health-probe")

    async def failed(md: object) -> list[str]:
        return [f.message for f in await dependency_probe(md, store, 50, key=KEY)()]  # type: ignore[arg-type]

    assert asyncio.run(failed(_SlowMetadata())) == ["metadata did not answer within 50 ms"]
    md = _Metadata()
    md.down = True
    (dead,) = asyncio.run(failed(md))
    assert dead.startswith("metadata: ConnectionRefusedError")


def test_readiness_keys_are_valid_for_any_agent_id() -> None:
    from skiff.fileformat.objectstore import validate_key

    for agent_id in ("a1", "pod-7f9c.default", ".hidden", "a/b", "..", "é x"):
        key = readiness_key(agent_id)
        assert validate_key(key) == key and key.startswith("_skiff/readiness/") and key.count("/") == 2


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
