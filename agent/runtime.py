"""Wiring an agent process together, and the `skiff agent` / `skiff playground` entry points.

`start_agent` builds one agent from its parts (configuration, a metadata client, an
async object store): the handler context, the produce buffer, the range cache, the
commit watch, the Kafka listener, the membership heartbeat and the readiness probe
(`agent.health`: probed once before serving, then every `readiness_probe_interval_ms`;
its changes switch this agent's routing and heartbeat at once, `agent_readiness`). `RunningAgent.close`
stops them in the safe order: stop accepting connections, flush and commit whatever is
buffered (so nothing a producer was promised is dropped), stop heartbeating.

Graceful shutdown (SIGTERM, `RunningAgent.shutdown`), bounded by `shutdown_timeout_ms`:

1. /readyz turns 503 (`agent.health`), so probes and load balancers stop first;
2. the listener closes and every connection stops reading: a request read is answered, a
   request not read is the client's to retry (a closed connection is retriable to every
   Kafka client);
3. the agent deregisters, so other agents' Metadata answers stop naming it at once;
4. background roles stop, the group coordinator answers its waiters NOT_COORDINATOR and
   releases its leases (members move to the next coordinator without waiting a TTL);
5. the produce buffer seals and commits what it holds; every in-flight produce is then
   answered with its offsets (or its error) and fetches finish (at most their max wait);
6. connections, commit watch and clients close.

Past the timeout the rest is abandoned (produces not yet acked stay unacked: the
producer retries them elsewhere), one log line says what, and `skiff agent` exits 1.

Then the process exits (`run_until_exit`), within `EXIT_TIMEOUT_MS`: `asyncio.run` and the
interpreter would wait without limit for a task that ignores its cancellation and for
every worker thread still running (the default executor's `asyncio.to_thread` calls, such
as an abandoned compaction job or a blocking store call; the metadata client's pool), and
a playground that logged "stopped cleanly" then lived on until SIGKILL. What is still
running at the deadline is logged with its stack, and the process exits at once with the
shutdown's code (everything promised was committed before; what is left is abandoned
work).

`run_playground` runs everything in one process on the embedded default: SQLite at
DATA_DIR/metadata.db, a file:// bucket at DATA_DIR/bucket, one agent, and the metadata
HTTP API (the same service object, so the HTTP view and the agent agree).

Background roles: `run_agent` and `run_playground` take factories of extra background
tasks (`BackgroundRole`: given the metadata client and the bucket URL, an object with
`start()` and `async close()`). The `skiff` command line passes the compactor's
maintenance loop (retention, compaction, GC, offset expiry on a timer) through them, so
this module never imports the compactor (the import contract in pyproject.toml). Every
agent also reports its non-empty consumer groups to metadata (`agent.groups.activity`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import io
import logging
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from skiff.agent.agent_registry import AgentIdInUse, AgentRegistry
from skiff.agent.bucket_claim import BUCKET_CLAIM_EVERY_HEARTBEATS, BucketClaim, claim_bucket_at_start
from skiff.agent.chunk_cache import ChunkLocationCache
from skiff.agent.commit_watch import CommitWatch
from skiff.agent.config import AgentConfig, env_var
from skiff.agent.context import (
    AgentContext,
    AgentParts,
    Clock,
    SystemClock,
    acl_cache,
    live_agents_view,
    quota_cache,
    topic_cache,
)
from skiff.agent.groups.activity import GroupActivityReporter
from skiff.agent.groups.coordinator import GroupCoordinator
from skiff.agent.health import Readiness, ReadinessMonitor, dependency_probe
from skiff.agent.metrics import TimedStore, instrument_metadata_client
from skiff.agent.network.listener_servers import start_listener_servers
from skiff.agent.network.server import AgentServer
from skiff.agent.produce_buffer import CommittedFile, ProduceBuffer
from skiff.agent.schema_cache import SchemaIdCache
from skiff.agent.transactions.coordinator import TxnCoordinator
from skiff.agent.usage_reporting import UsageReporting
from skiff.fileformat.objectstore import AsyncObjectStore, open_async_store
from skiff.fileformat.objectstore.keys import readiness_key
from skiff.fileformat.objectstore.range_cache import RangeCache
from skiff.metadata.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    SASL_AUTHENTICATION_FAILED,
    MetadataError,
    MetadataUnavailable,
)
from skiff.metadata.wire.operations import MetadataClient

if TYPE_CHECKING:
    from skiff.agent.metrics import HttpEndpoint

log = logging.getLogger(__name__)


class BackgroundTask(Protocol):
    def start(self) -> None: ...
    async def close(self) -> None: ...


BackgroundRole = Callable[[MetadataClient, str], BackgroundTask]
"""A background role's factory: (metadata client, bucket URL) -> a task to start and close."""


@dataclass
class RunningAgent:
    config: AgentConfig
    context: AgentContext
    server: AgentServer
    registry: AgentRegistry
    store: AsyncObjectStore  # the object store itself (context.parts.bucket wraps it)
    metadata: MetadataClient
    group_activity: GroupActivityReporter | None = None
    background: list[BackgroundTask] = field(default_factory=list)
    # Every listener's server (`server` is the first): more than one with `listeners` set.
    servers: list[AgentServer] = field(default_factory=list)
    readiness: Readiness | None = None  # the agent's own probe (agent.health); set by start_agent
    http: HttpEndpoint | None = None
    deregistered: bool = False

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def bootstrap(self) -> str:
        return f"{self.context.agents.self_info.host}:{self.server.port}"

    @property
    def cache(self) -> RangeCache:
        return self.context.parts.bucket

    @property
    def buffer(self) -> ProduceBuffer:
        return self.context.parts.produce_buffer

    @property
    def watch(self) -> CommitWatch:
        return self.context.parts.commit_watch

    def serve_health(self, host: str, port: int) -> None:
        """/metrics, /healthz and /readyz on `port` (agent.metrics); needs the running loop."""
        from skiff.agent.metrics import serve_metrics

        self.http = serve_metrics(self, host, port, self.readiness)

    async def close(self, *, close_clients: bool = True) -> None:
        if self.readiness is not None:
            await self.readiness.monitor.close()
        for task in self.background:
            await task.close()
        self.background.clear()
        for server in self.servers or [self.server]:
            await server.close()
        if self.group_activity is not None:
            await self.group_activity.close()
        await close_parts(self.context.parts)
        await self.context.acls.close()
        await self.context.quotas.close()
        await self.registry.close(deregister=not self.deregistered)
        self.deregistered = True
        if self.http is not None:
            self.http.close()
            self.http = None
        if close_clients:
            await self.store.close()
            await self.metadata.close()

    async def drain(self) -> None:
        """Steps 1-5 of a graceful shutdown (module docstring); `close()` does the rest."""
        if self.readiness is not None:
            self.readiness.draining = True
            await self.readiness.monitor.close()
        connections = [c for server in self.servers or [self.server] for c in server.stop_reading()]
        await self.registry.close()
        self.deregistered = True
        for task in self.background:
            await task.close()
        self.background.clear()
        await self.context.parts.groups.close()
        await self.buffer.drain()
        if connections:
            await asyncio.wait(connections)

    async def shutdown(self, timeout_ms: int | None = None) -> bool:
        """Drain and close within `timeout_ms` (default: the configured
        `shutdown_timeout_ms`). False if the time ran out: what was abandoned is logged
        and the rest is closed without waiting."""
        timeout_ms = self.config.shutdown_timeout_ms if timeout_ms is None else timeout_ms
        log.info("agent %s shutting down (up to %d ms)", self.config.agent_id, timeout_ms)
        try:
            await asyncio.wait_for(self.drain(), timeout_ms / 1000.0)
        except TimeoutError:
            log.error(
                "agent %s: shutdown_timeout_ms=%d passed; abandoning %d buffered produce bytes "
                "(not acked: producers retry them) and %d connections with requests in flight",
                self.config.agent_id,
                timeout_ms,
                self.buffer.buffered_bytes,
                sum(server.connection_count for server in self.servers or [self.server]),
            )
            await self._abandon()
            return False
        await self.close()
        log.info("agent %s stopped cleanly", self.config.agent_id)
        return True

    async def _abandon(self) -> None:
        """Close what can be closed without waiting for the bucket or metadata."""
        for server in self.servers or [self.server]:
            await server.close()
        if self.http is not None:
            self.http.close()
            self.http = None
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.store.close(), 1)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.metadata.close(), 1)


def build_agent_context(
    config: AgentConfig,
    metadata: MetadataClient,
    store: AsyncObjectStore,
    *,
    clock: Clock | None = None,
) -> AgentContext:
    """Every component of one agent, wired and typed; nothing is started yet."""
    clock = clock or SystemClock()
    agents = live_agents_view(config, clock)
    # Fetches and the produce buffer see the bucket through the range cache: reads are
    # cached and coalesced, the files this agent PUTs are kept whole for tail consumers.
    bucket = RangeCache(
        store,
        max_bytes=config.fetch_cache_bytes,
        coalesce_gap_bytes=config.fetch_coalesce_gap_bytes,
        max_inflight_bytes=config.fetch_read_inflight_bytes,
    )
    locations = ChunkLocationCache(ttl_ms=config.chunk_cache_ttl_ms)
    watch = CommitWatch(
        metadata,
        retry_interval_ms=config.fetch_poll_interval_ms,
        long_poll_ms=max(1, min(10_000, config.metadata_timeout_ms)),
        follow_linger_ms=max(60_000, 2 * config.fetch_max_wait_ms_cap),
        on_high_watermark=locations.saw_high_watermark,
        on_stable=locations.saw_stable,
        monotonic_s=clock.monotonic,
    )

    def on_committed(committed: CommittedFile) -> None:
        # Long polls on its partitions are answered now rather than at the next poll (the
        # range cache kept the file at its PUT, so tail consumers need no GET).
        for spec, result in zip(committed.chunks, committed.results, strict=True):
            runs = result.locations  # the chunk rows metadata recorded, as find_chunks returns them
            if runs:
                key = (spec.topic_id, spec.partition)
                plain = not any(b.is_transactional or b.control_type >= 0 for b in spec.batches)
                markers = any(b.control_type >= 0 for b in spec.batches)
                locations.add_committed(key, runs, runs[-1].last_offset + 1, plain=plain, markers=markers)
                watch.committed(key, runs[-1].last_offset + 1)

    buffer = ProduceBuffer(
        store=bucket,
        metadata=metadata,
        agent_id=config.agent_id,
        flush_interval_ms=config.flush_interval_ms,
        seal_lead_max_ms=config.flush_seal_lead_max_ms,
        flush_max_bytes=config.flush_max_bytes,
        flush_max_batches=config.flush_max_batches,
        max_inflight_flushes=config.max_inflight_flushes,
        max_buffered_bytes=config.max_buffered_bytes,
        commit_retry_ms=config.commit_retry_ms,
        wall_clock_ms=clock.wall_ms,
        on_committed=on_committed,
    )
    watch.local_commit_pending = buffer.is_committing
    groups = GroupCoordinator.fenced(config, metadata, agents, clock)
    transactions = TxnCoordinator(
        metadata=metadata,
        store=bucket,
        agents=agents,
        agent_id=config.agent_id,
        wall_ms=clock.wall_ms,
        on_committed=on_committed,
        scan_interval_ms=config.transaction_scan_interval_ms,
        redrive_after_ms=config.transaction_redrive_after_ms,
        max_retry_delay_ms=config.transaction_redrive_max_backoff_ms,
    )
    return AgentContext(
        config=config,
        metadata=metadata,
        topics=topic_cache(config, metadata, clock),
        agents=agents,
        clock=clock,
        parts=AgentParts(
            bucket=bucket,
            produce_buffer=buffer,
            chunk_locations=locations,
            commit_watch=watch,
            groups=groups,
            transactions=transactions,
        ),
        schemas=SchemaIdCache(metadata, monotonic=clock.monotonic),
        acls=acl_cache(config, metadata),
        quotas=quota_cache(config, metadata, clock),
    )


def start_parts(parts: AgentParts) -> None:
    """Start the components' background work on the running loop."""
    parts.commit_watch.start()
    parts.groups.start()
    parts.transactions.start()


async def close_parts(parts: AgentParts) -> None:
    """Stop them in the safe order: groups, then flush and commit whatever is buffered
    (nothing a producer was promised is dropped), then the commit watch."""
    await parts.groups.close()
    await parts.transactions.close()
    await parts.produce_buffer.close()
    await parts.commit_watch.close()


async def start_agent(
    config: AgentConfig,
    metadata: MetadataClient,
    store: AsyncObjectStore,
    *,
    clock: Clock | None = None,
) -> RunningAgent:
    store = TimedStore(store)  # request latency by operation (agent.metrics)
    instrument_metadata_client(metadata)
    ctx = build_agent_context(config, metadata, store, clock=clock)
    registry = AgentRegistry(metadata, ctx.agents, interval_ms=config.heartbeat_interval_ms)
    readiness = agent_readiness(config, metadata, store, ctx, registry)
    # Probed before serving: the first Metadata answers and the first heartbeat tell the truth.
    await readiness.monitor.probe()
    await ctx.acls.start()  # with authorization on: the ACLs loaded before any client connects
    await ctx.quotas.start()  # client quotas loaded (and polled) before any client connects
    start_parts(ctx.parts)
    servers = await start_listener_servers(ctx)
    server = servers[0]
    try:
        await registry.start()
    except AgentIdInUse:  # undo the start-up; the caller reports it
        for s in servers:
            await s.close()
        await close_parts(ctx.parts)
        await ctx.acls.close()
        await ctx.quotas.close()
        raise
    groups = ctx.parts.groups
    activity = GroupActivityReporter(
        metadata, lambda: [g.group_id for g in groups.list_groups() if g.members]
    )
    activity.start()
    readiness.monitor.start()
    for li, s in zip(config.resolved_listeners(), servers, strict=True):
        log.info(
            "agent %s serving Kafka (%s, %s) on %s:%d",
            config.agent_id,
            li.name,
            li.security_protocol,
            s.host or "*",
            s.port,
        )
    return RunningAgent(
        config, ctx, server, registry, store, metadata, activity, servers=servers, readiness=readiness
    )


def agent_readiness(
    config: AgentConfig,
    metadata: MetadataClient,
    store: AsyncObjectStore,
    ctx: AgentContext,
    registry: AgentRegistry,
) -> Readiness:
    """The agent's readiness probe (agent.health), wired to its membership: a change turns
    this agent's routing on or off at once and heartbeats it at once."""

    def on_change(ready: bool) -> None:
        ctx.agents.set_self_ready(ready)
        registry.wake()

    probe = dependency_probe(
        metadata,
        store,  # the store itself: the range cache would answer the GET from memory
        config.readiness_timeout_ms,
        key=readiness_key(config.agent_id),
        agent_id=config.agent_id,
    )
    monitor = ReadinessMonitor(
        probe,
        agent_id=config.agent_id,
        interval_ms=config.readiness_probe_interval_ms,
        on_change=on_change,
        monotonic_s=ctx.clock.monotonic,
    )
    return Readiness(monitor, timeout_ms=config.readiness_timeout_ms, monotonic_s=ctx.clock.monotonic)


def start_background(agent: RunningAgent, roles: Sequence[BackgroundRole], bucket_url: str) -> None:
    for role in roles:
        task = role(agent.metadata, bucket_url)
        task.start()
        agent.background.append(task)


def start_usage_reporting(agent: RunningAgent) -> None:
    """The object-store usage reports (agent.usage_reporting): last among the background
    tasks, so that its closing report includes what the others did until they stopped."""
    reporting = UsageReporting(agent)
    reporting.start()
    agent.background.append(reporting)


def absolute_bucket_url(url: str) -> str:
    """`file://relative/path` -> `file:///absolute/path` (the store wants absolute paths)."""
    if url.startswith("file://") and not url.startswith("file:///"):
        return "file://" + str(Path(url[len("file://") :]).resolve())
    return url


def open_agent_store(config: AgentConfig) -> AsyncObjectStore:
    url = absolute_bucket_url(config.bucket_url)
    if url.startswith("s3://"):
        from skiff.fileformat.objectstore.s3 import S3Options

        options = S3Options(
            connect_timeout=config.s3_connect_timeout_ms / 1000,
            read_timeout=config.s3_read_timeout_ms / 1000,
            max_attempts=config.s3_max_attempts,
        )
        return open_async_store(url, s3_options=options)
    return open_async_store(url)


async def _wait_for_stop_signal() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()


# The collector's thresholds for the agent process. With CPython's default (700 net
# allocations per young collection) the objects of in-flight produce requests (which live
# one flush interval, ~250 ms) survive two young collections, reach the old generation and
# make full collections frequent and long (each scans every in-flight request): at 7,000
# small produce requests/s (bench/produce_request_cpu.py), 27 full collections of ~30 ms
# in 6 s: 1.1 s of GC in 5 s of CPU. Rarer young collections let most request objects die
# by reference count first: with 20,000 and 100,000 the same run spent 0.41 and 0.28 s in
# GC with no full collection, and 124 -> 100-106 us of agent CPU per request with 50,000
# (each young collection scans at most that many objects: a few ms).
GC_THRESHOLDS = (50_000, 10, 10)


def run_agent(config: AgentConfig, background: Sequence[BackgroundRole] = ()) -> int:
    """`skiff agent`: serve (and run the background roles) until SIGINT/SIGTERM, then shut
    down gracefully; 0 if that finished within `shutdown_timeout_ms`, else 1."""
    from skiff.agent.kube_zone import with_node_zone
    from skiff.metadata.wire.connect import open_metadata_client
    from skiff.metadata.wire.credentials import CredentialsError

    config = with_node_zone(config)  # SKIFF_ZONE_FROM_NODE: the Kubernetes node's zone label

    async def main() -> bool:
        try:
            metadata = open_metadata_client(
                config.metadata_url,
                timeout_s=config.metadata_timeout_ms / 1000,
                token=config.metadata_token,
                token_file=config.metadata_token_file,
                ca_file=config.metadata_ca_file,
                cert_file=config.metadata_client_cert,
                key_file=config.metadata_client_key,
            )
        except CredentialsError as e:
            raise SystemExit(f"skiff agent: cannot start: {e}") from None
        refused = await _credentials_refused(metadata)
        if refused is not None:
            await metadata.close()
            raise SystemExit(f"skiff agent: cannot start: the metadata service refused: {refused}")
        bucket_url = absolute_bucket_url(config.bucket_url)
        other_bucket = await claim_bucket_at_start(metadata, bucket_url)
        if other_bucket is not None:
            await metadata.close()
            raise SystemExit(f"skiff agent: cannot start: {other_bucket}")
        store = open_agent_store(config)
        try:
            agent = await start_agent(config, metadata, store)
        except AgentIdInUse as e:
            await store.close()
            await metadata.close()
            raise SystemExit(f"skiff agent: cannot start: {e}") from None
        claims = BucketClaim(
            metadata, bucket_url, config.heartbeat_interval_ms * BUCKET_CLAIM_EVERY_HEARTBEATS
        )
        claims.start()
        agent.background.append(claims)
        start_background(agent, background, bucket_url)
        start_usage_reporting(agent)
        gc.freeze()  # start-up objects never die: keep full collections short (tail latency)
        gc.set_threshold(*GC_THRESHOLDS)
        if config.metrics_port:
            agent.serve_health(config.host, config.metrics_port)
        where = ", ".join(f"{s.host or '*'}:{s.port}" for s in agent.servers)
        print(f"skiff agent {config.agent_id} listening on {where}", flush=True)
        await _wait_for_stop_signal()
        return await agent.shutdown()

    return 0 if run_until_exit(main()) else 1


async def _credentials_refused(metadata: MetadataClient) -> str | None:
    """The metadata service's message if it refuses this process's token (an unreachable
    service is not a refusal: the agent starts and retries as usual)."""
    try:
        await metadata.live_agents()
    except MetadataError as e:
        if e.error_code in (SASL_AUTHENTICATION_FAILED, CLUSTER_AUTHORIZATION_FAILED):
            return e.message
    except MetadataUnavailable:
        pass
    return None


def _quiet_server_class() -> type:
    import uvicorn

    class QuietServer(uvicorn.Server):
        """uvicorn inside our loop: signals are ours, not uvicorn's."""

        @contextlib.contextmanager
        def capture_signals(self):  # type: ignore[no-untyped-def]
            yield

    return QuietServer


def _bind_listening_socket(host: str, port: int) -> socket.socket:
    """A bound, listening TCP socket on host:port, made before anything starts, so a taken
    port fails the playground before it announces itself (uvicorn serves on it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def run_playground(
    *, data_dir: str, host: str, port: int, metadata_port: int, background: Sequence[BackgroundRole] = ()
) -> int:
    """`skiff playground`: SQLite + file:// bucket under data_dir, one agent, the metadata
    API, and the background roles (the CLI passes compaction, retention and GC on a timer)."""
    import uvicorn
    from skiff.metadata.server.app import create_app
    from skiff.metadata.server.auth import exposure_warnings, load_tokens
    from skiff.metadata.server.local_client import LocalMetadataClient
    from skiff.metadata.service import MetadataService

    root = Path(data_dir).resolve()
    (root / "bucket").mkdir(parents=True, exist_ok=True)
    db_url = f"sqlite:///{root / 'metadata.db'}"
    bucket_url = f"file://{root / 'bucket'}"
    config = AgentConfig.from_env(
        agent_id=os.environ.get("SKIFF_AGENT_ID", "playground"),
        host=host,
        port=port,
        advertised_host=os.environ.get("SKIFF_ADVERTISED_HOST")
        or ("localhost" if host in ("0.0.0.0", "::") else host),
        bucket_url=bucket_url,
        metadata_url=db_url,
    )
    if env_var("group_initial_rebalance_delay_ms") not in os.environ:
        # No initial rebalance delay unless asked for, as in Kafka's development server.properties.
        config = config.replace(group_initial_rebalance_delay_ms=0)
    if env_var("metrics_port") not in os.environ:
        # The playground runs next to other things on a laptop: no HTTP port unless asked for.
        config = config.replace(metrics_port=0)

    # The playground's metadata API is open unless SKIFF_METADATA_TOKENS(_FILE) is set; it
    # says so when it listens beyond loopback.
    tokens = load_tokens(None)
    for warning in exposure_warnings(host, auth_enabled=tokens is not None, tls=False):
        log.warning("%s", warning)
    _QuietServer = _quiet_server_class()
    # Both ports are taken before anything is announced: the metadata socket here, the
    # Kafka port by start_agent; a clash raises OSError(EADDRINUSE) before "is up".
    http_socket = _bind_listening_socket(host, metadata_port)
    metadata_port = http_socket.getsockname()[1]
    if not config.advertised_metadata_url:  # what `--bootstrap-server` admin commands are told
        advertised = config.resolved_advertised_host()
        advertised = f"[{advertised}]" if ":" in advertised else advertised
        config = config.replace(advertised_metadata_url=f"http://{advertised}:{metadata_port}")

    async def main() -> bool:
        service = MetadataService.from_url(db_url, bucket_url=bucket_url)
        metadata = LocalMetadataClient(service, owns_service=True)
        store = open_async_store(bucket_url)
        try:
            agent = await start_agent(config, metadata, store)
        except BaseException:
            http_socket.close()  # the process exits with the error; the port is free at once
            raise
        start_background(agent, background, bucket_url)
        start_usage_reporting(agent)
        gc.freeze()
        http = _QuietServer(
            uvicorn.Config(
                create_app(service, tokens=tokens),
                host=host,
                port=metadata_port,
                log_level="warning",
                access_log=False,
            )
        )
        http_task = asyncio.create_task(http.serve(sockets=[http_socket]))
        print(
            f"Skiff playground is up.\n"
            f"  Kafka bootstrap:  {config.resolved_advertised_host()}:{agent.port}\n"
            f"  metadata API:     http://{host}:{metadata_port}/docs\n"
            f"  web console:      http://{host}:{metadata_port}/console\n"
            f"  data directory:   {root}\n"
            f"Try:  echo hello | kcat -b localhost:{agent.port} -t demo -P\n"
            f"      kcat -b localhost:{agent.port} -t demo -C -e\n"
            f"Stop with Ctrl-C.",
            flush=True,
        )
        if config.metrics_port:
            agent.serve_health(host, config.metrics_port)
        try:
            await _wait_for_stop_signal()
            # Background roles stop first, while the listener still answers: the demo's
            # clients (skiff.cli.demo) leave their group and flush at once instead of
            # waiting on a closed listener. Then the agent drains (its commits go through
            # the service in this process, not through the HTTP API), then the metadata API.
            await _close_background(agent, config.shutdown_timeout_ms)
            clean = await agent.shutdown()
        finally:
            await _stop_http(http, http_task)
        return clean

    return 0 if run_until_exit(main()) else 1


async def _close_background(agent: RunningAgent, timeout_ms: int) -> None:
    """Close the background roles within `timeout_ms` (what is left is the drain's)."""
    tasks, agent.background = list(agent.background), []
    try:
        async with asyncio.timeout(timeout_ms / 1000):
            for task in tasks:
                await task.close()
    except TimeoutError:
        log.warning("background roles still closing after %d ms; the drain goes on", timeout_ms)


async def _stop_http(http: Any, task: asyncio.Task[Any], timeout_s: float = 2.0) -> None:
    """Stop the playground's metadata API: uvicorn waits for open requests without limit
    unless told to force its exit, which it is after `timeout_s`."""
    http.should_exit = True
    done, _ = await asyncio.wait({task}, timeout=timeout_s)
    if not done:
        log.warning("metadata API: requests still open %.0f s after the stop; closing them", timeout_s)
        http.force_exit = True
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
    if not done:
        task.cancel()
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await task


# How long what is left of the process may take to end once `main` returned (tasks,
# worker threads): after the shutdown's own timeout, within Kubernetes' 30 s grace period.
EXIT_TIMEOUT_MS = 3_000


def run_until_exit(main: Coroutine[Any, Any, bool], exit_timeout_ms: int = EXIT_TIMEOUT_MS) -> bool:
    """`asyncio.run(main)` with a bounded end (module docstring): the tasks still pending
    are cancelled, then they and the worker threads get until `exit_timeout_ms` to end.
    Whatever outlives that is logged with its stack and the process exits at once
    (`os._exit`) with `main`'s outcome (0 if True, else 1)."""
    loop = asyncio.new_event_loop()
    # Our own default executor: it is shut down without waiting (asyncio.run's waits for
    # every `to_thread` call to return, with no limit).
    executor = ThreadPoolExecutor(thread_name_prefix="skiff-to-thread")
    loop.set_default_executor(executor)
    asyncio.set_event_loop(loop)
    try:
        clean = loop.run_until_complete(main)
    finally:
        deadline_s = time.monotonic() + exit_timeout_ms / 1000
        stuck_tasks = _cancel_remaining_tasks(loop, deadline_s)
        executor.shutdown(wait=False, cancel_futures=True)
        asyncio.set_event_loop(None)
        loop.close()
    stuck_threads = _join_threads(deadline_s)
    if stuck_tasks or stuck_threads:
        _log_stuck(stuck_tasks, stuck_threads, exit_timeout_ms)
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0 if clean else 1)
    return clean


def _cancel_remaining_tasks(loop: asyncio.AbstractEventLoop, deadline_s: float) -> list[asyncio.Task[Any]]:
    """Cancel every task still pending and wait for them until `deadline_s`; the ones
    that did not end (a task that swallows its cancellation and goes on)."""
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for t in tasks:
        t.cancel()
    if tasks:
        timeout_s = max(deadline_s - time.monotonic(), 0.0)
        loop.run_until_complete(asyncio.wait(tasks, timeout=timeout_s))
    for t in tasks:
        if t.done() and not t.cancelled() and t.exception() is not None:
            log.error("task %s failed during shutdown", t.get_name(), exc_info=t.exception())
    with contextlib.suppress(Exception):
        loop.run_until_complete(asyncio.wait_for(loop.shutdown_asyncgens(), 1))
    return [t for t in tasks if not t.done()]


def _join_threads(deadline_s: float) -> list[threading.Thread]:
    """Wait until `deadline_s` for the threads the interpreter would wait for at exit
    (every non-daemon thread: worker pools' threads are); the ones still running."""
    me = threading.current_thread()
    waiting = [t for t in threading.enumerate() if t is not me and not t.daemon]
    for t in waiting:
        t.join(max(deadline_s - time.monotonic(), 0.0))
    return [t for t in waiting if t.is_alive()]


def _log_stuck(tasks: list[asyncio.Task[Any]], threads: list[threading.Thread], exit_timeout_ms: int) -> None:
    frames = sys._current_frames()
    for task in tasks:
        task_stack = io.StringIO()
        task.print_stack(file=task_stack)
        log.error(
            "exit: task still running %d ms after the stop; abandoned: %s",
            exit_timeout_ms,
            task_stack.getvalue(),
        )
    for thread in threads:
        frame = frames.get(thread.ident or -1)
        stack = "".join(traceback.format_stack(frame)) if frame is not None else ""
        log.error(
            "exit: thread %s still running %d ms after the stop; abandoned:\n%s",
            thread.name,
            exit_timeout_ms,
            stack,
        )
