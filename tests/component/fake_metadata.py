"""Test harness for the agent's protocol server: real metadata (SQLite), agents on a loop thread.

- `FlakyMetadataClient` wraps a real `MetadataClient` and can be switched to raise
  `MetadataUnavailable` (or to block) on every call, to test how handlers degrade.
- `AgentHarness` runs, on one background event-loop thread, a `MetadataService` over a
  SQLite file, a `LocalMetadataClient` on it, and one or more agents (`AgentContext` +
  `start_agent_server` on 127.0.0.1, port 0 + `AgentRegistry`). Blocking clients
  (confluent-kafka, kafka-python, kcat, raw sockets) run in the test's own thread;
  `harness.call(coro)` runs a coroutine on the agents' loop.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from skiff.agent.agent_registry import AgentRegistry
from skiff.agent.config import AgentConfig
from skiff.agent.context import AgentContext
from skiff.agent.handlers import HandlerRegistry
from skiff.agent.protocol import decode_response, encode_request, response_schema
from skiff.agent.runtime import build_agent_context, close_parts
from skiff.agent.server import AgentServer, start_agent_server
from skiff.fileformat.objectstore.memory import AsyncMemoryStore
from skiff.metadata.acl_types import AclBinding, AclBindingFilter
from skiff.metadata.api_types import MetadataClient, NewTopic, TopicCreation
from skiff.metadata.compaction_types import CheckpointUpdate, CompactionCandidate, CompactionLease, MergeRules
from skiff.metadata.errors import MetadataUnavailable
from skiff.metadata.group_lease_types import LeaseGrant, LeaseToken
from skiff.metadata.local_client import LocalMetadataClient
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

T = TypeVar("T")


class FlakyMetadataClient:
    """A MetadataClient that forwards to `inner` unless `down` is set."""

    def __init__(self, inner: MetadataClient) -> None:
        self.inner = inner
        self.down = False
        self.calls: list[str] = []

    async def _go(self, name: str, fn: Callable[[], Awaitable[T]]) -> T:
        self.calls.append(name)
        if self.down:
            raise MetadataUnavailable(f"{name}: metadata is down (test)")
        return await fn()

    async def create_topic(self, name: str, partition_count: int, configs: dict[str, str]) -> Topic:
        return await self._go("create_topic", lambda: self.inner.create_topic(name, partition_count, configs))

    async def create_topics(self, new: Sequence[NewTopic]) -> list[TopicCreation]:
        return await self._go("create_topics", lambda: self.inner.create_topics(new))

    async def delete_topic(self, name: str) -> None:
        return await self._go("delete_topic", lambda: self.inner.delete_topic(name))

    async def list_topics(self) -> list[Topic]:
        return await self._go("list_topics", self.inner.list_topics)

    async def describe_topics(self, names: Sequence[str]) -> dict[str, Topic]:
        return await self._go("describe_topics", lambda: self.inner.describe_topics(names))

    async def topics_by_id(self, topic_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Topic]:
        return await self._go("topics_by_id", lambda: self.inner.topics_by_id(topic_ids))

    async def alter_topic_configs(
        self, name: str, set_configs: dict[str, str], delete_configs: Sequence[str], replace: bool
    ) -> Topic:
        return await self._go(
            "alter_topic_configs",
            lambda: self.inner.alter_topic_configs(name, set_configs, delete_configs, replace),
        )

    async def add_partitions(self, name: str, new_partition_count: int) -> Topic:
        return await self._go("add_partitions", lambda: self.inner.add_partitions(name, new_partition_count))

    async def commit_file(self, file: FileSpec, chunks: Sequence[ChunkSpec]) -> list[ChunkResult]:
        return await self._go("commit_file", lambda: self.inner.commit_file(file, chunks))

    async def find_chunks(self, queries: Sequence[FetchQuery]) -> list[PartitionFetchInfo]:
        return await self._go("find_chunks", lambda: self.inner.find_chunks(queries))

    async def file_chunks(self, object_key: str) -> FileChunks:
        return await self._go("file_chunks", lambda: self.inner.file_chunks(object_key))

    async def partition_states(self, keys: Sequence[PartitionKey]) -> list[PartitionState]:
        return await self._go("partition_states", lambda: self.inner.partition_states(keys))

    async def wait_for_commits(
        self, known: Sequence[PartitionWatermark], timeout_ms: int
    ) -> list[PartitionWatermark]:
        return await self._go("wait_for_commits", lambda: self.inner.wait_for_commits(known, timeout_ms))

    async def list_offsets(self, queries: Sequence[OffsetQuery]) -> list[OffsetAnswer]:
        return await self._go("list_offsets", lambda: self.inner.list_offsets(queries))

    async def init_producer_id(self) -> tuple[int, int]:
        return await self._go("init_producer_id", self.inner.init_producer_id)

    async def replace_chunks(
        self,
        input_chunk_ids: Sequence[int],
        file: FileSpec,
        outputs: Sequence[OutputChunk],
        checkpoints: Sequence[CheckpointUpdate] = (),
        lease_token: str | None = None,
    ) -> None:
        return await self._go(
            "replace_chunks",
            lambda: self.inner.replace_chunks(input_chunk_ids, file, outputs, checkpoints, lease_token),
        )

    async def compaction_candidates(
        self, topic: str | None = None, rules: MergeRules | None = None, limit: int = 1000
    ) -> list[CompactionCandidate]:
        return await self._go(
            "compaction_candidates", lambda: self.inner.compaction_candidates(topic, rules, limit)
        )

    async def claim_compaction_job(
        self,
        partitions: Sequence[PartitionKey],
        holder: str,
        lease_ms: int,
        input_chunk_ids: Sequence[int] = (),
    ) -> CompactionLease | None:
        return await self._go(
            "claim_compaction_job",
            lambda: self.inner.claim_compaction_job(partitions, holder, lease_ms, input_chunk_ids),
        )

    async def renew_compaction_lease(self, token: str, lease_ms: int) -> CompactionLease:
        return await self._go(
            "renew_compaction_lease", lambda: self.inner.renew_compaction_lease(token, lease_ms)
        )

    async def release_compaction_lease(self, token: str) -> None:
        return await self._go("release_compaction_lease", lambda: self.inner.release_compaction_lease(token))

    async def delete_records(self, queries: Sequence[DeleteRecordsQuery]) -> list[DeleteRecordsAnswer]:
        return await self._go("delete_records", lambda: self.inner.delete_records(queries))

    async def enforce_retention(
        self, topic: str, max_chunks_per_partition: int = 1000
    ) -> list[RetentionResult]:
        return await self._go(
            "enforce_retention", lambda: self.inner.enforce_retention(topic, max_chunks_per_partition)
        )

    async def touch_groups(self, group_ids: Sequence[str]) -> None:
        return await self._go("touch_groups", lambda: self.inner.touch_groups(group_ids))

    async def expire_group_offsets(self, retention_ms: int) -> int:
        return await self._go("expire_group_offsets", lambda: self.inner.expire_group_offsets(retention_ms))

    async def claim_deletable_files(
        self, token: str, max_files: int, grace_ms: int, claim_ms: int
    ) -> list[ClaimedFile]:
        return await self._go(
            "claim_deletable_files",
            lambda: self.inner.claim_deletable_files(token, max_files, grace_ms, claim_ms),
        )

    async def forget_files(self, token: str, file_ids: Sequence[int]) -> int:
        return await self._go("forget_files", lambda: self.inner.forget_files(token, file_ids))

    async def unknown_object_keys(self, object_keys: Sequence[str]) -> list[str]:
        return await self._go("unknown_object_keys", lambda: self.inner.unknown_object_keys(object_keys))

    async def record_success(self, task: str) -> None:
        return await self._go("record_success", lambda: self.inner.record_success(task))

    async def last_successes(self) -> dict[str, int]:
        return await self._go("last_successes", self.inner.last_successes)

    async def commit_offsets(
        self, group_id: str, offsets: Sequence[GroupOffset], lease: LeaseToken | None = None
    ) -> list[OffsetCommitResult]:
        return await self._go("commit_offsets", lambda: self.inner.commit_offsets(group_id, offsets, lease))

    async def fetch_offsets(self, group_id: str, topics: Sequence[str] | None) -> list[GroupOffset]:
        return await self._go("fetch_offsets", lambda: self.inner.fetch_offsets(group_id, topics))

    async def delete_group_offsets(self, group_id: str) -> None:
        return await self._go("delete_group_offsets", lambda: self.inner.delete_group_offsets(group_id))

    async def delete_partition_offsets(self, group_id: str, partitions: Sequence[tuple[str, int]]) -> None:
        return await self._go(
            "delete_partition_offsets", lambda: self.inner.delete_partition_offsets(group_id, partitions)
        )

    async def groups_with_offsets(self, group_ids: Sequence[str] | None) -> list[str]:
        return await self._go("groups_with_offsets", lambda: self.inner.groups_with_offsets(group_ids))

    async def heartbeat_agent(self, agent: AgentInfo) -> None:
        return await self._go("heartbeat_agent", lambda: self.inner.heartbeat_agent(agent))

    async def bucket_url(self) -> str | None:
        return await self._go("bucket_url", self.inner.bucket_url)

    async def deregister_agent(self, agent: AgentInfo) -> None:
        return await self._go("deregister_agent", lambda: self.inner.deregister_agent(agent))

    async def live_agents(self) -> list[AgentInfo]:
        return await self._go("live_agents", self.inner.live_agents)

    async def acquire_group_lease(self, group_id: str, agent_id: str, ttl_ms: int) -> LeaseGrant:
        return await self._go(
            "acquire_group_lease", lambda: self.inner.acquire_group_lease(group_id, agent_id, ttl_ms)
        )

    async def renew_group_leases(
        self, agent_id: str, leases: Sequence[tuple[str, int]], ttl_ms: int
    ) -> list[str]:
        return await self._go(
            "renew_group_leases", lambda: self.inner.renew_group_leases(agent_id, leases, ttl_ms)
        )

    async def release_group_leases(self, agent_id: str, leases: Sequence[tuple[str, int]]) -> None:
        return await self._go(
            "release_group_leases", lambda: self.inner.release_group_leases(agent_id, leases)
        )

    async def confirm_group_generation(
        self, group_id: str, lease: LeaseToken, ttl_ms: int, group_state: str
    ) -> None:
        return await self._go(
            "confirm_group_generation",
            lambda: self.inner.confirm_group_generation(group_id, lease, ttl_ms, group_state),
        )

    async def acl_version(self) -> int:
        return await self._go("acl_version", self.inner.acl_version)

    async def list_acls(self) -> tuple[int, list[AclBinding]]:
        return await self._go("list_acls", self.inner.list_acls)

    async def describe_acls(self, acl_filter: AclBindingFilter) -> tuple[int, list[AclBinding]]:
        return await self._go("describe_acls", lambda: self.inner.describe_acls(acl_filter))

    async def create_acls(self, bindings: Sequence[AclBinding]) -> int:
        return await self._go("create_acls", lambda: self.inner.create_acls(bindings))

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> tuple[int, list[list[AclBinding]]]:
        return await self._go("delete_acls", lambda: self.inner.delete_acls(filters))

    # transactions
    async def init_txn_producer_id(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None = None
    ) -> Outcome:
        return await self._go(
            "init_txn_producer_id",
            lambda: self.inner.init_txn_producer_id(transactional_id, timeout_ms, expected),
        )

    async def add_partitions_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: Sequence[Partition],
        max_partitions: int | None = None,
    ) -> dict[Partition, int]:
        return await self._go(
            "add_partitions_to_txn",
            lambda: self.inner.add_partitions_to_txn(
                transactional_id, producer_id, epoch, partitions, max_partitions
            ),
        )

    async def verify_txn_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: Sequence[Partition]
    ) -> int:
        return await self._go(
            "verify_txn_partitions",
            lambda: self.inner.verify_txn_partitions(transactional_id, producer_id, epoch, partitions),
        )

    async def add_offsets_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        group_id: str,
        max_partitions: int | None = None,
    ) -> int:
        return await self._go(
            "add_offsets_to_txn",
            lambda: self.inner.add_offsets_to_txn(
                transactional_id, producer_id, epoch, group_id, max_partitions
            ),
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
        return await self._go(
            "txn_offset_commit",
            lambda: self.inner.txn_offset_commit(
                transactional_id, producer_id, epoch, group_id, offsets, max_offsets
            ),
        )

    async def fetch_stable_offsets(
        self, group_id: str, topics: Sequence[str] | None
    ) -> tuple[list[GroupOffset], set[tuple[str, int]]]:
        return await self._go(
            "fetch_stable_offsets", lambda: self.inner.fetch_stable_offsets(group_id, topics)
        )

    async def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> Outcome:
        return await self._go(
            "end_txn", lambda: self.inner.end_txn(transactional_id, producer_id, epoch, commit)
        )

    async def complete_txn(self, transactional_id: str, producer_id: int, epoch: int) -> TxnRecord | None:
        return await self._go(
            "complete_txn", lambda: self.inner.complete_txn(transactional_id, producer_id, epoch)
        )

    async def expire_txns(self) -> list[Outcome]:
        return await self._go("expire_txns", self.inner.expire_txns)

    async def preparing_txns(self) -> list[TxnRecord]:
        return await self._go("preparing_txns", self.inner.preparing_txns)

    async def describe_txns(self, transactional_ids: Sequence[str]) -> dict[str, TxnRecord | None]:
        return await self._go("describe_txns", lambda: self.inner.describe_txns(transactional_ids))

    async def list_txns(
        self, states: Sequence[str] = (), producer_ids: Sequence[int] = (), duration_filter_ms: int = -1
    ) -> list[TxnRecord]:
        return await self._go(
            "list_txns", lambda: self.inner.list_txns(states, producer_ids, duration_filter_ms)
        )

    async def close(self) -> None:
        await self.inner.close()


def _check_protocol() -> None:
    _a: type[MetadataClient] = FlakyMetadataClient


class RunningAgent:
    def __init__(self, ctx: AgentContext, server: AgentServer, registry: AgentRegistry) -> None:
        self.ctx = ctx
        self.server = server
        self.registry = registry

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    @property
    def node_id(self) -> int:
        return self.ctx.agents.self_node_id


class AgentHarness:
    def __init__(self, data_dir: Path, **config: Any) -> None:
        self.data_dir = data_dir
        self.config_overrides = config
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="agent-loop", daemon=True)
        self.agents: list[RunningAgent] = []
        self.service: MetadataService | None = None
        self.metadata: FlakyMetadataClient | None = None

    # --- running things on the agents' loop ---------------------------------------------

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        fut: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return fut.result(timeout)

    def start(self, agents: int = 1, registry: HandlerRegistry | None = None) -> AgentHarness:
        self._thread.start()
        self.service = MetadataService.from_url(
            f"sqlite:///{self.data_dir}/metadata.db", sqlite_synchronous="OFF"
        )
        self.metadata = FlakyMetadataClient(LocalMetadataClient(self.service, owns_service=True))
        for i in range(agents):
            self.add_agent(str(i + 1), registry=registry)
        return self

    def add_agent(
        self, agent_id: str, registry: HandlerRegistry | None = None, **config: Any
    ) -> RunningAgent:
        assert self.metadata is not None
        merged = {
            "agent_id": agent_id,
            "host": "127.0.0.1",
            "port": 0,
            "heartbeat_interval_ms": 200,
            "agent_ttl_ms": 5000,
            **self.config_overrides,
            **config,
        }
        cfg = AgentConfig(**merged)

        async def go() -> RunningAgent:
            assert self.metadata is not None
            # every part of a real agent; the bucket is in memory (these agents serve admin
            # and group requests), only the group coordinator runs in the background
            store = AsyncMemoryStore(f"harness-{uuid.uuid4().hex}")
            ctx = build_agent_context(cfg, self.metadata, store)
            await ctx.acls.start()  # ACLs loaded (a no-op unless authorizer_enabled)
            ctx.parts.groups.start()
            server = await start_agent_server(ctx, "127.0.0.1", 0, registry=registry)
            membership = AgentRegistry(self.metadata, ctx.agents, cfg.heartbeat_interval_ms)
            await membership.start()
            return RunningAgent(ctx, server, membership)

        agent = self.call(go())
        self.agents.append(agent)
        return agent

    def refresh_all(self) -> None:
        """One heartbeat round for every agent, twice (so each one sees all the others)."""
        for _ in range(2):
            for a in self.agents:
                self.call(a.registry.beat_once())

    @property
    def agent(self) -> RunningAgent:
        return self.agents[0]

    @property
    def bootstrap(self) -> str:
        return self.agents[0].bootstrap

    def stop(self) -> None:
        async def go() -> None:
            for a in self.agents:
                await a.registry.close()
                await a.server.close()
                await close_parts(a.ctx.parts)
                await a.ctx.acls.close()
            if self.metadata is not None:
                await self.metadata.close()

        try:
            if self._thread.is_alive():
                self.call(go())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()


# --- raw wire helpers -----------------------------------------------------------------------


def connect(bootstrap: str, timeout: float = 10.0) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def recv_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    return recv_exactly(sock, size)


def is_closed(sock: socket.socket, timeout: float = 5.0) -> bool:
    """True if the peer closes the connection (EOF or reset) within `timeout` without sending data."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def roundtrip(sock: socket.socket, body: Any, correlation_id: int = 1, client_id: str | None = "test") -> Any:
    """Send one kio request and return the parsed response of the same version."""
    sock.sendall(encode_request(body, correlation_id, client_id=client_id))
    frame = recv_frame(sock)
    cls = response_schema(int(body.__api_key__), int(body.__version__))
    assert cls is not None
    corr, response = decode_response(frame, cls)
    assert corr == correlation_id
    return response


def request_once(bootstrap: str, body: Any) -> Any:
    with connect(bootstrap) as sock:
        return roundtrip(sock, body)
