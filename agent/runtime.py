"""Wiring an agent together (the processes that run it are agent.process).

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
Every agent also reports its non-empty consumer groups to metadata
(`agent.groups.activity`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from skiff.agent.agent_registry import AgentIdInUse, AgentRegistry
from skiff.agent.chunk_cache import ChunkLocationCache
from skiff.agent.commit_watch import CommitWatch
from skiff.agent.config import AgentConfig
from skiff.agent.context import (
    AgentContext,
    AgentParts,
    Clock,
    ProduceSink,
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
from skiff.agent.produce_buffer import CommittedFile, ObjectPutter, ProduceBuffer
from skiff.agent.schema_cache import SchemaIdCache
from skiff.agent.transactions.coordinator import TxnCoordinator
from skiff.agent.workers.wire import FileChunk
from skiff.agent.workers.writer_client import PodWriterClient
from skiff.agent.workers.writer_server import file_chunks
from skiff.fileformat.objectstore import AsyncObjectStore, open_async_store
from skiff.fileformat.objectstore.keys import readiness_key
from skiff.fileformat.objectstore.range_cache import RangeCache
from skiff.metadata.wire.operations import AgentClient, MetadataClient

if TYPE_CHECKING:
    from skiff.agent.http_endpoint import HttpEndpoint

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
    def buffer(self) -> ProduceSink:
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

    def learn(chunk: FileChunk) -> None:
        # Long polls on its partitions are answered now rather than at the next poll (the
        # range cache holds the file's bytes, so tail consumers need no GET).
        runs = chunk.locations  # the chunk rows metadata recorded, as find_chunks returns them
        if runs:
            key = (chunk.topic_id, chunk.partition)
            end = runs[-1].last_offset + 1
            locations.add_committed(key, runs, end, plain=chunk.plain, markers=chunk.markers)
            watch.committed(key, end)

    def on_committed(committed: CommittedFile) -> None:
        for chunk in file_chunks(committed, placed=False):
            learn(chunk)

    buffer: ProduceSink
    if config.pod_writer_socket:  # a worker of `skiff agent --workers N`: the pod's writer seals
        buffer = PodWriterClient(
            config.pod_writer_socket,
            learn=learn,
            keep=bucket.keep,
            max_buffered_bytes=config.max_buffered_bytes,
            on_lost=lambda: os.kill(os.getpid(), signal.SIGTERM),  # a graceful stop
        )
    else:
        buffer = configured_produce_buffer(config, bucket, metadata, on_committed, clock.wall_ms)
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


def configured_produce_buffer(
    config: AgentConfig,
    store: ObjectPutter,
    metadata: AgentClient,
    on_committed: Callable[[CommittedFile], None],
    wall_clock_ms: Callable[[], int],
) -> ProduceBuffer:
    """The produce buffer as `config` sets it: an agent's, or a pod writer's (agent.workers)."""
    return ProduceBuffer(
        store=store,
        metadata=metadata,
        agent_id=config.agent_id,
        flush_interval_ms=config.flush_interval_ms,
        seal_lead_max_ms=config.flush_seal_lead_max_ms,
        flush_max_bytes=config.flush_max_bytes,
        flush_max_batches=config.flush_max_batches,
        max_inflight_flushes=config.max_inflight_flushes,
        max_buffered_bytes=config.max_buffered_bytes,
        commit_retry_ms=config.commit_retry_ms,
        wall_clock_ms=wall_clock_ms,
        on_committed=on_committed,
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
    if isinstance(ctx.parts.produce_buffer, PodWriterClient):
        await ctx.parts.produce_buffer.start()  # a worker serves nothing before it has its writer
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
        failure_threshold=config.readiness_failure_threshold,
        on_change=on_change,
        monotonic_s=ctx.clock.monotonic,
    )
    return Readiness(monitor, timeout_ms=config.readiness_timeout_ms, monotonic_s=ctx.clock.monotonic)


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
