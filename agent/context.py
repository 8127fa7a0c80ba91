"""What every request handler gets: the agent's configuration and its components, typed.

One `AgentContext` per agent process, built once at start-up by
`agent.runtime.build_agent_context` and passed explicitly to handlers
(`handler(ctx, request)`); nothing in the agent reads globals, and nothing is looked up
by name. It holds:

- `config`: the frozen `AgentConfig`;
- `metadata`: a `metadata.wire.operations.AgentClient` (in-process or HTTP);
- `topics`: the `TopicCache` in front of metadata's topic lookups;
- `agents`: the `LiveAgents` routing view (brokers, leaders, coordinators);
- `clock`: wall time in ms and a monotonic clock, injectable for tests;
- `acls`: the `AclCache` the handlers authorize against (`agent.handlers.authorized`);
- `schemas`: the `SchemaIdCache` in front of the schema registry, for the topics that ask
  for broker-side schema validation (`agent.schema_validation`);
- `quotas`: the `QuotaCache` of client quotas that produce, fetch and the connection enforce;
- `parts`: the data-path components (`AgentParts`), so that a reader can follow
  produce -> `parts.produce_buffer` -> PUT through `parts.bucket` -> commit, and
  fetch -> `parts.chunk_locations` / metadata -> `parts.bucket` (the range cache) -> GET.

Per-connection state (a connection's produce ordering) lives on the connection
(`agent.handlers.ConnectionInfo`), not here.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from skiff.agent.acl_cache import AclCache
from skiff.agent.agent_registry import LiveAgents
from skiff.agent.config import AgentConfig
from skiff.agent.quota_cache import QuotaCache
from skiff.agent.quotas import WindowConfig
from skiff.agent.schema_cache import SchemaIdCache
from skiff.agent.topic_cache import TopicCache
from skiff.metadata.build_info import SKIFF_VERSION
from skiff.metadata.types import AgentInfo, BatchResult
from skiff.metadata.wire.operations import AgentClient

if TYPE_CHECKING:
    from skiff.agent.chunk_cache import ChunkLocationCache
    from skiff.agent.commit_watch import CommitWatch
    from skiff.agent.groups.coordinator import GroupCoordinator
    from skiff.agent.produce_buffer import BatchWaiter, PendingBatch
    from skiff.agent.transactions.coordinator import TxnCoordinator
    from skiff.fileformat.objectstore.range_cache import RangeCache


class Clock(Protocol):
    def wall_ms(self) -> int: ...
    def monotonic(self) -> float: ...


class SystemClock:
    def wall_ms(self) -> int:
        return int(time.time() * 1000)

    def monotonic(self) -> float:
        return time.monotonic()


class ProduceSink(Protocol):
    """What the Produce handler, the runtime and the metrics need of a produce buffer: the
    agent's own `ProduceBuffer`, or a pod worker's client of the pod's writer
    (agent.workers.writer_client.PodWriterClient)."""

    files_flushed: int
    bytes_flushed: int
    flush_failures: int
    commit_retries: int
    stage_seconds: dict[str, float]
    stage_max_seconds: dict[str, float]

    @property
    def buffered_bytes(self) -> int: ...
    @property
    def post_seal_estimate_s(self) -> float: ...
    def has_room(self, size: int) -> bool: ...
    def is_committing(self, key: tuple[uuid.UUID, int]) -> bool: ...
    def append_now(
        self,
        topic_id: uuid.UUID,
        partition: int,
        batches: Sequence[PendingBatch],
        waiters: Sequence[BatchWaiter] | None = None,
    ) -> Sequence[BatchWaiter]: ...
    async def append_nowait(
        self, topic_id: uuid.UUID, partition: int, batches: Sequence[PendingBatch]
    ) -> list[asyncio.Future[BatchResult]]: ...
    async def flush(self) -> None: ...
    async def drain(self) -> None: ...
    async def close(self) -> None: ...


@dataclass(frozen=True)
class AgentParts:
    """The agent's data-path components, each built once at start-up."""

    # The bucket as the agent sees it: the range cache over the object store (reads cached,
    # single-flight and coalesced; files this agent PUTs kept whole for tail consumers).
    bucket: RangeCache
    produce_buffer: ProduceSink  # batches -> one file per flush -> PUT -> commit -> acks
    chunk_locations: ChunkLocationCache  # where partitions' offsets live, learnt from metadata
    commit_watch: CommitWatch  # parked fetches, woken by commits through any agent
    groups: GroupCoordinator  # the consumer groups this agent coordinates
    transactions: TxnCoordinator  # transaction markers, timeouts, re-drives


@dataclass(frozen=True)
class AgentContext:
    config: AgentConfig
    metadata: AgentClient
    topics: TopicCache
    agents: LiveAgents
    clock: Clock
    parts: AgentParts
    # The schema registry's ids by subject, for broker-side validation (agent.schema_cache).
    schemas: SchemaIdCache
    # Kafka ACLs, decided in memory; disabled (everything allowed) unless authorizer_enabled.
    acls: AclCache = field(default_factory=AclCache.disabled)
    # Kafka client quotas (agent.quota_cache): the quotas stored in metadata, enforced here.
    quotas: QuotaCache = field(default_factory=QuotaCache.disabled)


def live_agents_view(config: AgentConfig, clock: Clock, bound_port: int | None = None) -> LiveAgents:
    """The routing view an agent starts with: only itself, until the registry hears more."""
    me = AgentInfo(
        agent_id=config.agent_id,
        host=config.resolved_advertised_host(),
        port=config.resolved_advertised_port(bound_port),
        zone=config.zone,
        version=SKIFF_VERSION,
    )
    return LiveAgents(me, ttl_ms=config.agent_ttl_ms, wall_ms=clock.wall_ms)


def acl_cache(config: AgentConfig, metadata: AgentClient) -> AclCache:
    return AclCache(
        metadata,
        enabled=config.authorizer_enabled,
        super_users=config.super_users,
        allow_everyone_if_no_acl_found=config.allow_everyone_if_no_acl_found,
        refresh_interval_ms=config.acl_refresh_interval_ms,
    )


def quota_cache(config: AgentConfig, metadata: AgentClient, clock: Clock) -> QuotaCache:
    return QuotaCache(
        metadata,
        refresh_interval_ms=config.quota_refresh_interval_ms,
        window=WindowConfig(config.quota_window_num, config.quota_window_size_seconds * 1000),
        now_ms=lambda: int(clock.monotonic() * 1000),
    )


def topic_cache(config: AgentConfig, metadata: AgentClient, clock: Clock) -> TopicCache:
    return TopicCache(metadata, ttl_ms=config.topic_cache_ttl_ms, monotonic=clock.monotonic)
