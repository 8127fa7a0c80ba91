"""The metadata client interface: what agents, the compactor and Spark may ask of metadata.

Two implementations live in `metadata.client`: `LocalMetadataClient` wraps a
`MetadataService` in this process (the playground; blocking SQL runs in a worker
thread) and `HttpMetadataClient` talks to `skiff metadata` over HTTP/JSON. Both raise
`metadata.errors.MetadataError` (with a Kafka error code) for whole-request failures
and `metadata.errors.MetadataUnavailable` when the service cannot be reached (a
retriable condition the agent maps to a retriable Kafka error).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Protocol

from metadata.group_lease_types import LeaseGrant, LeaseToken
from metadata.types import (
    AgentInfo,
    ChunkResult,
    ChunkSpec,
    FetchQuery,
    FileSpec,
    GroupOffset,
    OffsetAnswer,
    OffsetQuery,
    OutputChunk,
    PartitionFetchInfo,
    PartitionKey,
    PartitionState,
    PartitionWatermark,
    Topic,
)


class MetadataClient(Protocol):
    # topics
    async def create_topic(self, name: str, partition_count: int, configs: dict[str, str]) -> Topic: ...
    async def delete_topic(self, name: str) -> None: ...
    async def list_topics(self) -> list[Topic]: ...
    async def describe_topics(self, names: Sequence[str]) -> dict[str, Topic]: ...  # missing names absent
    async def topics_by_id(self, topic_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Topic]: ...
    async def alter_topic_configs(
        self, name: str, set_configs: dict[str, str], delete_configs: Sequence[str], replace: bool
    ) -> Topic: ...
    async def add_partitions(self, name: str, new_partition_count: int) -> Topic: ...

    # produce / fetch
    async def commit_file(self, file: FileSpec, chunks: Sequence[ChunkSpec]) -> list[ChunkResult]: ...
    async def find_chunks(self, queries: Sequence[FetchQuery]) -> list[PartitionFetchInfo]: ...
    async def partition_states(self, keys: Sequence[PartitionKey]) -> list[PartitionState]: ...
    async def wait_for_commits(
        self, known: Sequence[PartitionWatermark], timeout_ms: int
    ) -> list[PartitionWatermark]: ...  # long poll: the partitions whose watermark moved, or [] at timeout
    async def list_offsets(self, queries: Sequence[OffsetQuery]) -> list[OffsetAnswer]: ...
    async def init_producer_id(self) -> tuple[int, int]: ...  # (producer_id, producer_epoch)

    # compaction
    async def replace_chunks(
        self, input_chunk_ids: Sequence[int], file: FileSpec, outputs: Sequence[OutputChunk]
    ) -> None: ...

    # consumer groups
    async def commit_offsets(  # with `lease`: refused with NOT_COORDINATOR unless it is current
        self, group_id: str, offsets: Sequence[GroupOffset], lease: LeaseToken | None = None
    ) -> None: ...
    async def fetch_offsets(self, group_id: str, topics: Sequence[str] | None) -> list[GroupOffset]: ...
    async def delete_group_offsets(self, group_id: str) -> None: ...
    async def delete_partition_offsets(  # one transaction; (topic, partition)s without a commit ignored
        self, group_id: str, partitions: Sequence[tuple[str, int]]
    ) -> None: ...
    async def groups_with_offsets(self, group_ids: Sequence[str] | None) -> list[str]: ...  # None: all

    # agents
    async def heartbeat_agent(self, agent: AgentInfo) -> None: ...  # registers on first call
    async def live_agents(self) -> list[AgentInfo]: ...

    # group coordinator leases (metadata.group_leases)
    async def acquire_group_lease(self, group_id: str, agent_id: str, ttl_ms: int) -> LeaseGrant: ...
    async def renew_group_leases(  # the groups renewed
        self, agent_id: str, leases: Sequence[tuple[str, int]], ttl_ms: int
    ) -> list[str]: ...
    async def release_group_leases(self, agent_id: str, leases: Sequence[tuple[str, int]]) -> None: ...
    async def confirm_group_generation(
        self, group_id: str, lease: LeaseToken, ttl_ms: int, group_state: str
    ) -> None: ...

    async def close(self) -> None: ...
