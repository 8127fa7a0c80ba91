"""The metadata service over HTTP/JSON (FastAPI; OpenAPI at /docs and /openapi.json).

RPC style: one POST per `MetadataClient` method under /v1/ (names and group ids travel in
the body, never in the path: group ids may be any string). Errors are JSON
`{"error_code": <Kafka code>, "message": ...}`:

- MetadataError -> 400 (404 for UNKNOWN_TOPIC_OR_PARTITION), ConflictError -> 409;
- malformed input (bad JSON, wrong types, out-of-range integers, values the database
  refuses) -> 400/413/422 with error_code INVALID_REQUEST (42), never a 500;
- the database unreachable or timing out -> 503 (clients treat it as retriable).

Authentication and roles: metadata.auth (bearer tokens; every route is declared on the
router of the roles that may call it, `APIRouter(dependencies=[allow(...)])` below; a
route without a declaration is admin-only). Routes that take an agent id from the caller
(agents' heartbeat/deregister, group leases, a commit's writer) also call
`check_acting_as`: a token bound to other agent ids is refused with 403.
`/healthz` (the process answers) and `/readyz` (the database answers a `SELECT 1` within
`ready_timeout_ms`, else 503) need no token.

`run_metadata_server(db_url, host, port)` migrates the database and serves with uvicorn
(optionally over TLS, optionally requiring client certificates).
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from skiff.metadata import auth as auth_mod
from skiff.metadata import commit_feed
from skiff.metadata import compaction_serde as cs
from skiff.metadata import scram_serde as ss
from skiff.metadata import serde as s
from skiff.metadata.acl_routes import acl_router
from skiff.metadata.api_types import NewTopic
from skiff.metadata.auth import (
    ADMIN,
    AGENT,
    COMPACTOR,
    READER,
    MetadataAuth,
    TokenTable,
    allow,
    check_acting_as,
    public,
)
from skiff.metadata.db import is_db_unavailable
from skiff.metadata.errors import (
    INVALID_REQUEST,
    UNKNOWN_SERVER_ERROR,
    UNKNOWN_TOPIC_OR_PARTITION,
    ConflictError,
    MetadataError,
)
from skiff.metadata.group_lease_types import LeaseToken
from skiff.metadata.health import ReadinessProbe
from skiff.metadata.service import MetadataService
from skiff.metadata.txn_routes import txn_router
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, SQLAlchemyError, StatementError

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
# /readyz answers 503 when the database has not answered `SELECT 1` within this time.
DEFAULT_READY_TIMEOUT_MS = 2_000

# The read-only lookups every role may make (admin may call everything anyway).
READ = (AGENT, COMPACTOR, READER)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodyLimitMiddleware:
    """Refuse request bodies over `max_bytes` with 413, before the app parses anything:
    a declared Content-Length over the limit is refused at once; a chunked body is read
    up to the limit and then refused."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for k, v in scope.get("headers", []):
            if k == b"content-length":
                try:
                    n = int(v)
                except ValueError:
                    await _send_error(send, 400, INVALID_REQUEST, "bad Content-Length")
                    return
                if n > self.max_bytes:
                    await _send_error(send, 413, INVALID_REQUEST, f"request body over {self.max_bytes} bytes")
                    return
        chunks: list[bytes] = []
        size = 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            body = msg.get("body", b"")
            size += len(body)
            if size > self.max_bytes:
                await _send_error(send, 413, INVALID_REQUEST, f"request body over {self.max_bytes} bytes")
                return
            chunks.append(body)
            if not msg.get("more_body", False):
                break
        whole = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": whole, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _send_error(send: Send, status: int, code: int, message: str) -> None:
    resp = JSONResponse({"error_code": code, "message": message}, status_code=status)
    body = resp.body
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _error(status: int, code: int, message: str) -> JSONResponse:
    return JSONResponse({"error_code": code, "message": message}, status_code=status)


def create_app(
    service: MetadataService,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    tokens: TokenTable | None = None,
    ready_timeout_ms: int = DEFAULT_READY_TIMEOUT_MS,
) -> FastAPI:
    """The API over `service`; `tokens` None leaves it open (the playground on localhost)."""
    app = FastAPI(
        title="Skiff metadata",
        version="1",
        description="Topics, offsets, chunks and groups of a Skiff cluster. See metadata/app.py.",
    )
    svc = service
    auth = MetadataAuth(tokens)
    auth_mod.install(app, auth)  # before any route: every route gets the role check
    unbound = auth_mod.unbound_agent_warning(tokens)
    if unbound is not None:
        log.warning("%s", unbound)
    app.state.auth = auth
    # Who may call what (metadata.auth): each route is declared on the router of its roles.
    agent_routes = APIRouter(dependencies=[allow(AGENT)])
    compactor_routes = APIRouter(dependencies=[allow(COMPACTOR)])
    read_routes = APIRouter(dependencies=[allow(*READ)])  # lookups every role makes
    agent_reader_routes = APIRouter(dependencies=[allow(AGENT, READER)])
    compactor_reader_routes = APIRouter(dependencies=[allow(COMPACTOR, READER)])
    reader_routes = APIRouter(dependencies=[allow(READER)])
    health_routes = APIRouter(dependencies=[public()])

    @app.exception_handler(MetadataError)
    async def _metadata_error(_req: Request, e: MetadataError) -> JSONResponse:
        if isinstance(e, ConflictError):
            status = 409
        elif e.error_code == UNKNOWN_TOPIC_OR_PARTITION:
            status = 404
        else:
            status = 400
        return _error(status, e.error_code, e.message)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_req: Request, e: RequestValidationError) -> JSONResponse:
        errors = e.errors()
        first = errors[0] if errors else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        msg = f"invalid request: {where}: {first.get('msg', '')}" if errors else "invalid request"
        detail = jsonable_encoder(errors, custom_encoder={bytes: lambda b: repr(b)})
        return JSONResponse(
            {"error_code": INVALID_REQUEST, "message": msg, "detail": detail}, status_code=422
        )

    @app.exception_handler(SQLAlchemyError)
    async def _db_error(_req: Request, e: SQLAlchemyError) -> JSONResponse:
        if is_db_unavailable(e):
            log.warning("database unavailable: %s", e)
            return _error(503, UNKNOWN_SERVER_ERROR, f"database unavailable: {type(e).__name__}")
        if isinstance(e, (DBAPIError, StatementError)):
            # The database refused a value (NUL in a string, a too long string, ...).
            return _error(400, INVALID_REQUEST, f"refused by the database: {getattr(e, 'orig', e)}")
        log.exception("database error")
        return _error(500, UNKNOWN_SERVER_ERROR, f"{type(e).__name__}: {e}")

    @app.exception_handler(ValueError)
    async def _value_error(_req: Request, e: ValueError) -> JSONResponse:
        return _error(400, INVALID_REQUEST, str(e))

    @app.exception_handler(Exception)
    async def _unexpected(_req: Request, e: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return _error(500, UNKNOWN_SERVER_ERROR, f"{type(e).__name__}: {e}")

    # ---------------------------------------------------------------- topics

    @agent_routes.post("/v1/topics/create", response_model=s.TopicM, tags=["topics"])
    def create_topic(req: s.CreateTopicRequest) -> s.TopicM:
        return s.topic_to_m(svc.create_topic(req.name, req.partition_count, dict(req.configs)))

    @agent_routes.post("/v1/topics/create-batch", response_model=list[s.TopicCreationM], tags=["topics"])
    def create_topics(req: s.CreateTopicsRequest) -> list[s.TopicCreationM]:
        new = [NewTopic(t.name, t.partition_count, dict(t.configs)) for t in req.topics]
        return [s.topic_creation_to_m(r) for r in svc.create_topics(new)]

    @agent_routes.post("/v1/topics/delete", response_model=s.OkResponse, tags=["topics"])
    def delete_topic(req: s.TopicNameRequest) -> s.OkResponse:
        svc.delete_topic(req.name)
        return s.OkResponse()

    @read_routes.get("/v1/topics", response_model=list[s.TopicM], tags=["topics"])
    def list_topics() -> list[s.TopicM]:
        return [s.topic_to_m(x) for x in svc.list_topics()]

    @read_routes.post("/v1/topics/describe", response_model=dict[str, s.TopicM], tags=["topics"])
    def describe_topics(req: s.TopicNamesRequest) -> dict[str, s.TopicM]:
        return {k: s.topic_to_m(v) for k, v in svc.describe_topics(req.names).items()}

    @read_routes.post("/v1/topics/by-id", response_model=dict[str, s.TopicM], tags=["topics"])
    def topics_by_id(req: s.TopicIdsRequest) -> dict[str, s.TopicM]:
        return {str(k): s.topic_to_m(v) for k, v in svc.topics_by_id(req.topic_ids).items()}

    @agent_routes.post("/v1/topics/alter-configs", response_model=s.TopicM, tags=["topics"])
    def alter_topic_configs(req: s.AlterConfigsRequest) -> s.TopicM:
        return s.topic_to_m(
            svc.alter_topic_configs(req.name, dict(req.set_configs), list(req.delete_configs), req.replace)
        )

    @agent_routes.post("/v1/topics/add-partitions", response_model=s.TopicM, tags=["topics"])
    def add_partitions(req: s.AddPartitionsRequest) -> s.TopicM:
        return s.topic_to_m(svc.add_partitions(req.name, req.new_partition_count))

    # ---------------------------------------------------------------- produce / fetch

    @agent_routes.post("/v1/commit-file", response_model=list[s.ChunkResultM], tags=["produce"])
    def commit_file(req: s.CommitFileRequest, request: Request) -> list[s.ChunkResultM]:
        check_acting_as(request, req.file.writer)  # a bound token commits only its own files
        results = svc.commit_file(s.file_from_m(req.file), [s.chunk_spec_from_m(c) for c in req.chunks])
        return [s.chunk_result_to_m(r) for r in results]

    @agent_routes.post("/v1/producer-ids", response_model=s.ProducerIdResponse, tags=["produce"])
    def init_producer_id() -> s.ProducerIdResponse:
        pid, epoch = svc.init_producer_id()
        return s.ProducerIdResponse(producer_id=pid, producer_epoch=epoch)

    @read_routes.post("/v1/find-chunks", response_model=list[s.PartitionFetchInfoM], tags=["fetch"])
    def find_chunks(req: s.FindChunksRequest) -> list[s.PartitionFetchInfoM]:
        infos = svc.find_chunks([s.t.FetchQuery(**q.__dict__) for q in req.queries])
        return [s.fetch_info_to_m(i) for i in infos]

    @read_routes.post("/v1/file-chunks", response_model=s.FileChunksM, tags=["operations"])
    def file_chunks(req: s.FileChunksRequest) -> s.FileChunksM:
        return s.file_chunks_to_m(svc.file_chunks(req.object_key))

    @read_routes.post("/v1/partition-states", response_model=list[s.PartitionStateM], tags=["fetch"])
    def partition_states(req: s.PartitionStatesRequest) -> list[s.PartitionStateM]:
        states = svc.partition_states([s.t.PartitionKey(**k.__dict__) for k in req.keys])
        return [s.PartitionStateM.model_construct(**x.__dict__) for x in states]

    @agent_reader_routes.post(
        "/v1/wait-for-commits", response_model=list[s.PartitionWatermarkM], tags=["fetch"]
    )
    async def wait_for_commits(req: s.WaitForCommitsRequest) -> list[s.PartitionWatermarkM]:
        """Long poll (see metadata.commit_feed): answers when a commit moves the high
        watermark of one of the partitions past the known value, or with [] after timeout_ms."""
        svc.ensure_commit_listener()

        async def read(keys: Sequence[s.t.PartitionKey]) -> list[s.t.PartitionState]:
            return await run_in_threadpool(svc.partition_states, list(keys))

        moved = await commit_feed.wait_for_commits(
            svc.commit_feed,
            read,
            [s.t.PartitionWatermark(**k.__dict__) for k in req.known],
            req.timeout_ms,
        )
        return [s.PartitionWatermarkM.model_construct(**m.__dict__) for m in moved]

    @read_routes.post("/v1/list-offsets", response_model=list[s.OffsetAnswerM], tags=["fetch"])
    def list_offsets(req: s.ListOffsetsRequest) -> list[s.OffsetAnswerM]:
        answers = svc.list_offsets([s.t.OffsetQuery(**q.__dict__) for q in req.queries])
        return [s.OffsetAnswerM.model_construct(**x.__dict__) for x in answers]

    # ---------------------------------------------------------------- compaction

    @compactor_routes.post("/v1/replace-chunks", response_model=s.OkResponse, tags=["compaction"])
    def replace_chunks(req: s.ReplaceChunksRequest) -> s.OkResponse:
        svc.replace_chunks(
            list(req.input_chunk_ids),
            s.file_from_m(req.file),
            [s.output_from_m(o) for o in req.outputs],
            [s.t_checkpoint(c) for c in req.checkpoints],
            req.lease_token,
        )
        return s.OkResponse()

    @compactor_routes.post(
        "/v1/compaction/candidates", response_model=list[cs.CompactionCandidateM], tags=["compaction"]
    )
    def compaction_candidates(req: cs.CandidatesRequest) -> list[cs.CompactionCandidateM]:
        found = svc.compaction_candidates(req.topic, cs.rules_from_m(req.rules), req.limit)
        return [cs.candidate_to_m(c) for c in found]

    @compactor_routes.post("/v1/compaction/claim", response_model=cs.ClaimResponse, tags=["compaction"])
    def claim_compaction_job(req: cs.ClaimRequest) -> cs.ClaimResponse:
        lease = svc.claim_compaction_job(
            [s.t.PartitionKey(k.topic_id, k.partition) for k in req.partitions],
            req.holder,
            req.lease_ms,
            list(req.input_chunk_ids),
        )
        return cs.ClaimResponse(lease=cs.lease_to_m(lease) if lease else None)

    @compactor_routes.post("/v1/compaction/renew", response_model=cs.LeaseM, tags=["compaction"])
    def renew_compaction_lease(req: cs.RenewRequest) -> cs.LeaseM:
        return cs.lease_to_m(svc.renew_compaction_lease(req.token, req.lease_ms))

    @compactor_routes.post("/v1/compaction/release", response_model=s.OkResponse, tags=["compaction"])
    def release_compaction_lease(req: cs.ReleaseRequest) -> s.OkResponse:
        svc.release_compaction_lease(req.token)
        return s.OkResponse()

    # ---------------------------------------------------------------- retention, GC

    @agent_routes.post("/v1/delete-records", response_model=list[s.DeleteRecordsAnswerM], tags=["retention"])
    def delete_records(req: s.DeleteRecordsRequest) -> list[s.DeleteRecordsAnswerM]:
        answers = svc.delete_records([s.t.DeleteRecordsQuery(**q.__dict__) for q in req.queries])
        return [s.DeleteRecordsAnswerM.model_construct(**a.__dict__) for a in answers]

    @compactor_routes.post(
        "/v1/retention/enforce", response_model=list[s.RetentionResultM], tags=["retention"]
    )
    def enforce_retention(req: s.EnforceRetentionRequest) -> list[s.RetentionResultM]:
        results = svc.enforce_retention(req.topic, req.max_chunks_per_partition)
        return [s.RetentionResultM.model_construct(**r.__dict__) for r in results]

    @agent_routes.post("/v1/groups/touch", response_model=s.OkResponse, tags=["groups"])
    def touch_groups(req: s.GroupIdsRequest) -> s.OkResponse:
        svc.touch_groups(req.group_ids)
        return s.OkResponse()

    @compactor_routes.post("/v1/groups/expire-offsets", response_model=s.CountResponse, tags=["groups"])
    def expire_group_offsets(req: s.ExpireOffsetsRequest) -> s.CountResponse:
        return s.CountResponse(count=svc.expire_group_offsets(req.retention_ms))

    @compactor_routes.post("/v1/gc/claim", response_model=list[s.ClaimedFileM], tags=["gc"])
    def claim_deletable_files(req: s.ClaimFilesRequest) -> list[s.ClaimedFileM]:
        claimed = svc.claim_deletable_files(req.token, req.max_files, req.grace_ms, req.claim_ms)
        return [s.ClaimedFileM.model_construct(**c.__dict__) for c in claimed]

    @compactor_routes.post("/v1/gc/forget", response_model=s.CountResponse, tags=["gc"])
    def forget_files(req: s.ForgetFilesRequest) -> s.CountResponse:
        return s.CountResponse(count=svc.forget_files(req.token, req.file_ids))

    @compactor_routes.post("/v1/gc/unknown-keys", response_model=list[str], tags=["gc"])
    def unknown_object_keys(req: s.ObjectKeysRequest) -> list[str]:
        return svc.unknown_object_keys(req.object_keys)

    @compactor_routes.post("/v1/gc/record-success", response_model=s.OkResponse, tags=["gc"])
    def record_success(req: s.RecordSuccessRequest) -> s.OkResponse:
        svc.record_success(req.task)
        return s.OkResponse()

    @compactor_reader_routes.get("/v1/gc/last-successes", response_model=dict[str, int], tags=["gc"])
    def last_successes() -> dict[str, int]:
        return svc.last_successes()

    @reader_routes.get("/metrics", tags=["health"])
    def metrics() -> Response:
        """Prometheus text: seconds since each maintenance task last succeeded."""
        now_ms = svc.clock()
        lines = [
            "# HELP skiff_maintenance_last_success_age_seconds Seconds since the task last succeeded.",
            "# TYPE skiff_maintenance_last_success_age_seconds gauge",
        ]
        for task, ms in sorted(svc.last_successes().items()):
            lines.append(
                f'skiff_maintenance_last_success_age_seconds{{task="{task}"}} {(now_ms - ms) / 1000:.3f}'
            )
        lines.extend(auth.metrics_lines())
        lines.extend(svc.commits.object_check_metrics_lines())
        return Response("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")

    # ---------------------------------------------------------------- groups

    @agent_routes.post(
        "/v1/groups/commit-offsets", response_model=list[s.OffsetCommitResultM], tags=["groups"]
    )
    def commit_offsets(req: s.CommitOffsetsRequest, request: Request) -> list[s.OffsetCommitResultM]:
        lease = None if req.lease is None else LeaseToken(req.lease.holder, req.lease.epoch)
        if lease is not None:
            check_acting_as(request, lease.holder)
        results = svc.commit_offsets(
            req.group_id, [s.t.GroupOffset(**o.__dict__) for o in req.offsets], lease
        )
        return [s.OffsetCommitResultM.model_construct(**r.__dict__) for r in results]

    @agent_reader_routes.post(
        "/v1/groups/fetch-offsets", response_model=list[s.GroupOffsetM], tags=["groups"]
    )
    def fetch_offsets(req: s.FetchOffsetsRequest) -> list[s.GroupOffsetM]:
        offsets = svc.fetch_offsets(req.group_id, req.topics)
        return [s.GroupOffsetM.model_construct(**o.__dict__) for o in offsets]

    @agent_routes.post("/v1/groups/delete-offsets", response_model=s.OkResponse, tags=["groups"])
    def delete_group_offsets(req: s.FetchOffsetsRequest) -> s.OkResponse:
        """Forget every committed offset of a group (DeleteGroups); `topics` is ignored."""
        svc.delete_group_offsets(req.group_id)
        return s.OkResponse()

    @agent_routes.post("/v1/groups/delete-partition-offsets", response_model=s.OkResponse, tags=["groups"])
    def delete_partition_offsets(req: s.DeletePartitionOffsetsRequest) -> s.OkResponse:
        """Forget the committed offsets of some partitions of a group, in one transaction (OffsetDelete)."""
        svc.delete_partition_offsets(req.group_id, [(p.topic, p.partition) for p in req.partitions])
        return s.OkResponse()

    @agent_reader_routes.post("/v1/groups/with-offsets", response_model=list[str], tags=["groups"])
    def groups_with_offsets(req: s.GroupsWithOffsetsRequest) -> list[str]:
        """The group ids (of `group_ids`, or all when null) that have committed offsets (ListGroups)."""
        return svc.groups_with_offsets(req.group_ids)

    app.include_router(operator_router(svc))

    # ---------------------------------------------------------------- agents

    @agent_routes.post("/v1/agents/deregister", response_model=s.OkResponse, tags=["agents"])
    def deregister_agent(req: s.AgentInfoM, request: Request) -> s.OkResponse:
        check_acting_as(request, req.agent_id)
        svc.deregister_agent(req.to_info())
        return s.OkResponse()

    @agent_routes.post("/v1/agents/heartbeat", response_model=s.OkResponse, tags=["agents"])
    def heartbeat_agent(req: s.AgentInfoM, request: Request) -> s.OkResponse:
        check_acting_as(request, req.agent_id)
        svc.heartbeat_agent(req.to_info())
        return s.OkResponse()

    @read_routes.get("/v1/agents", response_model=list[s.AgentInfoM], tags=["agents"])
    def live_agents() -> list[s.AgentInfoM]:
        return [s.AgentInfoM.of(a) for a in svc.live_agents()]

    # ---------------------------------------------------------------- group coordinator leases

    @agent_routes.post("/v1/groups/lease/acquire", response_model=s.LeaseGrantM, tags=["groups"])
    def acquire_group_lease(req: s.AcquireGroupLeaseRequest, request: Request) -> s.LeaseGrantM:
        """Take (or re-take, with a new epoch) the lease on coordinating a group (metadata.group_leases)."""
        check_acting_as(request, req.agent_id)
        grant = svc.acquire_group_lease(req.group_id, req.agent_id, req.ttl_ms)
        return s.LeaseGrantM.model_construct(**{f: getattr(grant, f) for f in s.LeaseGrantM.model_fields})

    @agent_routes.post("/v1/groups/lease/renew", response_model=list[str], tags=["groups"])
    def renew_group_leases(req: s.RenewGroupLeasesRequest, request: Request) -> list[str]:
        """Renew an agent's group leases in one transaction; answers the groups renewed."""
        check_acting_as(request, req.agent_id)
        return svc.renew_group_leases(req.agent_id, [(x.group_id, x.epoch) for x in req.leases], req.ttl_ms)

    @agent_routes.post("/v1/groups/lease/release", response_model=s.OkResponse, tags=["groups"])
    def release_group_leases(req: s.ReleaseGroupLeasesRequest, request: Request) -> s.OkResponse:
        check_acting_as(request, req.agent_id)
        svc.release_group_leases(req.agent_id, [(x.group_id, x.epoch) for x in req.leases])
        return s.OkResponse()

    @agent_routes.post("/v1/groups/lease/confirm-generation", response_model=s.OkResponse, tags=["groups"])
    def confirm_group_generation(req: s.ConfirmGroupGenerationRequest, request: Request) -> s.OkResponse:
        """A new generation: renew the lease and store the group's state, or NOT_COORDINATOR."""
        check_acting_as(request, req.lease.holder)
        lease = LeaseToken(req.lease.holder, req.lease.epoch)
        svc.confirm_group_generation(req.group_id, lease, req.ttl_ms, req.group_state)
        return s.OkResponse()

    # ---------------------------------------------------------------- SCRAM users

    app.include_router(scram_read_router(svc))
    app.include_router(scram_write_router(svc))

    # ---------------------------------------------------------------- transactions (metadata.txn_routes)

    app.include_router(txn_router(svc))

    # ---------------------------------------------------------------- cluster settings

    @read_routes.get("/v1/cluster", response_model=s.ClusterInfoM, tags=["cluster"])
    def cluster_info() -> s.ClusterInfoM:
        """Settings readers need: the bucket URL the agents write to (null: not configured)."""
        return s.ClusterInfoM(bucket_url=svc.bucket_url)

    # ---------------------------------------------------------------- ACLs (acls branch)
    # Kafka ACL bindings and their version: every route under /v1/acls, in one APIRouter
    # (metadata.acl_routes). Operator/admin routes: they decide who may do what on the Kafka
    # listeners.
    app.include_router(acl_router(svc))

    # ---------------------------------------------------------------- health

    def select_one() -> None:
        with svc.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    probe = ReadinessProbe(select_one, ready_timeout_ms / 1000.0)

    @health_routes.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        """Liveness: the process answers (no database call)."""
        return {"status": "ok"}

    @health_routes.get("/readyz", tags=["health"])
    async def readyz() -> JSONResponse:
        """Readiness: the database answers `SELECT 1` in time, else 503."""
        problem = await probe.check()
        if problem is None:
            return JSONResponse({"status": "ok"})
        return JSONResponse({"status": "unavailable", "message": problem}, status_code=503)

    for router in (
        agent_routes,
        compactor_routes,
        read_routes,
        agent_reader_routes,
        compactor_reader_routes,
        reader_routes,
        health_routes,
    ):
        app.include_router(router)
    app.add_middleware(BodyLimitMiddleware, max_bytes=max_body_bytes)  # type: ignore[arg-type]
    auth_mod.add_middleware(app, auth)  # outermost: no body is read before authentication
    return app


def tls_settings(cert: str | None, key: str | None, client_ca: str | None) -> dict[str, Any]:
    """uvicorn's TLS keywords for the `skiff metadata` TLS flags, checked up front (a bad
    file is a clear ValueError at start-up, not a traceback from inside uvicorn)."""
    import ssl

    if not cert and not key:
        if client_ca:
            raise ValueError("--tls-client-ca needs --tls-cert and --tls-key (client certificates need TLS)")
        return {}
    if not (cert and key):
        raise ValueError("--tls-cert and --tls-key go together")
    try:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(cert, key)
        if client_ca:
            ctx.load_verify_locations(client_ca)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"cannot load the metadata TLS files: {e}") from None
    out: dict[str, Any] = {"ssl_certfile": cert, "ssl_keyfile": key}
    if client_ca:
        out.update(ssl_ca_certs=client_ca, ssl_cert_reqs=ssl.CERT_REQUIRED)
    return out


# The SCRAM routes: agents read credentials (to authenticate Kafka clients) and change them
# for Kafka's AlterUserScramCredentials (which the agent's ACLs guard: ALTER on CLUSTER);
# admins (`skiff users`) may do both.


def scram_read_router(svc: MetadataService) -> APIRouter:
    """Reading SCRAM credentials: agents (to authenticate clients) and admins."""
    router = APIRouter(tags=["scram-users"], dependencies=[allow(AGENT)])

    @router.post("/v1/scram-users/describe", response_model=list[ss.ScramCredentialInfoM])
    def describe_scram_users(req: ss.DescribeScramUsersRequest) -> list[ss.ScramCredentialInfoM]:
        """Users' mechanisms and iteration counts (never salts or keys); `users` null: all."""
        return [
            ss.ScramCredentialInfoM.model_construct(
                user=i.user, mechanism=i.mechanism, iterations=i.iterations
            )
            for i in svc.describe_scram_users(req.users)
        ]

    @router.post("/v1/scram-users/credentials", response_model=list[ss.ScramCredentialM])
    def scram_credentials(req: ss.ScramCredentialsRequest) -> list[ss.ScramCredentialM]:
        """One user's stored credentials (salt, iterations, StoredKey, ServerKey), [] if none."""
        return [ss.ScramCredentialM.of(c) for c in svc.scram_credentials(req.user)]

    return router


def scram_write_router(svc: MetadataService) -> APIRouter:
    """Changing SCRAM credentials: agents (Kafka's admin API) and admins."""
    router = APIRouter(tags=["scram-users"], dependencies=[allow(AGENT)])

    @router.post("/v1/scram-users/upsert", response_model=s.OkResponse)
    def upsert_scram_credential(req: ss.ScramCredentialM) -> s.OkResponse:
        """Create or replace one user's credential for one mechanism (already salted)."""
        svc.upsert_scram_credential(req.to_credential())
        return s.OkResponse()

    @router.post("/v1/scram-users/delete", response_model=s.OkResponse)
    def delete_scram_credential(req: ss.DeleteScramCredentialRequest) -> s.OkResponse:
        """Remove one credential; RESOURCE_NOT_FOUND (91) if there is none."""
        svc.delete_scram_credential(req.user, req.mechanism)
        return s.OkResponse()

    return router


def operator_router(svc: MetadataService) -> APIRouter:
    """What operators' commands (`skiff groups`) need beyond the agents' calls, under
    /v1/admin/ (metadata.group_admin). Changes are refused with NON_EMPTY_GROUP (400)
    while the group has active members."""
    router = APIRouter(prefix="/v1/admin", tags=["operators"], dependencies=[allow(ADMIN)])

    @router.post("/groups/stored", response_model=list[s.StoredGroupM])
    def stored_groups(req: s.GroupsWithOffsetsRequest) -> list[s.StoredGroupM]:
        """Groups (of `group_ids`, or all) with offsets or a stored generation, with that state."""
        return [s.StoredGroupM.model_construct(**g.__dict__) for g in svc.stored_groups(req.group_ids)]

    @router.post("/groups/reset-offsets", response_model=list[s.OffsetCommitResultM])
    def reset_group_offsets(req: s.ResetOffsetsRequest) -> list[s.OffsetCommitResultM]:
        """Commit offsets for an operator; one answer per offset, as commit-offsets."""
        results = svc.reset_group_offsets(req.group_id, [s.t.GroupOffset(**o.__dict__) for o in req.offsets])
        return [s.OffsetCommitResultM.model_construct(**r.__dict__) for r in results]

    @router.post("/groups/delete", response_model=s.OkResponse)
    def delete_group(req: s.GroupIdRequest) -> s.OkResponse:
        """Forget a group: offsets and stored state (GROUP_ID_NOT_FOUND if it has neither)."""
        svc.delete_group(req.group_id)
        return s.OkResponse()

    return router


def run_metadata_server(
    db_url: str,
    host: str,
    port: int,
    *,
    log_level: str = "info",
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    bucket_url: str | None = None,
    tokens: TokenTable | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    tls_client_ca: str | None = None,
    commit_verify_objects: bool | None = None,
) -> None:
    """Serve the metadata API with uvicorn until interrupted (the `skiff metadata` command).
    Runs the migrations first; several replicas may start at once over one PostgreSQL.
    `bucket_url` (the agents' bucket) is served at GET /v1/cluster for readers such as Spark.
    `tokens` turns authentication on (metadata.auth); `tls_cert`/`tls_key` serve HTTPS, and
    `tls_client_ca` then also requires client certificates signed by that CA (mTLS).
    `commit_verify_objects` (None: on when `bucket_url` is known): one HEAD per file commit
    checks the object is in the bucket with its stated size (metadata.object_check)."""
    import uvicorn

    tls = tls_settings(tls_cert, tls_key, tls_client_ca)
    for warning in auth_mod.exposure_warnings(host, auth_enabled=tokens is not None, tls=bool(tls)):
        log.warning("%s", warning)

    service = MetadataService.from_url(db_url, bucket_url=bucket_url, verify_objects=commit_verify_objects)
    if service.commits.object_check is None:
        log.warning(
            "file commits are not checked against the bucket (%s): a holder of an agent token can"
            " commit chunks of an object that does not exist. Configure --bucket (docs/operations.md)",
            "turned off by --no-commit-verify-objects" if commit_verify_objects is False else "no --bucket",
        )
    try:
        app = create_app(service, max_body_bytes=max_body_bytes, tokens=tokens)
        # Everything loaded so far lives as long as the process: keep it out of the cyclic
        # GC's full collections, which otherwise scan ~100k objects (tens of ms on a small
        # machine) and show up as the p99 of commit latency.
        gc.collect()
        gc.freeze()
        # On SIGTERM, requests in flight get 5 s to finish: commits take milliseconds, and
        # agents' commit long polls (up to 10 s) are cut short; agents retry elsewhere.
        uvicorn.run(
            app,
            host=host,
            port=port,
            log_level=log_level,
            access_log=False,
            timeout_graceful_shutdown=5,
            **tls,
        )
    finally:
        service.close()
