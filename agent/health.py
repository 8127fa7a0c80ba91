"""An agent's liveness and readiness, as served at /healthz and /readyz (agent.metrics).

Alive: the process answers HTTP at all (the endpoint's thread runs); nothing is checked,
so a slow bucket or metadata service never makes Kubernetes restart a healthy agent.

Ready: the agent is not draining (a SIGTERM turns readiness off before anything else, so
load balancers and probes stop sending new clients first), and the last probe found both
dependencies answering within `timeout_ms`:

- metadata: `live_agents()` (one small SQL read behind the metadata service);
- the bucket: `head()` of a key that need not exist (a not-found answer is an answer).

Probes are cheap but not free, so a result is reused for `cache_ms` (one second): a storm
of probes costs one check per second. The probe runs on the agent's event loop (the
clients are async) and is asked for from the HTTP server's threads; one probe at a time,
the others wait for its result. The clock is injected (`monotonic_s`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from fileformat.objectstore import AsyncObjectStore
from fileformat.objectstore.errors import ObjectNotFound
from metadata.api_types import MetadataClient

PROBE_KEY = "skiff-readiness-probe"  # never written: a HEAD of it answers "not found"


@dataclass(frozen=True)
class Verdict:
    ready: bool
    reason: str  # "ok", "draining", or what failed


Probe = Callable[[], Coroutine[Any, Any, str | None]]
"""A readiness probe: None when every dependency answered, else what failed."""


def dependency_probe(metadata: MetadataClient, store: AsyncObjectStore, timeout_ms: int) -> Probe:
    """Metadata and the bucket, each within `timeout_ms`, checked concurrently."""
    timeout_s = timeout_ms / 1000.0

    async def check_metadata() -> str | None:
        try:
            await asyncio.wait_for(metadata.live_agents(), timeout_s)
        except TimeoutError:
            return f"metadata did not answer within {timeout_ms} ms"
        except Exception as e:  # any failure means not ready; say which
            return f"metadata: {type(e).__name__}: {e}"
        return None

    async def check_bucket() -> str | None:
        try:
            await asyncio.wait_for(store.head(PROBE_KEY), timeout_s)
        except ObjectNotFound:
            return None
        except TimeoutError:
            return f"bucket did not answer within {timeout_ms} ms"
        except Exception as e:
            return f"bucket: {type(e).__name__}: {e}"
        return None

    async def probe() -> str | None:
        failures = [f for f in await asyncio.gather(check_metadata(), check_bucket()) if f]
        return "; ".join(failures) or None

    return probe


class Readiness:
    """Thread-safe readiness with a cached probe result (see the module docstring)."""

    def __init__(
        self,
        probe: Probe,
        loop: asyncio.AbstractEventLoop,
        *,
        timeout_ms: int,
        cache_ms: int = 1_000,
        monotonic_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self._probe = probe
        self._loop = loop
        self._wait_s = 2 * timeout_ms / 1000.0 + 1.0  # the probe bounds itself; this is a backstop
        self._cache_s = cache_ms / 1000.0
        self._now = monotonic_s
        self._lock = threading.Lock()
        self._cached: tuple[float, Verdict] | None = None
        self.draining = False
        self.probes = 0  # probes run (for tests and metrics)

    def check(self) -> Verdict:
        """Called from any thread but the loop's own (it waits for the loop)."""
        if self.draining:
            return Verdict(False, "draining")
        with self._lock:
            cached = self._cached
            if cached is not None and self._now() - cached[0] < self._cache_s:
                return cached[1]
            self.probes += 1
            failure: str | None
            try:
                failure = asyncio.run_coroutine_threadsafe(self._probe(), self._loop).result(self._wait_s)
            except Exception as e:  # the loop is closing or stuck: not ready
                failure = f"probe failed: {type(e).__name__}: {e}"
            verdict = Verdict(failure is None, failure or "ok")
            self._cached = (self._now(), verdict)
        if self.draining:  # turned while probing
            return Verdict(False, "draining")
        return verdict
