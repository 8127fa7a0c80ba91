"""The metadata operations over HTTP/JSON to `skiff metadata` (metadata.server.app):
`HttpMetadataClient` (async, a pooled `httpx.AsyncClient`: the agent) and
`SyncHttpMetadataClient` (blocking, `httpx.Client`: the compactor's job threads, Spark's
driver, the command line). Both forward every operation declared in
`metadata.wire.operations` generically: the declaration gives the path, the request encoding
and the answer's decoding (`metadata.wire.codec`); nothing here is per operation.

Imports httpx, pydantic and the declarations only: no SQLAlchemy, no service, no database
driver, so a Spark executor or a compactor job can import it cheaply (an import-linter
contract in pyproject.toml keeps it so).

Credentials (`metadata.wire.credentials.MetadataCredentials`): the bearer token goes in every
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
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

import httpx
from pydantic import ValidationError
from skiff.metadata.errors import CONFLICT, INVALID_REQUEST, ConflictError, MetadataError, MetadataUnavailable
from skiff.metadata.schemas.errors import INCOMPATIBLE_SCHEMA, RegistryError
from skiff.metadata.wire.codec import Operation
from skiff.metadata.wire.credentials import MetadataCredentials
from skiff.metadata.wire.operations import OperationForwarder

if TYPE_CHECKING:
    from skiff.metadata.wire.operations import MetadataClient

log = logging.getLogger(__name__)


class _HttpBase:
    """What the async and the sync client share: the URL, the headers, and the rules that
    turn an operation call into a request and an answer into a value or an error."""

    # Told each operation's name and duration in seconds, whatever its outcome (the agent
    # sets it to feed a latency histogram; this layer knows no metrics library).
    observe_call: Callable[[str, float], None] | None = None

    def __init__(self, base_url: str, timeout_s: float, credentials: MetadataCredentials | None) -> None:
        self.base_url = base_url.rstrip("/")
        self._creds = credentials or MetadataCredentials()
        if self._creds.token and _clear_text_to_remote(self.base_url):
            log.warning(
                "sending the metadata token to %s over plain HTTP: use https:// (docs/operations.md)",
                self.base_url,
            )
        self._timeout = httpx.Timeout(timeout_s)

    def _client_args(self, max_connections: int) -> dict[str, Any]:
        return {
            "base_url": self.base_url,
            "timeout": self._timeout,
            "limits": httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
            "headers": {"content-type": "application/json", **self._creds.headers()},
            "verify": self._creds.ssl_verify(),
        }

    def _request_args(self, op: Operation, arguments: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"method": op.spec.http_method, "url": op.spec.path}
        if op.spec.http_method != "GET":
            out["content"] = op.encode_request(arguments)
        if op.spec.long_poll_ms is not None:
            # The call may legitimately take that long: the HTTP timeout is on top of it.
            extra_s = arguments[op.spec.long_poll_ms] / 1000.0
            base = self._timeout
            out["timeout"] = httpx.Timeout(
                connect=base.connect,
                read=(base.read or 0.0) + extra_s,
                write=base.write,
                pool=(base.pool or 0.0) + extra_s,
            )
        return out

    def _answer(self, op: Operation, resp: httpx.Response) -> Any:
        status = resp.status_code
        if status < 400:
            try:
                return op.decode_response(resp.content)
            except ValidationError as e:
                raise MetadataUnavailable(f"malformed answer from the metadata service: {e}") from e
        if status >= 500:
            raise MetadataUnavailable(f"metadata service answered {status}: {resp.text[:500]}")
        code, message = _error_of(resp)
        if code >= 1000 or code == INCOMPATIBLE_SCHEMA:  # the schema registry's (Confluent's) codes
            raise RegistryError(code, message)
        if status == 409:
            raise ConflictError(code if code else CONFLICT, message)
        raise MetadataError(code, message)

    def _unreachable(self, e: Exception) -> MetadataUnavailable:
        if isinstance(e, httpx.TransportError):  # connect errors, timeouts, protocol errors
            return MetadataUnavailable(f"metadata service at {self.base_url} unreachable: {e!r}")
        return MetadataUnavailable(f"metadata client unusable: {e}")  # e.g. the client is closed


class HttpMetadataClient(OperationForwarder, _HttpBase):
    """Every metadata operation, async, over HTTP/JSON to the metadata service."""

    def __init__(
        self,
        base_url: str,
        timeout_s: float = 10.0,
        *,
        max_connections: int = 32,
        transport: httpx.AsyncBaseTransport | None = None,
        credentials: MetadataCredentials | None = None,
    ) -> None:
        super().__init__(base_url, timeout_s, credentials)
        self._http = httpx.AsyncClient(transport=transport, **self._client_args(max_connections))

    async def call(self, op: Operation, arguments: Mapping[str, Any]) -> Any:
        """One operation with its arguments by name (what every method forwards to)."""
        started = time.perf_counter()
        try:
            resp = await self._http.request(**self._request_args(op, arguments))
        except (httpx.TransportError, RuntimeError) as e:
            raise self._unreachable(e) from e
        finally:
            if self.observe_call is not None:
                self.observe_call(op.name, time.perf_counter() - started)
        return self._answer(op, resp)

    def _forward(self, op: Operation) -> Callable[..., Any]:
        async def forward(*args: Any, **kwargs: Any) -> Any:
            return await self.call(op, op.bind(args, kwargs))

        return forward

    async def close(self) -> None:
        await self._http.aclose()


class SyncHttpMetadataClient(OperationForwarder, _HttpBase):
    """Every metadata operation, blocking, over HTTP/JSON: for threads without an event
    loop (compactor jobs, Spark's driver, the command line). Safe to share between threads
    (httpx.Client is)."""

    def __init__(
        self,
        base_url: str,
        timeout_s: float = 10.0,
        *,
        max_connections: int = 8,
        transport: httpx.BaseTransport | None = None,
        credentials: MetadataCredentials | None = None,
    ) -> None:
        super().__init__(base_url, timeout_s, credentials)
        self._http = httpx.Client(transport=transport, **self._client_args(max_connections))

    def call(self, op: Operation, arguments: Mapping[str, Any]) -> Any:
        try:
            resp = self._http.request(**self._request_args(op, arguments))
        except (httpx.TransportError, RuntimeError) as e:
            raise self._unreachable(e) from e
        return self._answer(op, resp)

    def _forward(self, op: Operation) -> Callable[..., Any]:
        def forward(*args: Any, **kwargs: Any) -> Any:
            return self.call(op, op.bind(args, kwargs))

        return forward

    def close(self) -> None:
        self._http.close()


def _error_of(resp: httpx.Response) -> tuple[int, str]:
    try:
        data = json.loads(resp.content)
        return int(data["error_code"]), str(data.get("message", ""))
    except (ValueError, KeyError, TypeError):
        return INVALID_REQUEST, f"HTTP {resp.status_code}: {resp.text[:500]}"


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


def http_metadata_client(base_url: str, **kwargs: Any) -> MetadataClient:
    """An `HttpMetadataClient` typed as the interface it forwards."""
    return cast("MetadataClient", HttpMetadataClient(base_url, **kwargs))
