"""`HttpMetadataClient`: the `metadata.api_types.MetadataClient` over HTTP/JSON to
`skiff metadata` (metadata.app), with a pooled `httpx.AsyncClient`.

Imports httpx, pydantic and the wire types (metadata.serde, metadata.types,
metadata.errors) only: no SQLAlchemy, no service, no database driver, so a Spark
executor or a compactor job can import it cheaply (an import-linter contract in
pyproject.toml keeps it so).

Credentials (`metadata.credentials.MetadataCredentials`): the bearer token goes in every
request's Authorization header; a CA file (and a client certificate for mTLS) set the TLS
verification of https:// URLs. A token sent over plain http:// to a host other than
loopback is logged once as a warning (it travels in clear text).

Errors: an HTTP 4xx answer carries `{"error_code", "message"}` and raises
`MetadataError` (409: `ConflictError`, the compare-and-set failures); connection errors,
timeouts, HTTP 5xx (the database down) and malformed answers raise
`MetadataUnavailable`, which is retriable. A refused token (401, 403) is a
`MetadataError` with Kafka's SASL_AUTHENTICATION_FAILED or CLUSTER_AUTHORIZATION_FAILED:
retrying will not help.
"""

from __future__ import annotations

import ipaddress
import logging
import uuid
from collections.abc import Sequence
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError
from skiff.metadata import acl_serde as acl
from skiff.metadata import compaction_serde as cs
from skiff.metadata import scram_serde as ss
from skiff.metadata import serde as s
from skiff.metadata import txn_serde as ts
from skiff.metadata.acl_types import AclBinding, AclBindingFilter
from skiff.metadata.api_types import MetadataClient, NewTopic, StoredGroup, TopicCreation
from skiff.metadata.compaction_types import CheckpointUpdate, CompactionCandidate, CompactionLease, MergeRules
from skiff.metadata.credentials import MetadataCredentials
from skiff.metadata.errors import CONFLICT, INVALID_REQUEST, ConflictError, MetadataError, MetadataUnavailable
from skiff.metadata.group_lease_types import LeaseGrant, LeaseToken
from skiff.metadata.scram_types import ScramCredential, ScramCredentialInfo
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

log = logging.getLogger(__name__)

_CHUNK_RESULTS = TypeAdapter(list[s.ChunkResultM])
_FETCH_INFOS = TypeAdapter(list[s.PartitionFetchInfoM])
_FILE_CHUNKS = TypeAdapter(s.FileChunksM)
_STATES = TypeAdapter(list[s.PartitionStateM])
_ANSWERS = TypeAdapter(list[s.OffsetAnswerM])
_TOPIC_LIST = TypeAdapter(list[s.TopicM])
_TOPIC_MAP = TypeAdapter(dict[str, s.TopicM])
_TOPIC_CREATIONS = TypeAdapter(list[s.TopicCreationM])
_GROUP_OFFSETS = TypeAdapter(list[s.GroupOffsetM])
_GROUP_IDS = TypeAdapter(list[str])
_LEASE_GRANT = TypeAdapter(s.LeaseGrantM)
_COMMIT_RESULTS = TypeAdapter(list[s.OffsetCommitResultM])
_AGENTS = TypeAdapter(list[s.AgentInfoM])
_SCRAM_INFOS = TypeAdapter(list[ss.ScramCredentialInfoM])
_SCRAM_CREDS = TypeAdapter(list[ss.ScramCredentialM])
_WATERMARKS = TypeAdapter(list[s.PartitionWatermarkM])
_CANDIDATES = TypeAdapter(list[cs.CompactionCandidateM])

_DELETE_ANSWERS = TypeAdapter(list[s.DeleteRecordsAnswerM])
_RETENTION_RESULTS = TypeAdapter(list[s.RetentionResultM])
_COUNT = TypeAdapter(s.CountResponse)
_CLAIMED = TypeAdapter(list[s.ClaimedFileM])
_KEYS = TypeAdapter(list[str])
_SUCCESSES = TypeAdapter(dict[str, int])
_CLUSTER = TypeAdapter(s.ClusterInfoM)
_STORED_GROUPS = TypeAdapter(list[s.StoredGroupM])
_ACL_VERSION = TypeAdapter(acl.AclVersionM)
_ACL_BINDINGS = TypeAdapter(acl.AclBindingsM)
_ACLS_DELETED = TypeAdapter(acl.DeletedAclsM)

_OUTCOME = TypeAdapter(ts.OutcomeM)
_OUTCOMES = TypeAdapter(list[ts.OutcomeM])
_PARTITION_ERRORS = TypeAdapter(list[ts.PartitionErrorM])
_TXN_ERROR = TypeAdapter(ts.ErrorResponse)
_STABLE_OFFSETS = TypeAdapter(ts.StableOffsetsResponse)
_TXN_COMPLETE = TypeAdapter(ts.CompleteTxnResponse)
_TXN_RECORDS = TypeAdapter(list[ts.TxnRecordM])
_TXN_RECORD_MAP = TypeAdapter(dict[str, ts.TxnRecordM | None])


class HttpMetadataClient:
    """A `MetadataClient` over HTTP/JSON to the metadata service (metadata.app)."""

    def __init__(
        self,
        base_url: str,
        timeout_s: float = 10.0,
        *,
        max_connections: int = 32,
        transport: httpx.AsyncBaseTransport | None = None,
        credentials: MetadataCredentials | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        creds = credentials or MetadataCredentials()
        if creds.token and _clear_text_to_remote(self.base_url):
            log.warning(
                "sending the metadata token to %s over plain HTTP: use https:// (docs/operations.md)",
                self.base_url,
            )
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout_s),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            transport=transport,
            headers={"content-type": "application/json", **creds.headers()},
            verify=creds.ssl_verify(),
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

    async def create_topics(self, new: Sequence[NewTopic]) -> list[TopicCreation]:
        req = s.CreateTopicsRequest.model_construct(
            topics=[
                s.CreateTopicRequest.model_construct(
                    name=t.name, partition_count=t.partition_count, configs=dict(t.configs)
                )
                for t in new
            ]
        )
        data = await self._call("POST", "/v1/topics/create-batch", req)
        return [s.topic_creation_from_m(m) for m in self._parse(_TOPIC_CREATIONS, data)]

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

    async def file_chunks(self, object_key: str) -> FileChunks:
        data = await self._call("POST", "/v1/file-chunks", s.FileChunksRequest(object_key=object_key))
        return s.file_chunks_from_m(self._parse(_FILE_CHUNKS, data))

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
        self,
        input_chunk_ids: Sequence[int],
        file: FileSpec,
        outputs: Sequence[OutputChunk],
        checkpoints: Sequence[CheckpointUpdate] = (),
        lease_token: str | None = None,
    ) -> None:
        req = s.ReplaceChunksRequest.model_construct(
            input_chunk_ids=list(input_chunk_ids),
            file=s.file_to_m(file),
            outputs=[s.OutputChunkM.model_construct(**o.__dict__) for o in outputs],
            checkpoints=[s.CheckpointUpdateM.model_construct(**c.__dict__) for c in checkpoints],
            lease_token=lease_token,
        )
        await self._call("POST", "/v1/replace-chunks", req)

    async def compaction_candidates(
        self, topic: str | None = None, rules: MergeRules | None = None, limit: int = 1000
    ) -> list[CompactionCandidate]:
        req = cs.CandidatesRequest.model_construct(
            topic=topic, rules=cs.rules_to_m(rules or MergeRules()), limit=limit
        )
        data = await self._call("POST", "/v1/compaction/candidates", req)
        return [cs.candidate_from_m(m) for m in self._parse(_CANDIDATES, data)]

    async def claim_compaction_job(
        self,
        partitions: Sequence[PartitionKey],
        holder: str,
        lease_ms: int,
        input_chunk_ids: Sequence[int] = (),
    ) -> CompactionLease | None:
        req = cs.ClaimRequest.model_construct(
            partitions=[s.PartitionKeyM.model_construct(**k.__dict__) for k in partitions],
            holder=holder,
            lease_ms=lease_ms,
            input_chunk_ids=list(input_chunk_ids),
        )
        m = self._parse(TypeAdapter(cs.ClaimResponse), await self._call("POST", "/v1/compaction/claim", req))
        return cs.lease_from_m(m.lease) if m.lease is not None else None

    async def renew_compaction_lease(self, token: str, lease_ms: int) -> CompactionLease:
        req = cs.RenewRequest.model_construct(token=token, lease_ms=lease_ms)
        m = self._parse(TypeAdapter(cs.LeaseM), await self._call("POST", "/v1/compaction/renew", req))
        return cs.lease_from_m(m)

    async def release_compaction_lease(self, token: str) -> None:
        await self._call("POST", "/v1/compaction/release", cs.ReleaseRequest.model_construct(token=token))

    # retention, DeleteRecords, offset expiry, GC
    async def delete_records(self, queries: Sequence[DeleteRecordsQuery]) -> list[DeleteRecordsAnswer]:
        req = s.DeleteRecordsRequest.model_construct(
            queries=[s.DeleteRecordsQueryM.model_construct(**q.__dict__) for q in queries]
        )
        data = await self._call("POST", "/v1/delete-records", req)
        return [DeleteRecordsAnswer(**m.__dict__) for m in self._parse(_DELETE_ANSWERS, data)]

    async def enforce_retention(
        self, topic: str, max_chunks_per_partition: int = 1000
    ) -> list[RetentionResult]:
        req = s.EnforceRetentionRequest.model_construct(
            topic=topic, max_chunks_per_partition=max_chunks_per_partition
        )
        data = await self._call("POST", "/v1/retention/enforce", req)
        return [RetentionResult(**m.__dict__) for m in self._parse(_RETENTION_RESULTS, data)]

    async def touch_groups(self, group_ids: Sequence[str]) -> None:
        await self._call(
            "POST", "/v1/groups/touch", s.GroupIdsRequest.model_construct(group_ids=list(group_ids))
        )

    async def expire_group_offsets(self, retention_ms: int) -> int:
        req = s.ExpireOffsetsRequest.model_construct(retention_ms=retention_ms)
        return self._parse(_COUNT, await self._call("POST", "/v1/groups/expire-offsets", req)).count

    async def claim_deletable_files(
        self, token: str, max_files: int, grace_ms: int, claim_ms: int
    ) -> list[ClaimedFile]:
        req = s.ClaimFilesRequest.model_construct(
            token=token, max_files=max_files, grace_ms=grace_ms, claim_ms=claim_ms
        )
        data = await self._call("POST", "/v1/gc/claim", req)
        return [ClaimedFile(**m.__dict__) for m in self._parse(_CLAIMED, data)]

    async def forget_files(self, token: str, file_ids: Sequence[int]) -> int:
        req = s.ForgetFilesRequest.model_construct(token=token, file_ids=list(file_ids))
        return self._parse(_COUNT, await self._call("POST", "/v1/gc/forget", req)).count

    async def unknown_object_keys(self, object_keys: Sequence[str]) -> list[str]:
        req = s.ObjectKeysRequest.model_construct(object_keys=list(object_keys))
        return self._parse(_KEYS, await self._call("POST", "/v1/gc/unknown-keys", req))

    async def record_success(self, task: str) -> None:
        await self._call("POST", "/v1/gc/record-success", s.RecordSuccessRequest.model_construct(task=task))

    async def last_successes(self) -> dict[str, int]:
        return self._parse(_SUCCESSES, await self._call("GET", "/v1/gc/last-successes"))

    # consumer groups
    async def commit_offsets(
        self, group_id: str, offsets: Sequence[GroupOffset], lease: LeaseToken | None = None
    ) -> list[OffsetCommitResult]:
        req = s.CommitOffsetsRequest.model_construct(
            group_id=group_id,
            offsets=[s.GroupOffsetM.model_construct(**o.__dict__) for o in offsets],
            lease=None
            if lease is None
            else s.LeaseTokenM.model_construct(holder=lease.holder, epoch=lease.epoch),
        )
        data = await self._call("POST", "/v1/groups/commit-offsets", req)
        return [OffsetCommitResult(**m.__dict__) for m in self._parse(_COMMIT_RESULTS, data)]

    # group coordinator leases
    async def acquire_group_lease(self, group_id: str, agent_id: str, ttl_ms: int) -> LeaseGrant:
        req = s.AcquireGroupLeaseRequest.model_construct(group_id=group_id, agent_id=agent_id, ttl_ms=ttl_ms)
        m = self._parse(_LEASE_GRANT, await self._call("POST", "/v1/groups/lease/acquire", req))
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

    # operators (skiff groups)
    async def stored_groups(self, group_ids: Sequence[str] | None) -> list[StoredGroup]:
        req = s.GroupsWithOffsetsRequest.model_construct(
            group_ids=None if group_ids is None else list(group_ids)
        )
        data = await self._call("POST", "/v1/admin/groups/stored", req)
        return [StoredGroup(**m.__dict__) for m in self._parse(_STORED_GROUPS, data)]

    async def reset_group_offsets(
        self, group_id: str, offsets: Sequence[GroupOffset]
    ) -> list[OffsetCommitResult]:
        req = s.ResetOffsetsRequest.model_construct(
            group_id=group_id, offsets=[s.GroupOffsetM.model_construct(**o.__dict__) for o in offsets]
        )
        data = await self._call("POST", "/v1/admin/groups/reset-offsets", req)
        return [OffsetCommitResult(**m.__dict__) for m in self._parse(_COMMIT_RESULTS, data)]

    async def delete_group(self, group_id: str) -> None:
        await self._call(
            "POST", "/v1/admin/groups/delete", s.GroupIdRequest.model_construct(group_id=group_id)
        )

    # agents
    async def heartbeat_agent(self, agent: AgentInfo) -> None:
        await self._call("POST", "/v1/agents/heartbeat", s.AgentInfoM.of(agent))

    async def deregister_agent(self, agent: AgentInfo) -> None:
        await self._call("POST", "/v1/agents/deregister", s.AgentInfoM.of(agent))

    # SCRAM users
    async def upsert_scram_credential(self, cred: ScramCredential) -> None:
        await self._call("POST", "/v1/scram-users/upsert", ss.ScramCredentialM.of(cred))

    async def delete_scram_credential(self, user: str, mechanism: str) -> None:
        req = ss.DeleteScramCredentialRequest.model_construct(user=user, mechanism=mechanism)
        await self._call("POST", "/v1/scram-users/delete", req)

    async def describe_scram_users(self, users: Sequence[str] | None) -> list[ScramCredentialInfo]:
        req = ss.DescribeScramUsersRequest.model_construct(users=None if users is None else list(users))
        data = await self._call("POST", "/v1/scram-users/describe", req)
        return [m.to_info() for m in self._parse(_SCRAM_INFOS, data)]

    async def scram_credentials(self, user: str) -> list[ScramCredential]:
        req = ss.ScramCredentialsRequest.model_construct(user=user)
        data = await self._call("POST", "/v1/scram-users/credentials", req)
        return [m.to_credential() for m in self._parse(_SCRAM_CREDS, data)]

    async def live_agents(self) -> list[AgentInfo]:
        return [m.to_info() for m in self._parse(_AGENTS, await self._call("GET", "/v1/agents"))]

    # cluster settings
    async def bucket_url(self) -> str | None:
        return self._parse(_CLUSTER, await self._call("GET", "/v1/cluster")).bucket_url

    # Kafka ACLs (metadata.app's /v1/acls routes)
    async def acl_version(self) -> int:
        return self._parse(_ACL_VERSION, await self._call("GET", "/v1/acls/version")).version

    async def list_acls(self) -> tuple[int, list[AclBinding]]:
        m = self._parse(_ACL_BINDINGS, await self._call("GET", "/v1/acls"))
        return m.version, [acl.binding_from_m(b) for b in m.bindings]

    async def describe_acls(self, acl_filter: AclBindingFilter) -> tuple[int, list[AclBinding]]:
        req = acl.DescribeAclsRequest.model_construct(filter=acl.filter_to_m(acl_filter))
        m = self._parse(_ACL_BINDINGS, await self._call("POST", "/v1/acls/describe", req))
        return m.version, [acl.binding_from_m(b) for b in m.bindings]

    async def create_acls(self, bindings: Sequence[AclBinding]) -> int:
        req = acl.CreateAclsRequest.model_construct(bindings=[acl.binding_to_m(b) for b in bindings])
        return self._parse(_ACL_VERSION, await self._call("POST", "/v1/acls/create", req)).version

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> tuple[int, list[list[AclBinding]]]:
        req = acl.DeleteAclsRequest.model_construct(filters=[acl.filter_to_m(f) for f in filters])
        m = self._parse(_ACLS_DELETED, await self._call("POST", "/v1/acls/delete", req))
        return m.version, [[acl.binding_from_m(b) for b in per] for per in m.matched]

    # transactions (metadata.app's /v1/txn/* routes)
    async def init_txn_producer_id(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None = None
    ) -> Outcome:
        pid, epoch = expected if expected is not None else (-1, -1)
        req = ts.InitTxnProducerIdRequest.model_construct(
            transactional_id=transactional_id,
            timeout_ms=timeout_ms,
            expected_producer_id=pid,
            expected_epoch=epoch,
        )
        data = await self._call("POST", "/v1/txn/init-producer-id", req)
        return self._outcome(self._parse(_OUTCOME, data))

    @staticmethod
    def _outcome(m: ts.OutcomeM) -> Outcome:
        try:
            return ts.outcome_from_m(m)
        except ValueError as e:  # an unknown state name
            raise MetadataUnavailable(f"malformed answer from the metadata service: {e}") from e

    def _producer(self, transactional_id: str, producer_id: int, epoch: int) -> dict[str, Any]:
        return {"transactional_id": transactional_id, "producer_id": producer_id, "producer_epoch": epoch}

    async def add_partitions_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: Sequence[Partition],
        max_partitions: int | None = None,
    ) -> dict[Partition, int]:
        req = ts.AddPartitionsToTxnRequest.model_construct(
            **self._producer(transactional_id, producer_id, epoch),
            partitions=list(partitions),
            max_partitions=max_partitions,
        )
        data = await self._call("POST", "/v1/txn/add-partitions", req)
        return {(e.topic_id, e.partition): e.error for e in self._parse(_PARTITION_ERRORS, data)}

    async def verify_txn_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: Sequence[Partition]
    ) -> int:
        req = ts.AddPartitionsToTxnRequest.model_construct(
            **self._producer(transactional_id, producer_id, epoch),
            partitions=list(partitions),
            verify_only=True,
        )
        data = await self._call("POST", "/v1/txn/verify-partitions", req)
        return self._parse(_TXN_ERROR, data).error

    async def add_offsets_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        group_id: str,
        max_partitions: int | None = None,
    ) -> int:
        req = ts.AddOffsetsToTxnRequest.model_construct(
            **self._producer(transactional_id, producer_id, epoch),
            group_id=group_id,
            max_partitions=max_partitions,
        )
        data = await self._call("POST", "/v1/txn/add-offsets", req)
        return self._parse(_TXN_ERROR, data).error

    async def txn_offset_commit(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        group_id: str,
        offsets: Sequence[GroupOffset],
        max_offsets: int | None = None,
    ) -> list[OffsetCommitResult]:
        req = ts.TxnOffsetCommitRequest.model_construct(
            **self._producer(transactional_id, producer_id, epoch),
            group_id=group_id,
            offsets=[s.GroupOffsetM.model_construct(**o.__dict__) for o in offsets],
            max_offsets=max_offsets,
        )
        data = await self._call("POST", "/v1/txn/offset-commit", req)
        return [OffsetCommitResult(r.error_code, r.error_message) for r in self._parse(_COMMIT_RESULTS, data)]

    async def fetch_stable_offsets(
        self, group_id: str, topics: Sequence[str] | None
    ) -> tuple[list[GroupOffset], set[tuple[str, int]]]:
        req = s.FetchOffsetsRequest.model_construct(
            group_id=group_id, topics=None if topics is None else list(topics)
        )
        answer = self._parse(_STABLE_OFFSETS, await self._call("POST", "/v1/txn/stable-offsets", req))
        return (
            [GroupOffset(**m.__dict__) for m in answer.offsets],
            {(tp.topic, tp.partition) for tp in answer.unstable},
        )

    async def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> Outcome:
        req = ts.EndTxnRequest.model_construct(
            **self._producer(transactional_id, producer_id, epoch), commit=commit
        )
        data = await self._call("POST", "/v1/txn/end", req)
        return self._outcome(self._parse(_OUTCOME, data))

    async def complete_txn(self, transactional_id: str, producer_id: int, epoch: int) -> TxnRecord | None:
        req = ts.TxnProducerM.model_construct(**self._producer(transactional_id, producer_id, epoch))
        answer = self._parse(_TXN_COMPLETE, await self._call("POST", "/v1/txn/complete", req))
        return None if answer.record is None else self._record(answer.record)

    @staticmethod
    def _record(m: ts.TxnRecordM) -> TxnRecord:
        try:
            return ts.record_from_m(m)
        except ValueError as e:
            raise MetadataUnavailable(f"malformed answer from the metadata service: {e}") from e

    async def expire_txns(self) -> list[Outcome]:
        data = await self._call("POST", "/v1/txn/expire")
        return [self._outcome(m) for m in self._parse(_OUTCOMES, data)]

    async def preparing_txns(self) -> list[TxnRecord]:
        data = await self._call("POST", "/v1/txn/preparing")
        return [self._record(m) for m in self._parse(_TXN_RECORDS, data)]

    async def describe_txns(self, transactional_ids: Sequence[str]) -> dict[str, TxnRecord | None]:
        req = ts.DescribeTxnsRequest.model_construct(transactional_ids=list(transactional_ids))
        data = await self._call("POST", "/v1/txn/describe", req)
        return {
            k: None if v is None else self._record(v) for k, v in self._parse(_TXN_RECORD_MAP, data).items()
        }

    async def list_txns(
        self, states: Sequence[str] = (), producer_ids: Sequence[int] = (), duration_filter_ms: int = -1
    ) -> list[TxnRecord]:
        req = ts.ListTxnsRequest.model_construct(
            states=list(states), producer_ids=list(producer_ids), duration_filter_ms=duration_filter_ms
        )
        data = await self._call("POST", "/v1/txn/list", req)
        return [self._record(m) for m in self._parse(_TXN_RECORDS, data)]

    async def close(self) -> None:
        await self._http.aclose()


def _clear_text_to_remote(base_url: str) -> bool:
    url = httpx.URL(base_url)
    if url.scheme != "http":
        return False
    host = url.host.strip("[]").lower()
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True


def _check_protocol() -> None:  # mypy checks the class against the Protocol here
    _b: type[MetadataClient] = HttpMetadataClient
