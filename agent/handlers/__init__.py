"""Request handlers, one module per Kafka API, and the registry the server dispatches through.

A handler is `async def handle(ctx: AgentContext, request: Request) -> response | None`:

- `request.body` is the kio request entity of exactly `request.api_version`;
- it returns the kio response entity for that API. Returning an entity of another
  version of the same API is allowed (handlers are usually written against the newest
  version): the server converts it to the request's version with `agent.protocol.convert`.
  Returning None sends no response at all (Produce with acks=0);
- handlers of one connection's Produce, Fetch, ListOffsets, Metadata, FindCoordinator,
  ApiVersions and DescribeCluster requests run concurrently; every other request (the
  APIs that change or read group, offset and admin state) runs alone on its connection:
  after every earlier request of that connection has finished, and before any later one
  starts (`agent.network.limits.runs_alone`; a spec with `exclusive=True` runs alone
  too). Responses are written in request order. Handlers are *started* in request order,
  so whatever a handler does before its first `await` happens in arrival order (the
  produce path relies on this);
- an exception escaping a handler becomes an error response when the response has a
  top-level error code (`MetadataError` -> its code, `MetadataUnavailable` ->
  REQUEST_TIMED_OUT, anything else -> UNKNOWN_SERVER_ERROR); otherwise the connection is
  closed, which every client treats as retriable. Handlers should therefore report
  per-item errors themselves;
- a client that disconnects cancels its in-flight handlers, so handlers must be
  cancellation-safe.

Authorization is declared with the handler: `HandlerSpec(..., access=...)` is required
(agent.handlers._access: Kafka's table of what each API checks, how a refusal is answered,
or why an API checks nothing). A check on the cluster that refuses the whole request is
applied before the handler runs (`refusal_response`); the handler makes every other check
in one line, `authorized(ctx, request, Op.WRITE, Resource.TOPIC, name)` (also
`authorized_on_cluster`, `authorized_for_any`, `authorized_operations`), with the
connection's `principal` and `client_host`; decisions are in memory (agent.acl_cache) and
always True with `authorizer_enabled` off. A registry's `audit` list (tests) records every
check made, so the generated matrix test proves each handler checks what it declares. The
table for operators is generated from the declarations (docs/security.md).

Registering: a module in this package that defines `SPEC: HandlerSpec` (or `SPECS`) is
picked up by `default_registry()`. ApiVersions advertises exactly the registered
(min_version, max_version) ranges, so dropping `agent/handlers/produce.py` with a SPEC
in place is all it takes to serve Produce.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import importlib
import ipaddress
import pkgutil
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta
from skiff.agent.handlers._access import Access, Check
from skiff.agent.network.sasl import PRE_AUTH_KEYS
from skiff.agent.protocol import RequestHeader, api_name, error_response, kio_version_range, to_error_code
from skiff.agent.zones import ClientZone
from skiff.metadata.errors import MetadataError, MetadataUnavailable
from skiff.metadata.security.acl_types import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from skiff.agent.context import AgentContext

NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


@dataclass
class ConnectionInfo:
    """Per-connection facts and state a handler may want (logging, metrics, ordering)."""

    connection_id: int
    peer: str  # "address:port" of the client
    client_software_name: str | None = None  # from ApiVersions v3+
    client_software_version: str | None = None
    # The newest Produce of this connection still appending to the produce buffer: the next
    # one appends after it, so a connection's batches reach the buffer in request order
    # (agent.handlers.produce). Done or None when no append is pending.
    produce_tail: asyncio.Future[None] | None = None
    # Who the client is: `User:<name>` after SASL, `User:<certificate subject DN>` after TLS
    # with a verified client certificate, else anonymous (read for authorization).
    principal: str = "User:ANONYMOUS"
    # The listener the client connected through (its name, e.g. PLAINTEXT, SASL_SSL):
    # Metadata and FindCoordinator answer with addresses on this listener.
    listener: str = "PLAINTEXT"
    # agent.sasl.SaslState on SASL listeners (None elsewhere): until it is authenticated,
    # only ApiVersions, SaslHandshake and SaslAuthenticate are served.
    sasl: Any = None
    # The client's address as ACL hosts name it (Kafka: InetAddress.getHostAddress()); derived
    # from `peer` unless given.
    client_host: str = ""
    # The client's availability zone (agent.zones): from its client.id, then a Fetch's rack_id.
    zone: ClientZone = field(default_factory=ClientZone)

    def __post_init__(self) -> None:
        if not self.client_host:
            self.client_host = client_address(self.peer)


def client_address(peer: str) -> str:
    """The address part of "address:port", as Kafka writes it in ACL hosts: an IPv4 client on
    a dual-stack socket (`::ffff:10.0.0.1`) is its IPv4 address, as Java's InetAddress shows it."""
    host = (peer.rsplit(":", 1)[0] if ":" in peer else peer).strip("[]")
    try:
        mapped = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(mapped, ipaddress.IPv6Address) and mapped.ipv4_mapped is not None:
        return str(mapped.ipv4_mapped)
    return host


@dataclass(frozen=True)
class Request:
    header: RequestHeader
    body: Any
    connection: ConnectionInfo
    registry: HandlerRegistry

    @property
    def api_key(self) -> int:
        return self.header.api_key

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def correlation_id(self) -> int:
        return self.header.correlation_id

    @property
    def client_id(self) -> str | None:
        return self.header.client_id


Handler = Callable[["AgentContext", Request], Awaitable[Any | None]]


@dataclass(frozen=True)
class HandlerSpec:
    api_key: int
    min_version: int
    max_version: int
    handler: Handler
    exclusive: bool = False
    name: str = field(default="")
    # What Kafka's authorizer checks for this API (required: see agent.handlers._access).
    access: Access = field(kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.access, Access):
            raise TypeError(f"api key {self.api_key}: access must be an Access declaration")
        if not self.name:
            object.__setattr__(self, "name", api_name(self.api_key) or f"api_{self.api_key}")
        rng = kio_version_range(self.api_key)
        if rng is None:
            raise ValueError(f"kio has no schema for api key {self.api_key}")
        if not rng[0] <= self.min_version <= self.max_version <= rng[1]:
            raise ValueError(
                f"{self.name}: versions {self.min_version}-{self.max_version} are outside what kio "
                f"knows ({rng[0]}-{rng[1]})"
            )

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


class HandlerRegistry:
    def __init__(self, specs: Iterable[HandlerSpec] = ()) -> None:
        self._specs: dict[int, HandlerSpec] = {}
        # When a list (tests), every authorization check a handler makes is appended here as
        # (api key, resource type, operation or None for an "authorized operations" report).
        self.audit: list[tuple[int, ResourceType, AclOperation | None]] | None = None
        for spec in specs:
            self.register(spec)

    def register(self, spec: HandlerSpec, replace: bool = False) -> None:
        if not isinstance(getattr(spec, "access", None), Access):
            raise TypeError(f"{spec.name}: no authorization declaration (access=...)")
        if spec.access.pre_auth != (spec.api_key in PRE_AUTH_KEYS):
            raise ValueError(
                f"{spec.name}: declared pre_auth={spec.access.pre_auth}, but agent.sasl serves "
                f"{'it' if spec.api_key in PRE_AUTH_KEYS else 'only ApiVersions and SASL'} "
                "before authentication"
            )
        if spec.api_key in self._specs and not replace:
            raise ValueError(f"a handler for {spec.name} (api key {spec.api_key}) is already registered")
        self._specs[spec.api_key] = spec

    def unregister(self, api_key: int) -> None:
        self._specs.pop(api_key, None)

    def get(self, api_key: int) -> HandlerSpec | None:
        return self._specs.get(api_key)

    def specs(self) -> list[HandlerSpec]:
        return [self._specs[k] for k in sorted(self._specs)]

    def __contains__(self, api_key: int) -> bool:
        return api_key in self._specs


def discover_specs(package: str = __name__) -> list[HandlerSpec]:
    """Every `SPEC`/`SPECS` defined by the modules of a handler package (import errors propagate)."""
    pkg = importlib.import_module(package)
    found: list[HandlerSpec] = []
    for mod_info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if mod_info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package}.{mod_info.name}")
        spec = getattr(module, "SPEC", None)
        if isinstance(spec, HandlerSpec):
            found.append(spec)
        found.extend(s for s in getattr(module, "SPECS", ()) if isinstance(s, HandlerSpec))
    return found


def default_registry() -> HandlerRegistry:
    return HandlerRegistry(discover_specs())


# --- shared helpers for handlers ----------------------------------------------------------

# What a handler reports when metadata cannot be reached: "the operation timed out and
# may or may not have happened", retriable for every client.
METADATA_UNAVAILABLE = ErrorCode.request_timed_out


# What a metadata call raises when it fails (the service refused, or could not be reached);
# anything else is a bug and propagates to the connection, which answers it as one.
METADATA_ERRORS = (MetadataError, MetadataUnavailable)


def error_of(exc: BaseException) -> tuple[ErrorCode, str]:
    """(Kafka error code, message) for an exception raised while serving a request."""
    if isinstance(exc, MetadataError):
        return to_error_code(exc.error_code), exc.message
    if isinstance(exc, MetadataUnavailable):
        return METADATA_UNAVAILABLE, f"metadata service unavailable: {exc}"
    return ErrorCode.unknown_server_error, f"{type(exc).__name__}: {exc}"


def admin_error_of(exc: BaseException) -> ErrorCode:
    """`error_of`'s code for the admin requests about groups (ListGroups, DescribeGroups,
    DeleteGroups, OffsetDelete), except that metadata out of reach is
    COORDINATOR_NOT_AVAILABLE: admin clients find the coordinator again and retry."""
    if isinstance(exc, MetadataUnavailable):
        return ErrorCode.coordinator_not_available
    return error_of(exc)[0]


# --- authorization (Kafka ACLs) -------------------------------------------------------------

# Re-exported so that each handler's check reads `authorized(ctx, request, READ, TOPIC, name)`.
Op = AclOperation
Resource = ResourceType


def _audit(request: Request, resource: ResourceType, operation: AclOperation | None) -> None:
    audit = request.registry.audit
    if audit is not None:
        audit.append((request.api_key, resource, operation))


def authorized(
    ctx: AgentContext, request: Request, operation: AclOperation, resource: ResourceType, name: str
) -> bool:
    """May this request's principal, from its client address, do `operation` on the
    resource? In memory (agent.acl_cache); always True with `authorizer_enabled` off."""
    acls = ctx.acls
    if not acls.enabled:
        return True
    _audit(request, resource, operation)
    conn = request.connection
    if acls.authorizer.authorize(conn.principal, conn.client_host, operation, resource, name):
        return True
    acls.denied[(request.api_key, resource)] += 1
    return False


def authorized_on_cluster(ctx: AgentContext, request: Request, operation: AclOperation) -> bool:
    return authorized(ctx, request, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def authorized_operations(
    ctx: AgentContext, request: Request, resource: ResourceType, name: str
) -> int | None:
    """The "authorized operations" bit field of a resource for this request's principal, or
    None with authorization off (the handler then reports every supported operation)."""
    acls = ctx.acls
    if not acls.enabled:
        return None
    _audit(request, resource, None)
    conn = request.connection
    return acls.authorizer.authorized_operations(conn.principal, conn.client_host, resource, name)


def authorized_for_any(
    ctx: AgentContext, request: Request, operation: AclOperation, resource: ResourceType
) -> bool:
    """May this principal do `operation` on some resource of this type? (Kafka's
    authorizeByResourceType, e.g. InitProducerId: WRITE on any topic.)"""
    acls = ctx.acls
    if not acls.enabled:
        return True
    _audit(request, resource, operation)
    conn = request.connection
    if acls.authorizer.authorize_by_resource_type(conn.principal, conn.client_host, operation, resource):
        return True
    acls.denied[(request.api_key, resource)] += 1
    return False


def refusal_response(ctx: AgentContext, spec: HandlerSpec, request: Request) -> Any | None:
    """The answer to a request its API's cluster gate refuses (Access.cluster_gate: an
    unconditional check on the cluster answered with a top-level error code), or None
    when the handler is to run. Applied by the connection before the handler."""
    gate: Check | None = spec.access.cluster_gate()
    if gate is None or gate.error is None:
        return None
    need = gate.needs[0]
    if authorized_on_cluster(ctx, request, need.operation):
        return None
    if spec.access.refuse is not None:
        return spec.access.refuse(request.body, gate.error)
    resp = error_response(spec.api_key, request.api_version, gate.error)
    if resp is None:  # no top-level error code in this version: the handler answers per item
        return None
    if getattr(resp, "error_message", "absent") is None:
        resp = dataclasses.replace(resp, error_message="Cluster authorization failed.")
    return resp
