"""`skiff agent --workers N`: one agent pod on N cores, still one file per flush interval.

Processes:

- the **writer** (this process): the pod's one `ProduceBuffer`, served to the workers on an
  abstract Unix socket that only their pids may use (agent.workers.writer_server). It seals one file per
  flush interval for the whole pod, PUTs it and commits it, so the pod's PUT rate is that of
  one agent however many workers feed it. It also runs the pod's background roles (the
  compaction loop the command line passes), reports its own object-store usage, and serves
  `metrics_port`: the writer's produce metrics (files, stages, buffered bytes, its PUTs),
  /healthz, and /readyz (ready when every worker is: their own probes, asked on their ports).
- N **workers** (spawned processes), each a whole agent (agent.process.run_agent) with its
  own agent id `ID-wI`, its own ports (every listener's port + I; metrics on metrics_port +
  1 + I) and its own broker id: clients see N brokers per pod, partitions and consumer
  groups spread over them as over any agents, and every piece of per-broker state (group
  and transaction coordinators, leases, the fetch cache, parked fetches) stays inside one
  process with nothing forwarded between workers. Their produce buffer is the writer's
  client (agent.workers.writer_client): validation, schemas, quotas and the acks are the
  worker's; sealing, PUT and commit are the writer's.

Why separate brokers rather than one listener shared by the workers (SO_REUSEPORT): a Kafka
client routes a group's requests to one coordinator node and a partition's to its leader;
behind a shared listener each connection would land on a random worker, and everything a
coordinator keeps in memory would have to be forwarded to one owner. With a broker per
worker the existing rules (leases, zones, routing) apply unchanged. The cost is N times the
connections from each client to a pod (docs/operations.md, "Workers").

Lifecycle: SIGTERM/SIGINT to the writer is passed to every worker, which drains as any agent
does (its last appends sealed at once); once all have exited, the writer seals, commits and
answers what it holds, and exits. A worker that exits on its own (a crash) stops the pod
(the others are drained, exit 1): Kubernetes restarts it whole. A worker that loses the
writer (killed) answers its pending produces with a retriable error and stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import logging
import multiprocessing
import os
import re
import secrets
import select
import signal
import urllib.error
import urllib.request
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry
from skiff.agent.config import AgentConfig
from skiff.agent.context import SystemClock
from skiff.agent.health import Verdict
from skiff.agent.produce_buffer import ProduceBuffer
from skiff.agent.runtime import BackgroundRole, BackgroundTask, configured_produce_buffer
from skiff.agent.store_metrics import TimedStore
from skiff.agent.workers.writer_server import PodWriter

log = logging.getLogger(__name__)

_WORKER_SUFFIX = "-w"
# Loggers the command line quiets (skiff.cli): the workers quiet them too.
_QUIET_LOGGERS = {"httpx": logging.WARNING, "httpcore": logging.WARNING, "alembic": logging.WARNING}
READY_ASK_TIMEOUT_S = 1.0
REAP_TIMEOUT_S = 5.0


def worker_agent_id(agent_id: str, index: int) -> str:
    return f"{agent_id}{_WORKER_SUFFIX}{index}"


def _shift_listener_ports(listeners: str | None, by: int) -> str | None:
    """`NAME://host:port,...` with every non-zero port moved by `by` (0: any free port)."""
    if not listeners:
        return listeners

    def shift(m: re.Match[str]) -> str:
        port = int(m.group(2))
        return f"{m.group(1)}{port + by if port else 0}"

    return ",".join(re.sub(r"^(.*:)(\d+)$", shift, item.strip()) for item in listeners.split(","))


def worker_config(config: AgentConfig, index: int, socket_path: str) -> AgentConfig:
    """Worker `index`'s configuration: its id, its ports, the writer's socket."""
    return config.replace(
        agent_id=worker_agent_id(config.agent_id, index),
        port=config.port + index if config.port else 0,
        advertised_port=config.advertised_port + index if config.advertised_port else None,
        listeners=_shift_listener_ports(config.listeners, index),
        advertised_listeners=_shift_listener_ports(config.advertised_listeners, index),
        metrics_port=config.metrics_port + 1 + index if config.metrics_port else 0,
        workers=1,
        pod_writer_socket=socket_path,
    )


def check_worker_ports(config: AgentConfig) -> None:
    """Refuse a port that two of the pod's processes would take (worker I listens on every
    listener's port + I and serves metrics on metrics_port + 1 + I; the writer on metrics_port)."""
    taken: dict[int, str] = {}
    if config.metrics_port:
        taken[config.metrics_port] = "the writer's metrics"
    listener_ports = [li.port for li in config.resolved_listeners() if li.port]
    for i in range(config.workers):
        ports = [p + i for p in listener_ports]
        if config.metrics_port:
            ports.append(config.metrics_port + 1 + i)
        for port in ports:
            if port > 65535 or port in taken:
                raise ValueError(
                    f"with {config.workers} workers, port {port} is "
                    + (f"taken by {taken[port]} and worker {i}" if port in taken else "out of range")
                    + ": worker I listens on each listener's port + I and metrics_port + 1 + I"
                )
            taken[port] = f"worker {i}"


def _run_worker(
    config: AgentConfig, log_level: int, formatter: type[logging.Formatter], fmt: str | None
) -> None:
    """A worker process's main (spawned: nothing of the writer's state is inherited)."""
    from skiff.agent.process import run_agent

    handler = logging.StreamHandler()
    handler.setFormatter(formatter(fmt))
    logging.basicConfig(level=log_level, handlers=[handler])
    for name, level in _QUIET_LOGGERS.items():
        logging.getLogger(name).setLevel(level)
    raise SystemExit(run_agent(config))


def _log_setup() -> tuple[int, type[logging.Formatter], str | None]:
    """This process's root level and formatter, for the workers to log alike."""
    root = logging.getLogger()
    formatter = root.handlers[0].formatter if root.handlers else None
    if formatter is None:
        return root.level, logging.Formatter, None
    return root.level, type(formatter), getattr(formatter, "_fmt", None)


class _PodCollector(Collector):
    """The writer's /metrics: its produce buffer, its store, its workers."""

    def __init__(self, pod: Pod) -> None:
        self._pod = pod

    def collect(self) -> Iterator[Metric]:
        from skiff.agent.metrics import produce_buffer_families
        from skiff.agent.store_metrics import object_store_families

        yield from object_store_families([("agent", self._pod.store.stats.snapshot())])
        yield from produce_buffer_families(self._pod.buffer)
        yield GaugeMetricFamily(
            "skiff_pod_workers_connected",
            "Worker processes connected to this pod's writer",
            value=self._pod.writer.workers_connected,
        )


class _PodReadiness:
    """Ready when every worker says it is on its own /readyz (asked from the HTTP thread)."""

    def __init__(self, pod: Pod) -> None:
        self._pod = pod

    def check(self) -> Verdict:
        if self._pod.stopping:
            return Verdict(False, "draining")
        if not self._pod.worker_metrics_urls:
            return Verdict(False, "workers serve no metrics port (metrics_port 0)")
        for i, url in enumerate(self._pod.worker_metrics_urls):
            try:
                with urllib.request.urlopen(f"{url}/readyz", timeout=READY_ASK_TIMEOUT_S) as r:
                    if r.status != 200:
                        return Verdict(False, f"worker {i} not ready")
            except (urllib.error.URLError, OSError) as e:
                reason = getattr(e, "reason", e)
                return Verdict(False, f"worker {i} not ready: {reason}")
        return Verdict(True, "ok")


@dataclasses.dataclass
class Pod:
    """The writer process's parts (what usage reporting and /metrics read)."""

    config: AgentConfig
    metadata: Any  # metadata.wire.operations.AgentClient
    store: Any  # the object store (TimedStore)
    buffer: ProduceBuffer
    writer: PodWriter
    background: list[BackgroundTask] = dataclasses.field(default_factory=list)
    worker_metrics_urls: list[str] = dataclasses.field(default_factory=list)
    stopping: bool = False


def _worker_metrics_urls(config: AgentConfig) -> list[str]:
    if not config.metrics_port:
        return []
    host = "127.0.0.1" if config.host in ("", "0.0.0.0") else config.host
    host = "[::1]" if host == "::" else (f"[{host}]" if ":" in host else host)
    return [f"http://{host}:{config.metrics_port + 1 + i}" for i in range(config.workers)]


def build_pod_buffer(
    config: AgentConfig, metadata: Any, store: Any, allowed_pids: Callable[[], Collection[int]]
) -> tuple[ProduceBuffer, PodWriter]:
    """The pod's produce buffer (as one agent's, under the pod's agent id) and its writer."""
    writer: PodWriter | None = None

    def on_committed(committed: Any) -> None:
        assert writer is not None
        writer.on_committed(committed)

    buffer = configured_produce_buffer(config, store, metadata, on_committed, SystemClock().wall_ms)
    writer = PodWriter(buffer, allowed_pids)
    return buffer, writer


def run_pod(config: AgentConfig, background: Sequence[BackgroundRole] = ()) -> int:
    """`skiff agent` with `workers` > 1 (the module docstring); 0 if every worker and the
    writer shut down cleanly, else 1."""
    from skiff.agent.process import connect_agent_dependencies, run_until_exit

    check_worker_ports(config)

    async def main() -> bool:
        metadata, raw_store, bucket_url = await connect_agent_dependencies(config, "skiff agent")
        store = TimedStore(raw_store)  # PUT latency by operation, as an agent's
        # An abstract socket (no file: the root filesystem may be read-only); the writer
        # takes connections from its workers' pids only.
        socket_path = f"\0skiff-pod-{os.getpid()}-{secrets.token_hex(8)}"
        pids: set[int] = set()
        buffer, writer = build_pod_buffer(config, metadata, store, lambda: pids)
        await writer.start(socket_path)
        pod = Pod(config, metadata, store, buffer, writer, worker_metrics_urls=_worker_metrics_urls(config))
        return await _serve_pod(pod, socket_path, bucket_url, background, pids)

    return 0 if run_until_exit(main()) else 1


async def _serve_pod(
    pod: Pod, socket_path: str, bucket_url: str, background: Sequence[BackgroundRole], pids: set[int]
) -> bool:
    from skiff.agent.http_endpoint import serve_collector
    from skiff.agent.process import GC_THRESHOLDS
    from skiff.agent.usage_reporting import UsageReporting

    config = pod.config
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(
            target=_run_worker,
            args=(worker_config(config, i, socket_path), *_log_setup()),
            name=worker_agent_id(config.agent_id, i),
        )
        for i in range(config.workers)
    ]
    for w in workers:
        w.start()
        assert w.pid is not None
        pids.add(w.pid)
    for role in background:
        task = role(pod.metadata, bucket_url)
        task.start()
        pod.background.append(task)
    usage = UsageReporting(pod)  # type: ignore[arg-type]  # a pod offers what it reads
    usage.start()
    pod.background.append(usage)
    gc.freeze()  # as an agent's (agent.process.GC_THRESHOLDS): the writer holds every in-flight batch
    gc.set_threshold(*GC_THRESHOLDS)
    registry = CollectorRegistry()
    registry.register(_PodCollector(pod))
    http = (
        serve_collector(registry, config.host, config.metrics_port, _PodReadiness(pod))
        if config.metrics_port
        else None
    )
    print(f"skiff agent {config.agent_id}: {config.workers} workers and their writer", flush=True)
    crashed = await _wait_for_stop_or_exit(workers)
    pod.stopping = True
    clean = await _stop_workers(workers, config.shutdown_timeout_ms) and not crashed
    for task in pod.background:
        with contextlib.suppress(Exception):
            await task.close()
    await pod.writer.close()
    if http is not None:
        http.close()
    await pod.store.close()
    await pod.metadata.close()
    log.info("agent pod %s stopped (%s)", config.agent_id, "cleanly" if clean else "not cleanly")
    return clean


async def _wait_for_stop_or_exit(workers: list[Any]) -> bool:
    """Until SIGINT/SIGTERM (False) or a worker's exit (True: a crash stops the pod)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    sentinels = {w.sentinel: w for w in workers}
    exited = asyncio.Event()
    for fd in sentinels:
        loop.add_reader(fd, exited.set)
    try:
        stop_task = asyncio.ensure_future(stop.wait())
        exit_task = asyncio.ensure_future(exited.wait())
        await asyncio.wait({stop_task, exit_task}, return_when=asyncio.FIRST_COMPLETED)
        stop_task.cancel()
        exit_task.cancel()
    finally:
        for fd in sentinels:
            loop.remove_reader(fd)
    if stop.is_set():
        return False
    # A sentinel is readable a moment before the process can be reaped: join the ones that are.
    ready, _, _ = select.select(list(sentinels), [], [], 0)
    for fd in ready:
        w = sentinels[fd]
        await asyncio.to_thread(w.join, REAP_TIMEOUT_S)
        log.error("worker %s exited (code %s): stopping the pod", w.name, w.exitcode)
    return True


async def _stop_workers(workers: list[Any], timeout_ms: int) -> bool:
    """SIGTERM every live worker, wait for all (their own shutdown is bounded by
    `timeout_ms`; a little more here); True if all exited 0."""
    for w in workers:
        if w.is_alive() and w.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(w.pid, signal.SIGTERM)
    deadline_s = asyncio.get_running_loop().time() + timeout_ms / 1000 + 5
    for w in workers:
        left = deadline_s - asyncio.get_running_loop().time()
        await asyncio.to_thread(w.join, max(left, 0.0))
        if w.is_alive():
            log.error("worker %s still running past the shutdown timeout: killing it", w.name)
            w.kill()
            await asyncio.to_thread(w.join, 1.0)
    return all(w.exitcode == 0 for w in workers)
