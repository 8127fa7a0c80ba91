"""The metadata service over HTTP/JSON (FastAPI; OpenAPI at /docs and /openapi.json).

RPC style: one route per metadata operation under /v1/, derived from its declaration in
`metadata.wire.operations` (metadata.server.routes; names and group ids travel in the body, never in
the path: group ids may be any string). Besides them: `/metrics`, `/healthz`, `/readyz`.
Errors are JSON
`{"error_code": <Kafka code>, "message": ...}`:

- MetadataError -> 400 (404 for UNKNOWN_TOPIC_OR_PARTITION), ConflictError -> 409;
- malformed input (bad JSON, wrong types, out-of-range integers, values the database
  refuses) -> 400/413/422 with error_code INVALID_REQUEST (42), never a 500;
- the database unreachable or timing out -> 503 (clients treat it as retriable).

Authentication and roles: metadata.server.auth (bearer tokens; every route is declared on the
router of the roles that may call it, `APIRouter(dependencies=[allow(...)])`, the roles
each operation declares; a route without a declaration is admin-only). Operations that
act for an agent (agents' heartbeat/deregister, group leases, a commit's writer) declare
it (`acting_as`): a token bound to other agent ids is refused with 403.
`/healthz` (the process answers) and `/readyz` (the database answers a `SELECT 1` within
`ready_timeout_ms`, else 503) need no token.

`run_metadata_server(db_url, host, port)` migrates the database and serves with uvicorn
(optionally over TLS, optionally requiring client certificates).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from skiff.metadata.db import is_db_unavailable, read_tx
from skiff.metadata.errors import (
    INVALID_REQUEST,
    UNKNOWN_SERVER_ERROR,
    UNKNOWN_TOPIC_OR_PARTITION,
    ConflictError,
    MetadataError,
)
from skiff.metadata.schemas.errors import RegistryError
from skiff.metadata.server import auth as auth_mod
from skiff.metadata.server import metrics as metrics_mod
from skiff.metadata.server.auth import MetadataAuth, TokenTable, public
from skiff.metadata.server.bucket import LazyBucket
from skiff.metadata.server.console import mount_console
from skiff.metadata.server.health import ReadinessProbe
from skiff.metadata.server.iceberg_rest import iceberg_router
from skiff.metadata.server.lag_sampler import LagSampler
from skiff.metadata.server.registry_api import registry_routers
from skiff.metadata.server.routes import operation_routers
from skiff.metadata.service import MetadataService
from skiff.metadata.usage import LAG_SAMPLE_INTERVAL_MS
from skiff.metadata.wire.operations import OPERATIONS
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, SQLAlchemyError, StatementError

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
# /readyz answers 503 when the database has not answered `SELECT 1` within this time.
DEFAULT_READY_TIMEOUT_MS = 2_000

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
        refusal = self._declared_length_refusal(scope)
        if refusal is not None:
            await _send_error(send, refusal[0], INVALID_REQUEST, refusal[1])
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

    def _declared_length_refusal(self, scope: Scope) -> tuple[int, str] | None:
        """(status, message) when the Content-Length header is malformed or over the limit."""
        for k, v in scope.get("headers", []):
            if k != b"content-length":
                continue
            try:
                n = int(v)
            except ValueError:
                return 400, "bad Content-Length"
            if n > self.max_bytes:
                return 413, f"request body over {self.max_bytes} bytes"
        return None


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
    lag_sample_interval_ms: int = LAG_SAMPLE_INTERVAL_MS,
) -> FastAPI:
    """The API over `service`; `tokens` None leaves it open (the playground on localhost).
    While served (the app's lifespan), consumer lag is sampled every `lag_sample_interval_ms`
    for the console's charts (metadata.server.lag_sampler; 0: only when a page asks)."""
    sampler = LagSampler(service, lag_sample_interval_ms or LAG_SAMPLE_INTERVAL_MS)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(sampler.run(), name="lag-sampler") if lag_sample_interval_ms else None
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    app = FastAPI(
        title="Skiff metadata",
        version="1",
        description="Topics, offsets, chunks and groups of a Skiff cluster. See metadata/server/app.py.",
        lifespan=lifespan,
    )
    app.state.lag_sampler = sampler
    auth = MetadataAuth(tokens)
    auth_mod.install(app, auth)  # before any route: every route gets the role check
    unbound = auth_mod.unbound_agent_warning(tokens)
    if unbound is not None:
        log.warning("%s", unbound)
    app.state.auth = auth
    _install_error_handlers(app)
    # Who may call what (metadata.server.auth): each route is declared on the router of its roles.
    for router in operation_routers(service, OPERATIONS.values()):
        app.include_router(router)
    for router in registry_routers(service):  # Confluent Schema Registry's REST API
        app.include_router(router)
    app.include_router(iceberg_router(LazyBucket(service)))  # the tables' Iceberg REST catalog
    metrics = metrics_mod.install(app, service, auth)  # GET /metrics (metadata.server.metrics)
    app.include_router(health_router(service, ready_timeout_ms))
    app.add_middleware(BodyLimitMiddleware, max_bytes=max_body_bytes)
    auth_mod.add_middleware(app, auth)  # no body is read before authentication
    mount_console(
        app, service, auth, sampler
    )  # the web console at /console (its cookie gate goes outside auth)
    metrics_mod.add_middleware(app, metrics)  # outermost: times and counts every request
    return app


def _status_of(e: MetadataError) -> int:
    if isinstance(e, RegistryError):
        return e.http_status  # Confluent's codes carry their status
    if isinstance(e, ConflictError):
        return 409
    return 404 if e.error_code == UNKNOWN_TOPIC_OR_PARTITION else 400


def _install_error_handlers(app: FastAPI) -> None:
    """Every error as `{"error_code", "message"}` with the status of the module docstring."""

    @app.exception_handler(MetadataError)
    async def _metadata_error(_req: Request, e: MetadataError) -> JSONResponse:
        return _error(_status_of(e), e.error_code, e.message)

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


def health_router(svc: MetadataService, ready_timeout_ms: int) -> APIRouter:
    """`/healthz` and `/readyz`, callable without a token."""
    router = APIRouter(dependencies=[public()])

    def select_one() -> None:
        with read_tx(svc.engine) as conn:
            conn.execute(text("SELECT 1"))

    probe = ReadinessProbe(select_one, ready_timeout_ms / 1000.0)

    @router.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        """Liveness: the process answers (no database call)."""
        return {"status": "ok"}

    @router.get("/readyz", tags=["health"])
    async def readyz() -> JSONResponse:
        """Readiness: the database answers `SELECT 1` in time, else 503."""
        problem = await probe.check()
        if problem is None:
            return JSONResponse({"status": "ok"})
        return JSONResponse({"status": "unavailable", "message": problem}, status_code=503)

    return router


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
    `tokens` turns authentication on (metadata.server.auth); `tls_cert`/`tls_key` serve HTTPS, and
    `tls_client_ca` then also requires client certificates signed by that CA (mTLS).
    `commit_verify_objects` (None: on when `bucket_url` is known): one HEAD per file commit
    checks the object is in the bucket with its stated size (metadata.commits.object_check)."""
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
