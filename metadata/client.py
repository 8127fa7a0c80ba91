"""The two `metadata.api_types.MetadataClient` implementations.

- `LocalMetadataClient(service)`: in-process; each call runs the blocking service method
  in a dedicated thread pool (as `asyncio.to_thread` would, but bounded and not shared
  with the rest of the process), sized like the database pool.
- `HttpMetadataClient(base_url)`: talks to `skiff metadata` (metadata.app) with a pooled
  `httpx.AsyncClient`.

Both raise `MetadataError` (Kafka error code; `ConflictError` for compare-and-set
failures) when the service refused the request, and `MetadataUnavailable` when it could
not be reached or did not answer (connection errors, timeouts, HTTP 5xx, the database
down): retriable.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError
from sqlalchemy.exc import SQLAlchemyError

from metadata import commit_feed
from metadata import serde as s
from metadata.api_types import MetadataClient
from metadata.db import is_db_unavailable
from metadata.errors import CONFLICT, INVALID_REQUEST, ConflictError, MetadataError, MetadataUnavailable
from metadata.group_lease_types import LeaseGrant, LeaseToken
from metadata.service import MetadataService
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
        self, input_chunk_ids: Sequence[int], file: FileSpec, outputs: Sequence[OutputChunk]
    ) -> None:
        await self._run(self.service.replace_chunks, list(input_chunk_ids), file, list(outputs))

    # consumer groups
    async def commit_offsets(
        self, group_id: str, offsets: Sequence[GroupOffset], lease: LeaseToken | None = None
    ) -> None:
        await self._run(self.service.commit_offsets, group_id, list(offsets), lease)

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

    # agents
    async def heartbeat_agent(self, agent: AgentInfo) -> None:
        await self._run(self.service.heartbeat_agent, agent)

    async def live_agents(self) -> list[AgentInfo]:
        return await self._run(self.service.live_agents)

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

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(None, self._shutdown)

    def _shutdown(self) -> None:
        self._executor.shutdown(wait=True)
        if self._owns_service:
            self.service.close()


_CHUNK_RESULTS = TypeAdapter(list[s.ChunkResultM])
_FETCH_INFOS = TypeAdapter(list[s.PartitionFetchInfoM])
_STATES = TypeAdapter(list[s.PartitionStateM])
_ANSWERS = TypeAdapter(list[s.OffsetAnswerM])
_TOPIC_LIST = TypeAdapter(list[s.TopicM])
_TOPIC_MAP = TypeAdapter(dict[str, s.TopicM])
_GROUP_OFFSETS = TypeAdapter(list[s.GroupOffsetM])
_GROUP_IDS = TypeAdapter(list[str])
_AGENTS = TypeAdapter(list[s.AgentInfoM])
_WATERMARKS = TypeAdapter(list[s.PartitionWatermarkM])


class HttpMetadataClient:
    """A `MetadataClient` over HTTP/JSON to the metadata service (metadata.app)."""

    def __init__(
        self,
        base_url: str,
        timeout_s: float = 10.0,
        *,
        max_connections: int = 32,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout_s),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            transport=transport,
            headers={"content-type": "application/json"},
        )

    async def _call(
        self, method: str, path: str, body: BaseModel | None = None, *, extra_timeout_s: float = 0.0
    ) -> bytes:
        content = body.model_dump_json().encode() if body is not None else None
        timeout: Any = httpx.USE_CLIENT_DEFAULT
        if extra_timeout_s:
            base = self._http.timeout
            timeout = httpx.Timeout(
                connect=base.connect,
                read=(base.read or 0.0) + extra_timeout_s,
                write=base.write,
                pool=(base.pool or 0.0) + extra_timeout_s,
            )
        try:
            resp = await self._http.request(method, path, content=content, timeout=timeout)
        except httpx.TransportError as e:  # connect errors, timeouts, protocol errors
            raise MetadataUnavailable(f"metadata service at {self.base_url} unreachable: {e!r}") from e
        except RuntimeError as e:  # e.g. the client is closed
            raise MetadataUnavailable(f"metadata client unusable: {e}") from e
        status = resp.status_code
        if status < 400:
            return resp.content
        if status >= 500:
            raise MetadataUnavailable(f"metadata service answered {status}: {resp.text[:500]}")
        try:
            data = resp.json()
            code = int(data["error_code"])
            message = str(data.get("message", ""))
        except Exception:
            code, message = INVALID_REQUEST, f"HTTP {status}: {resp.text[:500]}"
        if status == 409:
            raise ConflictError(code if code else CONFLICT, message)
        raise MetadataError(code, message)

    @staticmethod
    def _parse(adapter: TypeAdapter[T], data: bytes) -> T:
        try:
            return adapter.validate_json(data)
        except ValidationError as e:
            raise MetadataUnavailable(f"malformed answer from the metadata service: {e}") from e

    # topics
    async def create_topic(self, name: str, partition_count: int, configs: dict[str, str]) -> Topic:
        req = s.CreateTopicRequest.model_construct(
            name=name, partition_count=partition_count, configs=dict(configs)
        )
        return s.topic_from_m(
            self._parse(TypeAdapter(s.TopicM), await self._call("POST", "/v1/topics/create", req))
        )

    async def delete_topic(self, name: str) -> None:
        await self._call("POST", "/v1/topics/delete", s.TopicNameRequest.model_construct(name=name))

    async def list_topics(self) -> list[Topic]:
        return [s.topic_from_m(m) for m in self._parse(_TOPIC_LIST, await self._call("GET", "/v1/topics"))]

    async def describe_topics(self, names: Sequence[str]) -> dict[str, Topic]:
        data = await self._call(
            "POST", "/v1/topics/describe", s.TopicNamesRequest.model_construct(names=list(names))
        )
        return {k: s.topic_from_m(v) for k, v in self._parse(_TOPIC_MAP, data).items()}

    async def topics_by_id(self, topic_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Topic]:
        req = s.TopicIdsRequest.model_construct(topic_ids=list(topic_ids))
        data = await self._call("POST", "/v1/topics/by-id", req)
        return {uuid.UUID(k): s.topic_from_m(v) for k, v in self._parse(_TOPIC_MAP, data).items()}

    async def alter_topic_configs(
        self, name: str, set_configs: dict[str, str], delete_configs: Sequence[str], replace: bool
    ) -> Topic:
        req = s.AlterConfigsRequest.model_construct(
            name=name, set_configs=dict(set_configs), delete_configs=list(delete_configs), replace=replace
        )
        data = await self._call("POST", "/v1/topics/alter-configs", req)
        return s.topic_from_m(self._parse(TypeAdapter(s.TopicM), data))

    async def add_partitions(self, name: str, new_partition_count: int) -> Topic:
        req = s.AddPartitionsRequest.model_construct(name=name, new_partition_count=new_partition_count)
        data = await self._call("POST", "/v1/topics/add-partitions", req)
        return s.topic_from_m(self._parse(TypeAdapter(s.TopicM), data))

    # produce / fetch
    async def commit_file(self, file: FileSpec, chunks: Sequence[ChunkSpec]) -> list[ChunkResult]:
        req = s.CommitFileRequest.model_construct(
            file=s.file_to_m(file), chunks=[s.chunk_spec_to_m(c) for c in chunks]
        )
        data = await self._call("POST", "/v1/commit-file", req)
        return [s.chunk_result_from_m(m) for m in self._parse(_CHUNK_RESULTS, data)]

    async def find_chunks(self, queries: Sequence[FetchQuery]) -> list[PartitionFetchInfo]:
        req = s.FindChunksRequest.model_construct(
            queries=[s.FetchQueryM.model_construct(**q.__dict__) for q in queries]
        )
        data = await self._call("POST", "/v1/find-chunks", req)
        return [s.fetch_info_from_m(m) for m in self._parse(_FETCH_INFOS, data)]

    async def partition_states(self, keys: Sequence[PartitionKey]) -> list[PartitionState]:
        req = s.PartitionStatesRequest.model_construct(
            keys=[s.PartitionKeyM.model_construct(**k.__dict__) for k in keys]
        )
        data = await self._call("POST", "/v1/partition-states", req)
        return [PartitionState(**m.__dict__) for m in self._parse(_STATES, data)]

    async def wait_for_commits(
        self, known: Sequence[PartitionWatermark], timeout_ms: int
    ) -> list[PartitionWatermark]:
        req = s.WaitForCommitsRequest.model_construct(
            known=[s.PartitionWatermarkM.model_construct(**k.__dict__) for k in known], timeout_ms=timeout_ms
        )
        # The call may legitimately take timeout_ms: the HTTP timeout is on top of it.
        data = await self._call("POST", "/v1/wait-for-commits", req, extra_timeout_s=timeout_ms / 1000.0)
        return [PartitionWatermark(**m.__dict__) for m in self._parse(_WATERMARKS, data)]

    async def list_offsets(self, queries: Sequence[OffsetQuery]) -> list[OffsetAnswer]:
        req = s.ListOffsetsRequest.model_construct(
            queries=[s.OffsetQueryM.model_construct(**q.__dict__) for q in queries]
        )
        data = await self._call("POST", "/v1/list-offsets", req)
        return [OffsetAnswer(**m.__dict__) for m in self._parse(_ANSWERS, data)]

    async def init_producer_id(self) -> tuple[int, int]:
        m = self._parse(TypeAdapter(s.ProducerIdResponse), await self._call("POST", "/v1/producer-ids"))
        return m.producer_id, m.producer_epoch

    # compaction
    async def replace_chunks(
        self, input_chunk_ids: Sequence[int], file: FileSpec, outputs: Sequence[OutputChunk]
    ) -> None:
        req = s.ReplaceChunksRequest.model_construct(
            input_chunk_ids=list(input_chunk_ids),
            file=s.file_to_m(file),
            outputs=[s.OutputChunkM.model_construct(**o.__dict__) for o in outputs],
        )
        await self._call("POST", "/v1/replace-chunks", req)

    # consumer groups
    async def commit_offsets(
        self, group_id: str, offsets: Sequence[GroupOffset], lease: LeaseToken | None = None
    ) -> None:
        req = s.CommitOffsetsRequest.model_construct(
            group_id=group_id,
            offsets=[s.GroupOffsetM.model_construct(**o.__dict__) for o in offsets],
            lease=None
            if lease is None
            else s.LeaseTokenM.model_construct(holder=lease.holder, epoch=lease.epoch),
        )
        await self._call("POST", "/v1/groups/commit-offsets", req)

    async def fetch_offsets(self, group_id: str, topics: Sequence[str] | None) -> list[GroupOffset]:
        req = s.FetchOffsetsRequest.model_construct(
            group_id=group_id, topics=None if topics is None else list(topics)
        )
        data = await self._call("POST", "/v1/groups/fetch-offsets", req)
        return [GroupOffset(**m.__dict__) for m in self._parse(_GROUP_OFFSETS, data)]

    async def delete_group_offsets(self, group_id: str) -> None:
        req = s.FetchOffsetsRequest.model_construct(group_id=group_id, topics=None)
        await self._call("POST", "/v1/groups/delete-offsets", req)

    async def delete_partition_offsets(self, group_id: str, partitions: Sequence[tuple[str, int]]) -> None:
        req = s.DeletePartitionOffsetsRequest.model_construct(
            group_id=group_id,
            partitions=[s.TopicPartitionM.model_construct(topic=t, partition=p) for t, p in partitions],
        )
        await self._call("POST", "/v1/groups/delete-partition-offsets", req)

    async def groups_with_offsets(self, group_ids: Sequence[str] | None) -> list[str]:
        req = s.GroupsWithOffsetsRequest.model_construct(
            group_ids=None if group_ids is None else list(group_ids)
        )
        return self._parse(_GROUP_IDS, await self._call("POST", "/v1/groups/with-offsets", req))

    # agents
    async def heartbeat_agent(self, agent: AgentInfo) -> None:
        await self._call("POST", "/v1/agents/heartbeat", s.AgentInfoM.model_construct(**agent.__dict__))

    async def live_agents(self) -> list[AgentInfo]:
        return [AgentInfo(**m.__dict__) for m in self._parse(_AGENTS, await self._call("GET", "/v1/agents"))]

    # group coordinator leases
    async def acquire_group_lease(self, group_id: str, agent_id: str, ttl_ms: int) -> LeaseGrant:
        req = s.AcquireGroupLeaseRequest.model_construct(group_id=group_id, agent_id=agent_id, ttl_ms=ttl_ms)
        m = self._parse(TypeAdapter(s.LeaseGrantM), await self._call("POST", "/v1/groups/lease/acquire", req))
        return LeaseGrant(**m.__dict__)

    async def renew_group_leases(
        self, agent_id: str, leases: Sequence[tuple[str, int]], ttl_ms: int
    ) -> list[str]:
        req = s.RenewGroupLeasesRequest.model_construct(
            agent_id=agent_id,
            leases=[s.GroupLeaseM.model_construct(group_id=g, epoch=e) for g, e in leases],
            ttl_ms=ttl_ms,
        )
        return self._parse(_GROUP_IDS, await self._call("POST", "/v1/groups/lease/renew", req))

    async def release_group_leases(self, agent_id: str, leases: Sequence[tuple[str, int]]) -> None:
        req = s.ReleaseGroupLeasesRequest.model_construct(
            agent_id=agent_id, leases=[s.GroupLeaseM.model_construct(group_id=g, epoch=e) for g, e in leases]
        )
        await self._call("POST", "/v1/groups/lease/release", req)

    async def confirm_group_generation(
        self, group_id: str, lease: LeaseToken, ttl_ms: int, group_state: str
    ) -> None:
        req = s.ConfirmGroupGenerationRequest.model_construct(
            group_id=group_id,
            lease=s.LeaseTokenM.model_construct(holder=lease.holder, epoch=lease.epoch),
            ttl_ms=ttl_ms,
            group_state=group_state,
        )
        await self._call("POST", "/v1/groups/lease/confirm-generation", req)

    async def close(self) -> None:
        await self._http.aclose()


def open_metadata_client(url_or_db: str, *, timeout_s: float = 10.0) -> MetadataClient:
    """`http(s)://...` -> HttpMetadataClient; a database URL (sqlite:///..., postgresql://...)
    -> LocalMetadataClient over a MetadataService of its own (migrated; closed with the client)."""
    if url_or_db.startswith(("http://", "https://")):
        return HttpMetadataClient(url_or_db, timeout_s=timeout_s)
    return LocalMetadataClient(MetadataService.from_url(url_or_db), owns_service=True)


def _check_protocol() -> None:  # mypy checks both classes against the Protocol here
    _a: type[MetadataClient] = LocalMetadataClient
    _b: type[MetadataClient] = HttpMetadataClient
