"""Wiring an agent process together, and the `skiff agent` / `skiff playground` entry points.

`start_agent` builds one agent from its parts (configuration, a metadata client, an
async object store): the handler context, the produce buffer, the range cache, the
commit watch, the Kafka listener and the membership heartbeat. `RunningAgent.close`
stops them in the safe order: stop accepting connections, flush and commit whatever is
buffered (so nothing a producer was promised is dropped), stop heartbeating.

`run_playground` runs everything in one process on the embedded default: SQLite at
DATA_DIR/metadata.db, a file:// bucket at DATA_DIR/bucket, one agent, and the metadata
HTTP API (the same service object, so the HTTP view and the agent agree).

Background roles: `run_agent` and `run_playground` take factories of extra background
tasks (`BackgroundRole`: given the metadata client and the bucket URL, an object with
`start()` and `async close()`). The `skiff` command line passes the compactor's
maintenance loop (retention, compaction, GC, offset expiry on a timer) through them, so
this module never imports the compactor (the import contract in pyproject.toml). Every
agent also reports its non-empty consumer groups to metadata (`agent.group_activity`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from agent.agent_registry import AgentIdInUse, AgentRegistry
from agent.chunk_cache import ChunkLocationCache
from agent.commit_watch import CommitWatch
from agent.config import AgentConfig, env_var
from agent.context import AgentContext, AgentParts, Clock, SystemClock, live_agents_view, topic_cache
from agent.group_activity import GroupActivityReporter
from agent.group_coordinator import GroupCoordinator
from agent.produce_buffer import CommittedFile, ProduceBuffer
from agent.server import AgentServer, start_agent_server
from agent.txn_coordinator import TxnCoordinator
from fileformat.objectstore import AsyncObjectStore, open_async_store
from fileformat.objectstore.range_cache import RangeCache
from metadata.api_types import MetadataClient

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

    async def close(self, *, close_clients: bool = True) -> None:
        for task in self.background:
            await task.close()
        await self.server.close()
        if self.group_activity is not None:
            await self.group_activity.close()
        await close_parts(self.context.parts)
        await self.registry.close()
        if close_clients:
            await self.store.close()
            await self.metadata.close()


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
    )

    def on_committed(committed: CommittedFile) -> None:
        # Long polls on its partitions are answered now rather than at the next poll (the
        # range cache kept the file at its PUT, so tail consumers need no GET).
        for spec, result in zip(committed.chunks, committed.results, strict=True):
            runs = result.locations  # the chunk rows metadata recorded, as find_chunks returns them
            if runs:
                key = (spec.topic_id, spec.partition)
                locations.add_committed(key, runs, runs[-1].last_offset + 1)
                watch.committed(key, runs[-1].last_offset + 1)

    buffer = ProduceBuffer(
        store=bucket,
        metadata=metadata,
        agent_id=config.agent_id,
        flush_interval_ms=config.flush_interval_ms,
        flush_max_bytes=config.flush_max_bytes,
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
    ctx = build_agent_context(config, metadata, store, clock=clock)
    start_parts(ctx.parts)
    server = await start_agent_server(ctx, config.host, config.port)
    registry = AgentRegistry(metadata, ctx.agents, interval_ms=config.heartbeat_interval_ms)
    try:
        await registry.start()
    except AgentIdInUse:  # undo the start-up; the caller reports it
        await server.close()
        await close_parts(ctx.parts)
        raise
    groups = ctx.parts.groups
    activity = GroupActivityReporter(
        metadata, lambda: [g.group_id for g in groups.list_groups() if g.members]
    )
    activity.start()
    log.info("agent %s serving Kafka on %s:%d", config.agent_id, config.host, server.port)
    return RunningAgent(config, ctx, server, registry, store, metadata, activity)


def start_background(agent: RunningAgent, roles: Sequence[BackgroundRole], bucket_url: str) -> None:
    for role in roles:
        task = role(agent.metadata, bucket_url)
        task.start()
        agent.background.append(task)


def absolute_bucket_url(url: str) -> str:
    """`file://relative/path` -> `file:///absolute/path` (the store wants absolute paths)."""
    if url.startswith("file://") and not url.startswith("file:///"):
        return "file://" + str(Path(url[len("file://") :]).resolve())
    return url


def open_agent_store(config: AgentConfig) -> AsyncObjectStore:
    url = absolute_bucket_url(config.bucket_url)
    if url.startswith("s3://"):
        from fileformat.objectstore.s3 import S3Options

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
    """`skiff agent`: serve (and run the background roles) until SIGINT/SIGTERM, then
    flush and exit."""
    from metadata.client import open_metadata_client

    async def main() -> None:
        metadata = open_metadata_client(config.metadata_url, timeout_s=config.metadata_timeout_ms / 1000)
        store = open_agent_store(config)
        try:
            agent = await start_agent(config, metadata, store)
        except AgentIdInUse as e:
            await store.close()
            await metadata.close()
            raise SystemExit(f"skiff agent: cannot start: {e}") from None
        start_background(agent, background, absolute_bucket_url(config.bucket_url))
        gc.freeze()  # start-up objects never die: keep full collections short (tail latency)
        gc.set_threshold(*GC_THRESHOLDS)
        if config.metrics_port:
            from agent.metrics import serve_metrics

            serve_metrics(agent, config.host, config.metrics_port)
        print(f"skiff agent {config.agent_id} listening on {config.host}:{agent.port}", flush=True)
        try:
            await _wait_for_stop_signal()
        finally:
            await agent.close()

    asyncio.run(main())
    return 0


def _quiet_server_class() -> type:
    import uvicorn

    class QuietServer(uvicorn.Server):
        """uvicorn inside our loop: signals are ours, not uvicorn's."""

        @contextlib.contextmanager
        def capture_signals(self):  # type: ignore[no-untyped-def]
            yield

    return QuietServer


def run_playground(
    *, data_dir: str, host: str, port: int, metadata_port: int, background: Sequence[BackgroundRole] = ()
) -> int:
    """`skiff playground`: SQLite + file:// bucket under data_dir, one agent, the metadata
    API, and the background roles (the CLI passes compaction, retention and GC on a timer)."""
    import uvicorn

    from metadata.app import create_app
    from metadata.local_client import LocalMetadataClient
    from metadata.service import MetadataService

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

    _QuietServer = _quiet_server_class()

    async def main() -> None:
        service = MetadataService.from_url(db_url, bucket_url=bucket_url)
        metadata = LocalMetadataClient(service, owns_service=True)
        store = open_async_store(bucket_url)
        agent = await start_agent(config, metadata, store)
        start_background(agent, background, bucket_url)
        gc.freeze()
        http = _QuietServer(
            uvicorn.Config(
                create_app(service), host=host, port=metadata_port, log_level="warning", access_log=False
            )
        )
        http_task = asyncio.create_task(http.serve())
        print(
            f"Skiff playground is up.\n"
            f"  Kafka bootstrap:  {config.resolved_advertised_host()}:{agent.port}\n"
            f"  metadata API:     http://{host}:{metadata_port}/docs\n"
            f"  data directory:   {root}\n"
            f"Try:  echo hello | kcat -b localhost:{agent.port} -t demo -P\n"
            f"      kcat -b localhost:{agent.port} -t demo -C -e\n"
            f"Stop with Ctrl-C.",
            flush=True,
        )
        try:
            await _wait_for_stop_signal()
        finally:
            http.should_exit = True
            await agent.close()
            with contextlib.suppress(Exception):
                await http_task

    asyncio.run(main())
    return 0
