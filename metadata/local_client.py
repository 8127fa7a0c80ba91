"""`LocalMetadataClient`: the `metadata.api_types.MetadataClient` over a `MetadataService`
in this process (the playground, tests, benchmarks).

Each call runs the blocking service method in a dedicated thread pool (as
`asyncio.to_thread` would, but bounded and not shared with the rest of the process),
sized like the database pool. Raises `MetadataError` (Kafka error code) when the service
refused the request and `MetadataUnavailable` (retriable) when the database is down or
the client closed. This module imports the service and so SQLAlchemy: processes that
only talk HTTP use `metadata.http_client` instead.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from skiff.metadata import commit_feed
from skiff.metadata.acl_types import AclBinding, AclBindingFilter
from skiff.metadata.api_types import MetadataClient, NewTopic, StoredGroup, TopicCreation
from skiff.metadata.compaction_types import CheckpointUpdate, CompactionCandidate, CompactionLease, MergeRules
from skiff.metadata.db import is_db_unavailable
from skiff.metadata.errors import INVALID_REQUEST, MetadataError, MetadataUnavailable
from skiff.metadata.group_lease_types import LeaseGrant, LeaseToken
from skiff.metadata.scram_types import ScramCredential, ScramCredentialInfo
from skiff.metadata.service import MetadataService
from skiff.metadata.txn_state import Outcome, Partition, TxnRecord
from skiff.metadata.types import (
    AgentInfo,
    ChunkResult,
    ChunkSpec,
    ClaimedFile,
    DeleteRecordsAnswer,
    DeleteRecordsQuery,
    FetchQuery,
    FileChunks,
    FileSpec,
    GroupOffset,
    OffsetAnswer,
    OffsetCommitResult,
    OffsetQuery,
    OutputChunk,
    PartitionFetchInfo,
    PartitionKey,
    PartitionState,
    PartitionWatermark,
    RetentionResult,
    Topic,
)
from sqlalchemy.exc import SQLAlchemyError

T = TypeVar("T")


class LocalMetadataClient:
    """A `MetadataClient` over a `MetadataService` in this process."""

    def __init__(self, service: MetadataService, *, max_workers: int = 8, owns_service: bool = False) -> None:
        self.service = service
        self._owns_service = owns_service
        self._executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="skiff-metadata")
        self._closed = False

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise MetadataUnavailable("metadata client is closed")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, functools.partial(fn, *args))
        except MetadataError:
            raise
        except SQLAlchemyError as e:
            if is_db_unavailable(e):
                raise MetadataUnavailable(f"metadata database unavailable: {e}") from e
            raise MetadataError(
                INVALID_REQUEST, f"refused by the metadata database: {getattr(e, 'orig', e)}"
            ) from e
        except RuntimeError as e:
            if self._closed:  # the executor was shut down under us
                raise MetadataUnavailable("metadata client is closed") from e
            raise

    # topics
    async def create_topic(self, name: str, partition_count: int, configs: dict[str, str]) -> Topic:
        return await self._run(self.service.create_topic, name, partition_count, dict(configs))

    async def create_topics(self, new: Sequence[NewTopic]) -> list[TopicCreation]:
        return await self._run(self.service.create_topics, list(new))

    async def delete_topic(self, name: str) -> None:
        await self._run(self.service.delete_topic, name)

    async def list_topics(self) -> list[Topic]:
        return await self._run(self.service.list_topics)

    async def describe_topics(self, names: Sequence[str]) -> dict[str, Topic]:
        return await self._run(self.service.describe_topics, list(names))

    async def topics_by_id(self, topic_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Topic]:
        return await self._run(self.service.topics_by_id, list(topic_ids))

    async def alter_topic_configs(
        self, name: str, set_configs: dict[str, str], delete_configs: Sequence[str], replace: bool
    ) -> Topic:
        return await self._run(
            self.service.alter_topic_configs, name, dict(set_configs), list(delete_configs), replace
        )

    async def add_partitions(self, name: str, new_partition_count: int) -> Topic:
        return await self._run(self.service.add_partitions, name, new_partition_count)

    # produce / fetch
    async def commit_file(self, file: FileSpec, chunks: Sequence[ChunkSpec]) -> list[ChunkResult]:
        return await self._run(self.service.commit_file, file, list(chunks))

    async def find_chunks(self, queries: Sequence[FetchQuery]) -> list[PartitionFetchInfo]:
        return await self._run(self.service.find_chunks, list(queries))

    async def file_chunks(self, object_key: str) -> FileChunks:
        return await self._run(self.service.file_chunks, object_key)

    async def partition_states(self, keys: Sequence[PartitionKey]) -> list[PartitionState]:
        return await self._run(self.service.partition_states, list(keys))

    async def wait_for_commits(
        self, known: Sequence[PartitionWatermark], timeout_ms: int
    ) -> list[PartitionWatermark]:
        if self._closed:
            raise MetadataUnavailable("metadata client is closed")
        self.service.ensure_commit_listener()
        return await commit_feed.wait_for_commits(
            self.service.commit_feed, self.partition_states, list(known), timeout_ms
        )

    async def list_offsets(self, queries: Sequence[OffsetQuery]) -> list[OffsetAnswer]:
        return await self._run(self.service.list_offsets, list(queries))

    async def init_producer_id(self) -> tuple[int, int]:
        return await self._run(self.service.init_producer_id)

    # compaction
    async def replace_chunks(
        self,
        input_chunk_ids: Sequence[int],
        file: FileSpec,
        outputs: Sequence[OutputChunk],
        checkpoints: Sequence[CheckpointUpdate] = (),
        lease_token: str | None = None,
    ) -> None:
        await self._run(
            self.service.replace_chunks,
            list(input_chunk_ids),
            file,
            list(outputs),
            list(checkpoints),
            lease_token,
        )

    async def compaction_candidates(
        self, topic: str | None = None, rules: MergeRules | None = None, limit: int = 1000
    ) -> list[CompactionCandidate]:
        return await self._run(self.service.compaction_candidates, topic, rules, limit)

    async def claim_compaction_job(
        self,
        partitions: Sequence[PartitionKey],
        holder: str,
        lease_ms: int,
        input_chunk_ids: Sequence[int] = (),
    ) -> CompactionLease | None:
        return await self._run(
            self.service.claim_compaction_job, list(partitions), holder, lease_ms, list(input_chunk_ids)
        )

    async def renew_compaction_lease(self, token: str, lease_ms: int) -> CompactionLease:
        return await self._run(self.service.renew_compaction_lease, token, lease_ms)

    async def release_compaction_lease(self, token: str) -> None:
        await self._run(self.service.release_compaction_lease, token)

    # retention, DeleteRecords, offset expiry, GC
    async def delete_records(self, queries: Sequence[DeleteRecordsQuery]) -> list[DeleteRecordsAnswer]:
        return await self._run(self.service.delete_records, list(queries))

    async def enforce_retention(
        self, topic: str, max_chunks_per_partition: int = 1000
    ) -> list[RetentionResult]:
        return await self._run(self.service.enforce_retention, topic, max_chunks_per_partition)

    async def touch_groups(self, group_ids: Sequence[str]) -> None:
        await self._run(self.service.touch_groups, list(group_ids))

    async def expire_group_offsets(self, retention_ms: int) -> int:
        return await self._run(self.service.expire_group_offsets, retention_ms)

    async def claim_deletable_files(
        self, token: str, max_files: int, grace_ms: int, claim_ms: int
    ) -> list[ClaimedFile]:
        return await self._run(self.service.claim_deletable_files, token, max_files, grace_ms, claim_ms)

    async def forget_files(self, token: str, file_ids: Sequence[int]) -> int:
        return await self._run(self.service.forget_files, token, list(file_ids))

    async def unknown_object_keys(self, object_keys: Sequence[str]) -> list[str]:
        return await self._run(self.service.unknown_object_keys, list(object_keys))

    async def record_success(self, task: str) -> None:
        await self._run(self.service.record_success, task)

    async def last_successes(self) -> dict[str, int]:
        return await self._run(self.service.last_successes)

    # consumer groups
    async def commit_offsets(
        self, group_id: str, offsets: Sequence[GroupOffset], lease: LeaseToken | None = None
    ) -> list[OffsetCommitResult]:
        return await self._run(self.service.commit_offsets, group_id, list(offsets), lease)

    # group coordinator leases
    async def acquire_group_lease(self, group_id: str, agent_id: str, ttl_ms: int) -> LeaseGrant:
        return await self._run(self.service.acquire_group_lease, group_id, agent_id, ttl_ms)

    async def renew_group_leases(
        self, agent_id: str, leases: Sequence[tuple[str, int]], ttl_ms: int
    ) -> list[str]:
        return await self._run(self.service.renew_group_leases, agent_id, list(leases), ttl_ms)

    async def release_group_leases(self, agent_id: str, leases: Sequence[tuple[str, int]]) -> None:
        await self._run(self.service.release_group_leases, agent_id, list(leases))

    async def confirm_group_generation(
        self, group_id: str, lease: LeaseToken, ttl_ms: int, group_state: str
    ) -> None:
        await self._run(self.service.confirm_group_generation, group_id, lease, ttl_ms, group_state)

    async def fetch_offsets(self, group_id: str, topics: Sequence[str] | None) -> list[GroupOffset]:
        return await self._run(self.service.fetch_offsets, group_id, None if topics is None else list(topics))

    async def delete_group_offsets(self, group_id: str) -> None:
        await self._run(self.service.delete_group_offsets, group_id)

    async def delete_partition_offsets(self, group_id: str, partitions: Sequence[tuple[str, int]]) -> None:
        await self._run(self.service.delete_partition_offsets, group_id, list(partitions))

    async def groups_with_offsets(self, group_ids: Sequence[str] | None) -> list[str]:
        return await self._run(
            self.service.groups_with_offsets, None if group_ids is None else list(group_ids)
        )

    async def stored_groups(self, group_ids: Sequence[str] | None) -> list[StoredGroup]:
        return await self._run(self.service.stored_groups, None if group_ids is None else list(group_ids))

    async def reset_group_offsets(
        self, group_id: str, offsets: Sequence[GroupOffset]
    ) -> list[OffsetCommitResult]:
        return await self._run(self.service.reset_group_offsets, group_id, list(offsets))

    async def delete_group(self, group_id: str) -> None:
        await self._run(self.service.delete_group, group_id)

    # agents
    async def heartbeat_agent(self, agent: AgentInfo) -> None:
        await self._run(self.service.heartbeat_agent, agent)

    async def deregister_agent(self, agent: AgentInfo) -> None:
        await self._run(self.service.deregister_agent, agent)

    async def live_agents(self) -> list[AgentInfo]:
        return await self._run(self.service.live_agents)

    # SCRAM users
    async def upsert_scram_credential(self, cred: ScramCredential) -> None:
        await self._run(self.service.upsert_scram_credential, cred)

    async def delete_scram_credential(self, user: str, mechanism: str) -> None:
        await self._run(self.service.delete_scram_credential, user, mechanism)

    async def describe_scram_users(self, users: Sequence[str] | None) -> list[ScramCredentialInfo]:
        return await self._run(self.service.describe_scram_users, None if users is None else list(users))

    async def scram_credentials(self, user: str) -> list[ScramCredential]:
        return await self._run(self.service.scram_credentials, user)

    async def bucket_url(self) -> str | None:
        return self.service.bucket_url

    # Kafka ACLs
    async def acl_version(self) -> int:
        return await self._run(self.service.acl_version)

    async def list_acls(self) -> tuple[int, list[AclBinding]]:
        return await self._run(self.service.list_acls)

    async def describe_acls(self, acl_filter: AclBindingFilter) -> tuple[int, list[AclBinding]]:
        return await self._run(self.service.describe_acls, acl_filter)

    async def create_acls(self, bindings: Sequence[AclBinding]) -> int:
        return await self._run(self.service.create_acls, list(bindings))

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> tuple[int, list[list[AclBinding]]]:
        return await self._run(self.service.delete_acls, list(filters))

    # transactions
    async def init_txn_producer_id(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None = None
    ) -> Outcome:
        return await self._run(self.service.init_txn_producer_id, transactional_id, timeout_ms, expected)

    async def add_partitions_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: Sequence[Partition],
        max_partitions: int | None = None,
    ) -> dict[Partition, int]:
        return await self._run(
            self.service.add_partitions_to_txn,
            transactional_id,
            producer_id,
            epoch,
            list(partitions),
            max_partitions,
        )

    async def verify_txn_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: Sequence[Partition]
    ) -> int:
        return await self._run(
            self.service.verify_txn_partitions, transactional_id, producer_id, epoch, list(partitions)
        )

    async def add_offsets_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        group_id: str,
        max_partitions: int | None = None,
    ) -> int:
        return await self._run(
            self.service.add_offsets_to_txn, transactional_id, producer_id, epoch, group_id, max_partitions
        )

    async def txn_offset_commit(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        group_id: str,
        offsets: Sequence[GroupOffset],
        max_offsets: int | None = None,
    ) -> list[OffsetCommitResult]:
        return await self._run(
            self.service.txn_offset_commit,
            transactional_id,
            producer_id,
            epoch,
            group_id,
            list(offsets),
            max_offsets,
        )

    async def fetch_stable_offsets(
        self, group_id: str, topics: Sequence[str] | None
    ) -> tuple[list[GroupOffset], set[tuple[str, int]]]:
        return await self._run(
            self.service.fetch_stable_offsets, group_id, None if topics is None else list(topics)
        )

    async def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> Outcome:
        return await self._run(self.service.end_txn, transactional_id, producer_id, epoch, commit)

    async def complete_txn(self, transactional_id: str, producer_id: int, epoch: int) -> TxnRecord | None:
        return await self._run(self.service.complete_txn, transactional_id, producer_id, epoch)

    async def expire_txns(self) -> list[Outcome]:
        return await self._run(self.service.expire_txns)

    async def preparing_txns(self) -> list[TxnRecord]:
        return await self._run(self.service.preparing_txns)

    async def describe_txns(self, transactional_ids: Sequence[str]) -> dict[str, TxnRecord | None]:
        return await self._run(self.service.describe_txns, list(transactional_ids))

    async def list_txns(
        self, states: Sequence[str] = (), producer_ids: Sequence[int] = (), duration_filter_ms: int = -1
    ) -> list[TxnRecord]:
        return await self._run(self.service.list_txns, list(states), list(producer_ids), duration_filter_ms)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(None, self._shutdown)

    def _shutdown(self) -> None:
        self._executor.shutdown(wait=True)
        if self._owns_service:
            self.service.close()


def _check_protocol() -> None:  # mypy checks the class against the Protocol here
    _a: type[MetadataClient] = LocalMetadataClient
