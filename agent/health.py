"""An agent's liveness and readiness, as served at /healthz and /readyz (agent.metrics), and
the readiness that decides whether the agent leads partitions (agent.agent_registry).

Alive: the process answers HTTP at all (the endpoint's thread runs); nothing is checked,
so a slow bucket or metadata service never makes Kubernetes restart a healthy agent.

Ready: the agent is not draining (a SIGTERM turns readiness off before anything else, so
load balancers and probes stop sending new clients first), and its last probe found both
dependencies working, each step within `timeout_ms`:

- the bucket: a PUT of a small object at `_skiff/readiness/<agent id>`
  (fileformat.objectstore.keys) with fresh bytes, then a GET of it, compared byte for byte.
  A missing bucket, credentials that cannot write or read, a full disk or a store that
  returns other bytes all fail here (a HEAD of a key that need not exist, as before,
  passed all of them). The probe goes to the object store itself, not through the range
  cache (which would answer the GET from memory);
- metadata: `live_agents()` (one small SQL read behind the metadata service).

`ReadinessMonitor` runs the probe on the agent's event loop every `interval_ms`, whether
or not anyone asks /readyz: one probe at a time (a caller that asks while one runs gets
its result). Cost: one PUT and one GET per interval per agent (17,280 of each a day at
the default 5 s), plus one metadata read. The clock is injected (`monotonic_s`).

A ready agent turns not ready only after `failure_threshold` probes in a row failed (as a
Kubernetes probe's failureThreshold): one slow PUT in an object store's latency tail must not
move every partition this agent leads to others and back. While such a run of failures is
open the next probe comes after a fifth of the interval, so a lasting failure is still seen
within about 2/5 of an interval plus the probes' time (default: 3 probes, 5 s interval,
about 2-4 s). The probe before the first success counts at once: an agent starts not ready
until a probe passes. A tolerated failure keeps /readyz at 200 with the failure in its
reason, and counts in `failures`.

On each change between ready and not ready it calls `on_change(ready)` (the runtime tells
the routing view and heartbeats at once: an agent that is not ready leads no partition and
coordinates nothing) and logs one line: ERROR with the cause when the agent turns not
ready, INFO when it is ready again; nothing per probe. A cause that changes while not
ready is not logged again (S3 messages carry request ids): /readyz shows the latest.

`Readiness` is the thread-safe view the HTTP threads read: draining, else the monitor's
last verdict; a verdict older than `stale_ms` (the loop has not probed for two intervals
and more: it is stuck) is not ready. Reading never waits for the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from skiff.fileformat.objectstore import AsyncObjectStore
from skiff.metadata.wire.operations import AgentClient

log = logging.getLogger(__name__)

DEPENDENCIES = ("bucket", "metadata")


@dataclass(frozen=True)
class Failure:
    dependency: str  # "bucket", "metadata", or "probe" (the probe itself raised)
    message: str  # one line, naming the dependency


@dataclass(frozen=True)
class Verdict:
    ready: bool
    reason: str  # "ok", "draining", or what failed
    failed: tuple[str, ...] = ()  # the dependencies that failed


Probe = Callable[[], Coroutine[Any, Any, Sequence[Failure]]]
"""A readiness probe: the failures (none when every dependency worked)."""


def bucket_check(
    store: AsyncObjectStore, key: str, timeout_ms: int, agent_id: str = ""
) -> Callable[[], Coroutine[Any, Any, Failure | None]]:
    """PUT fresh bytes at `key`, GET them back and compare; each step within `timeout_ms`."""
    timeout_s = timeout_ms / 1000.0
    where = f"bucket {store.url}"

    async def step(name: str, coro: Coroutine[Any, Any, Any]) -> tuple[Any, Failure | None]:
        try:
            return await asyncio.wait_for(coro, timeout_s), None
        except TimeoutError:
            return None, Failure("bucket", f"{where}: {name} {key} did not answer within {timeout_ms} ms")
        except Exception as e:  # boundary: a probe: any failure is not ready
            # any failure means not ready; say which step and why
            return None, Failure("bucket", f"{where}: {name} {key} failed: {type(e).__name__}: {e}")

    async def check() -> Failure | None:
        # fresh bytes every time: a GET answered from a stale copy does not pass
        body = f"skiff readiness probe of agent {agent_id}: {uuid.uuid4().hex}\n".encode()
        _, failed = await step("PUT", store.put(key, body))
        if failed is not None:
            return failed
        got, failed = await step("GET", store.get(key))
        if failed is not None:
            return failed
        if got != body:
            return Failure(
                "bucket",
                f"{where}: GET {key} returned {len(got)} bytes that are not the {len(body)} just PUT",
            )
        return None

    return check


def metadata_check(
    metadata: AgentClient, timeout_ms: int
) -> Callable[[], Coroutine[Any, Any, Failure | None]]:
    timeout_s = timeout_ms / 1000.0

    async def check() -> Failure | None:
        try:
            await asyncio.wait_for(metadata.live_agents(), timeout_s)
        except TimeoutError:
            return Failure("metadata", f"metadata did not answer within {timeout_ms} ms")
        except Exception as e:  # boundary: a readiness probe: any failure means not ready; say why
            return Failure("metadata", f"metadata: {type(e).__name__}: {e}")
        return None

    return check


def dependency_probe(
    metadata: AgentClient, store: AsyncObjectStore, timeout_ms: int, *, key: str, agent_id: str = ""
) -> Probe:
    """Metadata and the bucket, checked concurrently."""
    checks = (metadata_check(metadata, timeout_ms), bucket_check(store, key, timeout_ms, agent_id))

    async def probe() -> Sequence[Failure]:
        return [f for f in await asyncio.gather(*(c() for c in checks)) if f is not None]

    return probe


class ReadinessMonitor:
    """The periodic probe and its state machine (see the module docstring)."""

    def __init__(
        self,
        probe: Probe,
        *,
        agent_id: str,
        interval_ms: int,
        failure_threshold: int = 1,
        on_change: Callable[[bool], None] | None = None,
        monotonic_s: Callable[[], float] = time.monotonic,
    ) -> None:
        if failure_threshold < 1:
            raise ValueError(f"failure_threshold must be at least 1, got {failure_threshold}")
        self._probe = probe
        self.agent_id = agent_id
        self.interval_ms = interval_ms
        self.failure_threshold = failure_threshold
        self.failed_in_a_row = 0  # probes since the last one that passed
        self._on_change = on_change
        self._now = monotonic_s
        self._ready: bool | None = None  # None: not probed yet
        self._since_s = 0.0  # when the current state began
        # (verdict, monotonic time) of the last probe; replaced whole, read from any thread
        self.last: tuple[Verdict, float] | None = None
        self._inflight: asyncio.Future[Verdict] | None = None
        self._task: asyncio.Task[None] | None = None
        self.probes = 0
        self.failures: dict[str, int] = dict.fromkeys(DEPENDENCIES, 0)  # by dependency

    @property
    def ready(self) -> bool:
        return bool(self._ready)

    async def probe(self) -> Verdict:
        """Probe now (or join the probe already running) and record the result."""
        fut = self._inflight
        if fut is None:
            fut = self._inflight = asyncio.ensure_future(self._probe_once())
            fut.add_done_callback(self._clear_inflight)
        return await asyncio.shield(fut)

    def _clear_inflight(self, fut: asyncio.Future[Verdict]) -> None:
        if self._inflight is fut:
            self._inflight = None

    async def _probe_once(self) -> Verdict:
        self.probes += 1
        try:
            failures = tuple(await self._probe())
        except Exception as e:  # boundary: a bug in the probe: not ready, and say so
            failures = (Failure("probe", f"readiness probe raised {type(e).__name__}: {e}"),)
        for f in failures:
            self.failures[f.dependency] = self.failures.get(f.dependency, 0) + 1
        verdict = Verdict(
            not failures,
            "; ".join(f.message for f in failures) or "ok",
            tuple(f.dependency for f in failures),
        )
        self.failed_in_a_row = self.failed_in_a_row + 1 if failures else 0
        if failures and self._ready and self.failed_in_a_row < self.failure_threshold:
            verdict = Verdict(
                True,
                f"ok, but {self.failed_in_a_row} of {self.failure_threshold} probes in a row "
                f"failed: {verdict.reason}",
                verdict.failed,
            )
        self._record(verdict)
        return verdict

    def next_probe_in_s(self) -> float:
        """The wait before the next periodic probe: the interval, or a fifth of it while a
        ready agent's failures are not yet enough to turn it not ready."""
        if self._ready and self.failed_in_a_row:
            return self.interval_ms / 5000.0
        return self.interval_ms / 1000.0

    def _record(self, verdict: Verdict) -> None:
        now = self._now()
        self.last = (verdict, now)
        if verdict.ready == self._ready:
            return
        was, self._ready = self._ready, verdict.ready
        if not verdict.ready:
            log.error("agent %s not ready: %s", self.agent_id, verdict.reason)
        elif was is False:
            log.info(
                "agent %s ready again after %.1f s: bucket and metadata answer",
                self.agent_id,
                now - self._since_s,
            )
        self._since_s = now
        if self._on_change is not None:
            self._on_change(verdict.ready)

    def start(self) -> None:
        """Probe every interval on the running loop (the first probe is the caller's)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="skiff-readiness")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.next_probe_in_s())
            try:
                await self.probe()
            except asyncio.CancelledError:
                raise
            except Exception:  # boundary: the readiness task must not die
                # _probe_once catches the probe's errors; this is a bug
                log.exception("unexpected error in the readiness loop")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class ReadinessCheck(Protocol):
    """What /readyz asks: an agent's `Readiness`, or a pod writer's view of its workers."""

    def check(self) -> Verdict: ...


class Readiness:
    """What /readyz answers, from any thread, without waiting for the event loop."""

    def __init__(
        self,
        monitor: ReadinessMonitor,
        *,
        timeout_ms: int,
        monotonic_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self.monitor = monitor
        # two intervals plus a probe's longest time (PUT then GET) and a second's slack
        self.stale_s = (2 * monitor.interval_ms + 2 * timeout_ms) / 1000.0 + 1.0
        self._now = monotonic_s
        self.draining = False

    def check(self) -> Verdict:
        if self.draining:
            return Verdict(False, "draining")
        last = self.monitor.last
        if last is None:
            return Verdict(False, "not probed yet")
        verdict, at_s = last
        age_s = self._now() - at_s
        if age_s > self.stale_s:
            return Verdict(False, f"no readiness probe for {age_s:.1f} s (is the event loop stuck?)")
        return verdict
