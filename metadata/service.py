"""MetadataService: the transactional operations over the metadata tables, one facade.

Blocking (SQLAlchemy Core over an `Engine`); `metadata.server.local_client.LocalMetadataClient`
runs it in worker threads, `metadata.server.app` serves it over HTTP. Safe to use from many
threads and from many processes/replicas over one database.

The work is done by one module per concern, all over one `metadata.rows.Db` (engine,
dialect, clock):

- `metadata.topic_admin.TopicAdmin`: topics and their partitions and configs;
- `metadata.commits.path.CommitPath`: committing agent files, producer ids;
- `metadata.reads.Reads`: partition states, find_chunks, list_offsets;
- `metadata.compaction.swap.CompactionSwap`: the compactor's replace_chunks;
- `metadata.compaction.planning.CompactionPlanning`: which partitions need compaction now;
- `metadata.compaction.leases.CompactionLeases`: compaction job leases, checkpoints;
- `metadata.groups.offsets.GroupOffsets`: consumer groups' committed offsets;
- `metadata.membership.Membership`: agent heartbeats and the live agents;
- `metadata.maintenance.retention.Retention`: retention, DeleteRecords, committed-offset expiry;
- `metadata.maintenance.gc.GarbageCollection`: the garbage collector's claims and orphan checks;
- `metadata.security.acls.AclStore`: Kafka ACL bindings and their version.
- `metadata.security.quotas.ClientQuotaStore`: Kafka client quotas and their version.
- `metadata.usage.UsageHistory`: object-store usage reported by agents, compactors and readers,
  and consumer lag sampled over time;
- `metadata.transactions.store.Transactions`: transactional ids' state (the coordinator's calls);
- `metadata.schemas.registry.SchemaRegistryOperations` (a mixin): the schema registry's `schema_*` operations.

What differs between PostgreSQL and SQLite is behind `metadata.commits.storage.Dialect`.

Locking (so that concurrent commits never deadlock and offsets are assigned once):
every operation that changes a partition's offsets or chunks (commit_file,
replace_chunks, delete_topic) first locks the partition rows involved, in one statement
ordered by (topic_id, partition): `SELECT ... ORDER BY ... FOR UPDATE` on PostgreSQL;
on SQLite the transaction starts with `BEGIN IMMEDIATE` (one writer at a time). Producer
state rows are only touched under their partition's lock.

Commits are checked against the bucket (`metadata.commits.object_check`: one HEAD per file
commit and per compaction swap with outputs, before any transaction) when the bucket URL is
known, unless `verify_objects=False`.

Commits wake waiters (`wait_for_commits`) through `commit_feed`; on PostgreSQL a
listener thread (started by the first wait) also publishes other replicas' commits.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Sequence
from typing import Any

from skiff.fileformat.objectstore import ObjectStore, open_store
from skiff.metadata.commits import feed as commit_feed
from skiff.metadata.commits.feed import CommitFeed, PgCommitListener
from skiff.metadata.commits.object_check import ObjectCheck
from skiff.metadata.commits.path import CommitPath
from skiff.metadata.commits.storage import dialect_for
from skiff.metadata.commits.validation import file_error
from skiff.metadata.compaction.leases import CompactionLeases
from skiff.metadata.compaction.planning import CompactionPlanning
from skiff.metadata.compaction.swap import CompactionSwap
from skiff.metadata.compaction.types import CheckpointUpdate, CompactionCandidate, CompactionLease, MergeRules
from skiff.metadata.db import create_engine_for, read_tx, upgrade_to_head, write_tx
from skiff.metadata.errors import INVALID_REQUEST, MetadataError
from skiff.metadata.groups import admin as group_admin
from skiff.metadata.groups import leases as group_leases
from skiff.metadata.groups.lease_types import LeaseGrant, LeaseToken
from skiff.metadata.groups.offsets import GroupOffsets
from skiff.metadata.log_info import LogInfo
from skiff.metadata.maintenance.gc import GarbageCollection
from skiff.metadata.maintenance.retention import DEFAULT_MAX_CHUNKS_PER_PARTITION, Retention
from skiff.metadata.membership import DEFAULT_AGENT_TTL_MS, Membership
from skiff.metadata.reads import Reads
from skiff.metadata.rows import Clock, Db, system_clock
from skiff.metadata.schemas.registry import SchemaRegistryOperations
from skiff.metadata.security.acl_types import AclBinding, AclBindingFilter
from skiff.metadata.security.acls import AclStore
from skiff.metadata.security.quota_types import ClientQuotaEntry, QuotaAlteration, QuotaFilterComponent
from skiff.metadata.security.quotas import ClientQuotaStore
from skiff.metadata.security.scram_types import ScramCredential, ScramCredentialInfo
from skiff.metadata.security.scram_users import ScramUsers
from skiff.metadata.topic_admin import MAX_PARTITIONS_PER_TOPIC, TopicAdmin
from skiff.metadata.transactions.state import Outcome, Partition, TxnRecord
from skiff.metadata.transactions.store import Transactions
from skiff.metadata.types import (
    ActiveProducer,
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
    NewTopic,
    OffsetAnswer,
    OffsetCommitResult,
    OffsetQuery,
    OffsetsLogPage,
    OffsetsLogQuery,
    OutputChunk,
    PartitionFetchInfo,
    PartitionKey,
    PartitionState,
    PartitionWatermark,
    RetentionResult,
    StoredGroup,
    StoreUsage,
    Topic,
    TopicCreation,
)
from skiff.metadata.usage import UsageHistory
from sqlalchemy import Engine


class MetadataService(SchemaRegistryOperations):
    def __init__(
        self,
        engine: Engine,
        *,
        clock: Clock | None = None,
        agent_ttl_ms: int = DEFAULT_AGENT_TTL_MS,
        owns_engine: bool = False,
        group_commit: bool = True,
        bucket_url: str | None = None,
        verify_objects: bool | None = None,
    ) -> None:
        """`verify_objects`: check each committed object in the bucket (one HEAD, see
        metadata.commits.object_check); None: on when `bucket_url` is known. Without a bucket URL
        there is nothing to check against: off, whatever is asked."""
        self.engine = engine
        # The bucket URL the agents write to, as configured (`skiff metadata --bucket`): metadata
        # stores no objects; it tells readers (Spark) where they are and checks that committed
        # objects exist there (one HEAD each).
        self.configured_bucket_url = bucket_url
        self._store: ObjectStore | None = None
        if bucket_url is not None and verify_objects is not False:
            self._store = open_store(bucket_url)
        self.dialect = dialect_for(engine)
        self._db = Db(engine, self.dialect, clock or system_clock)
        self._owns_engine = owns_engine
        self.commit_feed = CommitFeed()
        self._listener: PgCommitListener | None = None
        self._listener_lock = threading.Lock()
        self._listener_started = False  # set once: the listener (if the dialect has one) runs
        self.topics = TopicAdmin(self._db)
        self.commits = CommitPath(
            self._db,
            self.commit_feed,
            group_commit=group_commit,
            object_check=None if self._store is None else ObjectCheck(self._store),
        )
        self.reads = Reads(self._db)
        self.log_info = LogInfo(self._db)
        self.compaction = CompactionSwap(self._db)
        self.compaction_planning = CompactionPlanning(self._db)
        self.compaction_leases = CompactionLeases(self._db)
        self.groups = GroupOffsets(self._db)
        self.agents = Membership(self._db, agent_ttl_ms, bucket_url)
        self.retention = Retention(self._db)
        self.gc = GarbageCollection(self._db)
        self.scram_users = ScramUsers(self._db)
        self.acls = AclStore(self._db)
        self.client_quotas = ClientQuotaStore(self._db)
        self.usage = UsageHistory(self._db)

        self.transactions = Transactions(self._db)
        self._init_schema_registry(self._db)

    @classmethod
    def from_url(
        cls,
        db_url: str,
        *,
        clock: Clock | None = None,
        agent_ttl_ms: int = DEFAULT_AGENT_TTL_MS,
        migrate: bool = True,
        group_commit: bool = True,
        bucket_url: str | None = None,
        verify_objects: bool | None = None,
        **engine_kwargs: Any,
    ) -> MetadataService:
        engine = create_engine_for(db_url, **engine_kwargs)
        try:
            if migrate:
                upgrade_to_head(engine)
        except BaseException:
            engine.dispose()
            raise
        return cls(
            engine,
            clock=clock,
            agent_ttl_ms=agent_ttl_ms,
            owns_engine=True,
            group_commit=group_commit,
            bucket_url=bucket_url,
            verify_objects=verify_objects,
        )

    def close(self) -> None:
        if self._listener is not None:
            self._listener.stop()
        if self._owns_engine:
            self.engine.dispose()
        if self._store is not None:
            self._store.close()

    @property
    def clock(self) -> Clock:
        return self._db.clock

    @property
    def agent_ttl_ms(self) -> int:
        return self.agents.ttl_ms

    @agent_ttl_ms.setter
    def agent_ttl_ms(self, value: int) -> None:
        self.agents.ttl_ms = value

    def bucket_url(self) -> str | None:
        """The bucket URL the agents write to: configured, else learned from them (None: neither)."""
        return self.agents.bucket_url

    def claim_bucket(self, bucket_url: str) -> str:
        return self.agents.claim_bucket(bucket_url)

    def ensure_commit_listener(self) -> None:
        """Start (once) the thread that publishes other replicas' commits into
        `commit_feed` (PostgreSQL; on SQLite every writer is in this process, so the feed
        already sees every commit)."""
        if self._listener_started:
            return
        with self._listener_lock:
            if self._listener_started:
                return
            listener = self.dialect.commit_listener(self.commit_feed, self.engine)
            if listener is not None:
                listener.start()
                self._listener = listener
            self._listener_started = True

    # ------------------------------------------------------------------ topics

    def create_topic(self, name: str, partition_count: int, configs: dict[str, str]) -> Topic:
        return self.topics.create_topic(name, partition_count, configs)

    def create_topics(self, new: Sequence[NewTopic]) -> list[TopicCreation]:
        return self.topics.create_topics(new)

    def delete_topic(self, name: str) -> None:
        self.topics.delete_topic(name)

    def list_topics(self) -> list[Topic]:
        return self.topics.list_topics()

    def describe_topics(self, names: Sequence[str]) -> dict[str, Topic]:
        return self.topics.describe_topics(names)

    def topics_by_id(self, topic_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Topic]:
        return self.topics.topics_by_id(topic_ids)

    def alter_topic_configs(
        self, name: str, set_configs: dict[str, str], delete_configs: Sequence[str], replace: bool
    ) -> Topic:
        return self.topics.alter_topic_configs(name, set_configs, delete_configs, replace)

    def add_partitions(self, name: str, new_partition_count: int) -> Topic:
        return self.topics.add_partitions(name, new_partition_count)

    # ------------------------------------------------------------------ produce

    def commit_file(self, file: FileSpec, chunks: Sequence[ChunkSpec]) -> list[ChunkResult]:
        return self.commits.commit_file(file, chunks)

    def init_producer_id(self) -> tuple[int, int]:
        return self.commits.init_producer_id()

    # ------------------------------------------------------------------ reads

    def partition_states(self, keys: Sequence[PartitionKey]) -> list[PartitionState]:
        return self.reads.partition_states(keys)

    async def wait_for_commits(
        self, known: Sequence[PartitionWatermark], timeout_ms: int
    ) -> list[PartitionWatermark]:
        """Long poll (metadata.commits.feed): answers when a commit moves the high watermark of
        one of the partitions past the known value, or with [] after timeout_ms. The one
        async operation: it waits on the event loop, reading states in worker threads."""
        self.ensure_commit_listener()

        async def read(keys: Sequence[PartitionKey]) -> list[PartitionState]:
            return await asyncio.to_thread(self.partition_states, list(keys))

        return await commit_feed.wait_for_commits(self.commit_feed, read, list(known), timeout_ms)

    def find_chunks(self, queries: Sequence[FetchQuery]) -> list[PartitionFetchInfo]:
        return self.reads.find_chunks(queries)

    def file_chunks(self, object_key: str) -> FileChunks:
        return self.reads.file_chunks(object_key)

    def list_offsets(self, queries: Sequence[OffsetQuery]) -> list[OffsetAnswer]:
        return self.reads.list_offsets(queries)

    # ------------------------------------------------------------------ compaction

    def replace_chunks(
        self,
        input_chunk_ids: Sequence[int],
        file: FileSpec,
        outputs: Sequence[OutputChunk],
        checkpoints: Sequence[CheckpointUpdate] = (),
        lease_token: str | None = None,
    ) -> None:
        if outputs and file_error(file) is None:  # a malformed file is refused below, unsent
            self.commits.verify_object(file)  # in the bucket, as an agent's (one HEAD, no lock held)
        self.compaction.replace_chunks(input_chunk_ids, file, outputs, checkpoints, lease_token)

    def compaction_candidates(
        self, topic: str | None = None, rules: MergeRules | None = None, limit: int = 1000
    ) -> list[CompactionCandidate]:
        return self.compaction_planning.compaction_candidates(topic, rules, limit)

    def claim_compaction_job(
        self,
        partitions: Sequence[PartitionKey],
        holder: str,
        lease_ms: int,
        input_chunk_ids: Sequence[int] = (),
    ) -> CompactionLease | None:
        return self.compaction_leases.claim_compaction_job(partitions, holder, lease_ms, input_chunk_ids)

    def renew_compaction_lease(self, token: str, lease_ms: int) -> CompactionLease:
        return self.compaction_leases.renew_compaction_lease(token, lease_ms)

    def release_compaction_lease(self, token: str) -> None:
        self.compaction_leases.release_compaction_lease(token)

    def cleaner_checkpoints(self, keys: Sequence[PartitionKey]) -> dict[PartitionKey, int | None]:
        return self.compaction_leases.checkpoints(keys)

    # ------------------------------------------------------------------ retention, GC

    def delete_records(self, queries: Sequence[DeleteRecordsQuery]) -> list[DeleteRecordsAnswer]:
        return self.retention.delete_records(queries)

    def enforce_retention(
        self, topic: str, max_chunks_per_partition: int = DEFAULT_MAX_CHUNKS_PER_PARTITION
    ) -> list[RetentionResult]:
        return self.retention.enforce_retention(topic, max_chunks_per_partition)

    def touch_groups(self, group_ids: Sequence[str]) -> None:
        self.retention.touch_groups(group_ids)

    def expire_group_offsets(self, retention_ms: int) -> int:
        return self.retention.expire_group_offsets(retention_ms)

    def claim_deletable_files(
        self, token: str, max_files: int, grace_ms: int, claim_ms: int
    ) -> list[ClaimedFile]:
        return self.gc.claim_deletable_files(token, max_files, grace_ms, claim_ms)

    def forget_files(self, token: str, file_ids: Sequence[int]) -> int:
        return self.gc.forget_files(token, file_ids)

    def unknown_object_keys(self, object_keys: Sequence[str]) -> list[str]:
        return self.gc.unknown_object_keys(object_keys)

    def record_success(self, task: str) -> None:
        self.gc.record_success(task)

    def last_successes(self) -> dict[str, int]:
        return self.gc.last_successes()

    # ------------------------------------------------------------------ partition info

    def partition_sizes(self, keys: Sequence[PartitionKey]) -> list[int]:
        return self.log_info.partition_sizes(keys)

    def describe_producers(self, keys: Sequence[PartitionKey]) -> list[ActiveProducer]:
        return self.log_info.describe_producers(keys)

    def read_offsets_log(self, queries: Sequence[OffsetsLogQuery]) -> list[OffsetsLogPage]:
        return self.groups.read_offsets_log(queries)

    # ------------------------------------------------------------------ consumer groups

    def commit_offsets(
        self, group_id: str, offsets: Sequence[GroupOffset], lease: LeaseToken | None = None
    ) -> list[OffsetCommitResult]:
        return self.groups.commit_offsets(group_id, offsets, lease)

    def fetch_offsets(self, group_id: str, topics: Sequence[str] | None) -> list[GroupOffset]:
        return self.groups.fetch_offsets(group_id, topics)

    def delete_group_offsets(self, group_id: str) -> None:
        self.groups.delete_group_offsets(group_id)

    def delete_partition_offsets(self, group_id: str, partitions: Sequence[tuple[str, int]]) -> None:
        self.groups.delete_partition_offsets(group_id, partitions)

    def groups_with_offsets(self, group_ids: Sequence[str] | None) -> list[str]:
        return self.groups.groups_with_offsets(group_ids)

    def stored_groups(self, group_ids: Sequence[str] | None) -> list[StoredGroup]:
        return group_admin.stored_groups(self._db, group_ids)

    def reset_group_offsets(self, group_id: str, offsets: Sequence[GroupOffset]) -> list[OffsetCommitResult]:
        return self.groups.reset_offsets(group_id, offsets)

    def delete_group(self, group_id: str) -> None:
        self.groups.delete_group(group_id)

    # ------------------------------------------------------------------ agents

    def heartbeat_agent(self, agent: AgentInfo) -> None:
        self.agents.heartbeat_agent(agent)

    def deregister_agent(self, agent: AgentInfo) -> None:
        self.agents.deregister_agent(agent)

    def live_agents(self) -> list[AgentInfo]:
        return self.agents.live_agents()

    # ------------------------------------------------------------------ object-store usage

    def report_agent_usage(self, agent_id: str, usage: StoreUsage) -> None:
        self.usage.record_usage("agent", usage)

    def report_compactor_usage(self, usage: StoreUsage) -> None:
        self.usage.record_usage("compactor", usage)

    def report_reader_usage(self, usage: StoreUsage) -> None:
        self.usage.record_usage("reader", usage)

    # ------------------------------------------------------------------ SCRAM users (metadata.security.scram_users)

    def upsert_scram_credential(self, cred: ScramCredential) -> None:
        self.scram_users.upsert(cred)

    def delete_scram_credential(self, user: str, mechanism: str) -> None:
        self.scram_users.delete(user, mechanism)

    def describe_scram_users(self, users: Sequence[str] | None) -> list[ScramCredentialInfo]:
        return self.scram_users.describe(users)

    def scram_credentials(self, user: str) -> list[ScramCredential]:
        return self.scram_users.credentials(user)

    # ------------------------------------------------------------------ group coordinator leases
    # (metadata.groups.leases: who coordinates each group, fenced by an epoch)

    def acquire_group_lease(self, group_id: str, agent_id: str, ttl_ms: int) -> LeaseGrant:
        with write_tx(self.engine) as conn:
            return group_leases.acquire(conn, group_id, agent_id, self.clock(), ttl_ms)

    def renew_group_leases(self, agent_id: str, leases: Sequence[tuple[str, int]], ttl_ms: int) -> list[str]:
        with write_tx(self.engine) as conn:
            return group_leases.renew(conn, agent_id, leases, self.clock(), ttl_ms)

    def release_group_leases(self, agent_id: str, leases: Sequence[tuple[str, int]]) -> None:
        with write_tx(self.engine) as conn:
            group_leases.release(conn, agent_id, leases)

    def group_lease_holders(self, group_ids: Sequence[str]) -> dict[str, str]:
        with read_tx(self.engine) as conn:
            return group_leases.holders(conn, group_ids, self.clock())

    def confirm_group_generation(
        self, group_id: str, lease: LeaseToken, ttl_ms: int, group_state: str
    ) -> None:
        with write_tx(self.engine) as conn:
            group_leases.confirm(conn, group_id, lease, self.clock(), ttl_ms, group_state)

    # ------------------------------------------------------------------ ACLs (metadata.security.acls)

    def acl_version(self) -> int:
        return self.acls.version()

    def list_acls(self) -> tuple[int, list[AclBinding]]:
        return self.acls.list_all()

    def describe_acls(self, acl_filter: AclBindingFilter) -> tuple[int, list[AclBinding]]:
        return self.acls.describe(acl_filter)

    def create_acls(self, bindings: Sequence[AclBinding]) -> int:
        return self.acls.create(bindings)

    def delete_acls(self, filters: Sequence[AclBindingFilter]) -> tuple[int, list[list[AclBinding]]]:
        return self.acls.delete(filters)

    # ------------------------------------------------------------------ client quotas (metadata.security.quotas)

    def client_quota_version(self) -> int:
        return self.client_quotas.version()

    def list_client_quotas(self) -> tuple[int, list[ClientQuotaEntry]]:
        return self.client_quotas.list_all()

    def describe_client_quotas(
        self, components: Sequence[QuotaFilterComponent], strict: bool
    ) -> list[ClientQuotaEntry]:
        return self.client_quotas.describe(components, strict)

    def alter_client_quotas(
        self, alterations: Sequence[QuotaAlteration], validate_only: bool
    ) -> tuple[int, list[str | None]]:
        return self.client_quotas.alter(alterations, validate_only)

    # ------------------------------------------------------------------ transactions
    # (metadata.transactions.store: each call one write transaction locking the id's row)

    def init_txn_producer_id(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None = None
    ) -> Outcome:
        return self.transactions.init_producer_id(transactional_id, timeout_ms, expected)

    def add_partitions_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: Sequence[Partition],
        max_partitions: int | None = None,
    ) -> dict[Partition, int]:
        _check_topic_ids(partitions)
        return self.transactions.add_partitions(
            transactional_id, producer_id, epoch, partitions, max_partitions
        ).errors

    def verify_txn_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: Sequence[Partition]
    ) -> int:
        _check_topic_ids(partitions)
        return self.transactions.verify_partitions(transactional_id, producer_id, epoch, partitions)

    def add_offsets_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        group_id: str,
        max_partitions: int | None = None,
    ) -> int:
        return self.transactions.add_offsets(transactional_id, producer_id, epoch, group_id, max_partitions)

    def txn_offset_commit(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        group_id: str,
        offsets: Sequence[GroupOffset],
        max_offsets: int | None = None,
    ) -> list[OffsetCommitResult]:
        return self.transactions.txn_offset_commit(
            transactional_id, producer_id, epoch, group_id, offsets, max_offsets
        )

    def fetch_stable_offsets(
        self, group_id: str, topics: Sequence[str] | None
    ) -> tuple[list[GroupOffset], set[tuple[str, int]]]:
        return self.transactions.fetch_stable_offsets(group_id, topics)

    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> Outcome:
        return self.transactions.end_txn(transactional_id, producer_id, epoch, commit)

    def complete_txn(self, transactional_id: str, producer_id: int, epoch: int) -> TxnRecord | None:
        return self.transactions.complete(transactional_id, producer_id, epoch)

    def expire_txns(self) -> list[Outcome]:
        return self.transactions.expire()

    def preparing_txns(self) -> list[TxnRecord]:
        return self.transactions.preparing()

    def describe_txns(self, transactional_ids: Sequence[str]) -> dict[str, TxnRecord | None]:
        return self.transactions.describe(transactional_ids)

    def list_txns(
        self, states: Sequence[str] = (), producer_ids: Sequence[int] = (), duration_filter_ms: int = -1
    ) -> list[TxnRecord]:
        return self.transactions.list(states, producer_ids, duration_filter_ms)


def _check_topic_ids(partitions: Sequence[Partition]) -> None:
    for topic_id, _ in partitions:
        try:
            uuid.UUID(topic_id)
        except ValueError:
            raise MetadataError(INVALID_REQUEST, f"not a topic id: {topic_id[:64]!r}") from None


__all__ = ["MetadataService", "system_clock", "DEFAULT_AGENT_TTL_MS", "MAX_PARTITIONS_PER_TOPIC"]
