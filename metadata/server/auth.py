"""Who may call the metadata service: bearer tokens with roles, deny by default.

Tokens (`skiff metadata --tokens-file PATH`, env `SKIFF_METADATA_TOKENS_FILE`; or the same
text in `SKIFF_METADATA_TOKENS`): one entry per line (in the variable, entries may also be
separated by spaces), `ROLE[,ROLE...]:TOKEN`; blank lines and lines starting with `#` are
ignored, as is the rest of a line from a word starting with `#`. The roles:

- `agent`: everything an agent calls (registration, heartbeats, file commits, fetch
  lookups, topic admin on behalf of Kafka clients, group state and leases);
- `compactor`: compaction plans, leases and swaps, retention, GC, offset expiry;
- `reader`: read-only lookups (cluster info, topics, chunks, offsets) for Spark, `skiff
  inspect` and monitoring;
- `writer`: registers schemas in the schema registry (metadata.server.registry_api) and
  reads them: the token of producers whose serializers register their schemas;
- `admin`: everything, including every route that declares no role.

Confluent's schema registry clients send HTTP basic auth (`basic.auth.user.info=USER:PASSWORD`):
`Authorization: Basic` with a token as the password is accepted as that token (the user name
is not checked).

A token is at least 16 printable ASCII characters without spaces (`openssl rand -hex 32`).
The same token on several lines has the union of their roles (an agent that also runs
compaction: `agent,compactor:TOKEN`); two tokens for one role let a token be rotated
without downtime. A configured file with no token is an error, never an open service.

Binding agent tokens to agent ids: `agent=ID` in place of `agent` gives the agent role
for the agent id ID only (`agent=agent-1:TOKEN`; several ids: `agent=a-1,agent=a-2:TOKEN`,
or the same token on several lines). Every route that takes an agent id from the caller
(heartbeat and deregistration, the group coordinator leases, a group offset commit under a
lease, the writer of a committed file: `check_acting_as` in metadata.server.app) refuses a bound
token naming another id with 403 CLUSTER_AUTHORIZATION_FAILED. An ID is 1 to 255 printable
ASCII characters other than `,` `:` `=` `#`. A plain `agent` token stays unbound (any id, as
before binding existed; the service warns once at start-up that such tokens exist: bind
them in production); one token both bound and unbound is an error. Admin acts for any id.
Client certificates (mTLS) only gate the connection: uvicorn does not hand the peer
certificate to the application, so identities and bindings come from tokens alone.

How requests are checked (auth on):

1. `AuthMiddleware` (outermost, before the body is read): a request to a non-public path
   without `Authorization: Bearer <known token>` gets 401 at once, so unauthenticated
   callers cost no body buffering and learn nothing. The presented token is hashed
   (SHA-256) and compared with every configured token's hash by `hmac.compare_digest`,
   without stopping at a match: the time taken does not depend on the token's content.
2. `Authorizer` (an app-wide FastAPI dependency, so also on routes of included routers):
   the matched route's declared roles (`allow(...)`, on the route or its router) against the
   caller's; a route without a declaration is admin-only; a mismatch gets 403.

Errors are the service's JSON `{"error_code", "message"}`: 401 with Kafka's
SASL_AUTHENTICATION_FAILED (58) and a `WWW-Authenticate: Bearer` header, 403 with
CLUSTER_AUTHORIZATION_FAILED (31). The message never contains a token.

Declaring the roles of a new route is one line, the `dependencies` argument:

    @app.post("/v1/users/upsert", dependencies=[allow(ADMIN)])        # admin only (explicit)
    @app.post("/v1/acls/describe", dependencies=[allow(AGENT, READER)])
    router = APIRouter(dependencies=[allow(AGENT)])                  # every route of a router

`public()` instead of `allow(...)` needs no token at all (health probes only). Admin may
always call everything. Several declarations on one route (router and route) must all
admit the caller. Declare on the route or in the `APIRouter(...)` constructor: a
declaration given to `include_router(..., dependencies=...)` is not seen by the check (the
routes then stay admin-only: the mistake fails closed).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.params import Depends as DependsParam
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from skiff.metadata.errors import CLUSTER_AUTHORIZATION_FAILED, SASL_AUTHENTICATION_FAILED
from skiff.metadata.wire.roles import ADMIN, AGENT, ROLES

log = logging.getLogger(__name__)

MIN_TOKEN_CHARS = 16


ENV_TOKENS = "SKIFF_METADATA_TOKENS"
ENV_TOKENS_FILE = "SKIFF_METADATA_TOKENS_FILE"

# Where the middleware leaves the caller (`Caller`) for the Authorizer and the routes that
# check agent ids (an ASGI scope key).
_SCOPE_CALLER = "skiff.caller"

# The characters an agent id bound in the tokens file may hold (`,` `:` `=` `#` separate).
_ID_FORBIDDEN = frozenset(",:=#")
MAX_AGENT_ID_CHARS = 255

# A denied request is logged at most this often (a hostile client must not flood the log);
# the counts are always in /metrics.
DENIED_LOG_INTERVAL_S = 10.0


class TokenConfigError(ValueError):
    """The tokens file or variable is malformed; the message names the line, never a token."""


@dataclass(frozen=True)
class Caller:
    """Who presented a token: its roles, and the agent ids it may act as (None: any id,
    for an unbound agent token and for admin)."""

    roles: frozenset[str]
    agent_ids: frozenset[str] | None = None

    def may_act_as(self, agent_id: str) -> bool:
        return ADMIN in self.roles or self.agent_ids is None or agent_id in self.agent_ids


class TokenTable:
    """Configured tokens (kept only as SHA-256 digests), their roles and agent-id bindings."""

    def __init__(
        self,
        roles_by_token: Mapping[str, Iterable[str]],
        agent_ids_by_token: Mapping[str, Iterable[str]] | None = None,
    ) -> None:
        """`agent_ids_by_token`: the agent ids each bound token may act as (its role
        `agent` is implied); tokens not in it are unbound."""
        bound = {t: frozenset(ids) for t, ids in (agent_ids_by_token or {}).items()}
        if not roles_by_token and not bound:
            raise TokenConfigError("no tokens configured")
        entries = []
        for token in dict.fromkeys([*roles_by_token, *bound]):
            roles = frozenset(roles_by_token.get(token, ()))
            ids = bound.get(token)
            if ids is not None:
                roles |= {AGENT}
            entries.append((hashlib.sha256(token.encode()).digest(), Caller(roles, ids)))
        self._entries = entries

    def __len__(self) -> int:
        return len(self._entries)

    def caller_for(self, token: str) -> Caller | None:
        """The token's caller, or None if it is not configured. Constant time in the token:
        every configured digest is compared, whatever matched before."""
        presented = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        found: Caller | None = None
        for digest, caller in self._entries:
            if hmac.compare_digest(presented, digest):
                found = caller
        return found

    def roles_for(self, token: str) -> frozenset[str] | None:
        """The token's roles, or None if it is not configured (constant time, as caller_for)."""
        caller = self.caller_for(token)
        return None if caller is None else caller.roles

    def unbound_agent_tokens(self) -> int:
        """How many tokens have the agent role without a binding to agent ids (admin aside)."""
        return sum(
            1 for _, c in self._entries if AGENT in c.roles and c.agent_ids is None and ADMIN not in c.roles
        )

    @classmethod
    def parse(cls, text: str, source: str) -> TokenTable:
        """Parse `ROLE[,ROLE...]:TOKEN` entries (one per line, or space-separated); a ROLE
        may be `agent=ID` (the agent role, bound to agent id ID)."""
        roles_by_token: dict[str, set[str]] = {}
        ids_by_token: dict[str, set[str]] = {}
        unbound_agent: set[str] = set()
        for lineno, line in enumerate(text.splitlines(), 1):
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            for entry in stripped.split():
                if entry.startswith("#"):  # a comment after the entries
                    break
                role_part, sep, token = entry.partition(":")
                where = f"{source} line {lineno}"
                if not sep or not token:
                    raise TokenConfigError(f"{where}: expected ROLE[,ROLE...]:TOKEN")
                items = [r.strip() for r in role_part.split(",") if r.strip()]
                ids = {r.partition("=")[2] for r in items if r.startswith(AGENT + "=")}
                roles = {r for r in items if not r.startswith(AGENT + "=")}
                unknown = roles - ROLES
                if not items or unknown:  # not echoed: a swapped TOKEN:ROLE would print the token
                    raise TokenConfigError(
                        f"{where}: unknown role; roles are {', '.join(sorted(ROLES))}"
                        f" ({AGENT}=ID binds an agent token to agent id ID)"
                    )
                if not all(_valid_agent_id(i) for i in ids):  # not echoed either
                    raise TokenConfigError(
                        f"{where}: in {AGENT}=ID, ID must be 1 to {MAX_AGENT_ID_CHARS} printable ASCII"
                        " characters other than , : = #"
                    )
                if len(token) < MIN_TOKEN_CHARS or not all(0x21 <= ord(c) <= 0x7E for c in token):
                    raise TokenConfigError(
                        f"{where}: a token must be at least {MIN_TOKEN_CHARS} printable ASCII characters"
                        " without spaces (e.g. `openssl rand -hex 32`)"
                    )
                roles_by_token.setdefault(token, set()).update(roles)
                if ids:
                    ids_by_token.setdefault(token, set()).update(ids)
                if AGENT in roles:
                    unbound_agent.add(token)
                if token in ids_by_token and token in unbound_agent:
                    raise TokenConfigError(
                        f"{where}: a token is both bound to agent ids ({AGENT}=ID) and unbound ({AGENT});"
                        " give it one or the other"
                    )
        if not roles_by_token:
            raise TokenConfigError(f"{source} holds no token (an empty file would leave the service open)")
        return cls(roles_by_token, ids_by_token)


def _valid_agent_id(agent_id: str) -> bool:
    return 0 < len(agent_id) <= MAX_AGENT_ID_CHARS and all(
        0x21 <= ord(c) <= 0x7E and c not in _ID_FORBIDDEN for c in agent_id
    )


def load_tokens(tokens_file: str | None, env: Mapping[str, str] | None = None) -> TokenTable | None:
    """The tokens from `tokens_file`, else from `SKIFF_METADATA_TOKENS_FILE` or
    `SKIFF_METADATA_TOKENS` in `env`; None when none is configured (the service is open)."""
    env = os.environ if env is None else env
    path = tokens_file or env.get(ENV_TOKENS_FILE) or None
    inline = env.get(ENV_TOKENS) or None
    if path and inline:
        raise TokenConfigError(f"set one of a tokens file and {ENV_TOKENS}, not both")
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                return TokenTable.parse(f.read(), path)
        except OSError as e:
            raise TokenConfigError(f"cannot read the tokens file {path}: {e.strerror or e}") from None
        except UnicodeDecodeError:
            raise TokenConfigError(f"the tokens file {path} is not UTF-8 text") from None
    if inline:
        return TokenTable.parse(inline, ENV_TOKENS)
    return None


# ---------------------------------------------------------------------------- declarations


class RoleRequirement:
    """A route's declaration (see `allow` / `public`): checked by the `Authorizer`; as a
    FastAPI dependency it does nothing itself."""

    def __init__(self, roles: frozenset[str], *, public: bool = False) -> None:
        self.roles = roles
        self.public = public

    async def __call__(self) -> None:
        return None

    def __repr__(self) -> str:
        return "public()" if self.public else f"allow({', '.join(sorted(self.roles))})"


def allow(*roles: str) -> Any:
    """The dependency declaring that callers with any of `roles` (or admin) may call a route."""
    unknown = set(roles) - ROLES
    if not roles or unknown:
        raise ValueError(f"allow() takes roles from {sorted(ROLES)}, got {roles!r}")
    return Depends(RoleRequirement(frozenset(roles)))


def public() -> Any:
    """The dependency declaring a route callable without a token (health probes)."""
    return Depends(RoleRequirement(frozenset(), public=True))


def declarations(route: APIRoute) -> list[RoleRequirement]:
    return [
        d.dependency
        for d in route.dependencies
        if isinstance(d, DependsParam) and isinstance(d.dependency, RoleRequirement)
    ]


def allowed_roles(route: APIRoute) -> frozenset[str] | None:
    """The roles that may call `route` (always including admin), or None for a public
    route. Undeclared: admin only. A public declaration counts only when it is the only one."""
    decls = declarations(route)
    if decls and all(d.public for d in decls):
        return None
    allowed = set(ROLES)
    declared = [d for d in decls if not d.public]
    if not declared:
        return frozenset({ADMIN})
    for d in declared:
        allowed &= d.roles
    return frozenset(allowed | {ADMIN})


# ---------------------------------------------------------------------------- enforcement


class AuthError(Exception):
    def __init__(
        self, status: int, error_code: int, message: str, www_authenticate: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.message = message
        self.www_authenticate = www_authenticate

    def response(self) -> JSONResponse:
        headers = {"WWW-Authenticate": self.www_authenticate} if self.www_authenticate else None
        return JSONResponse(
            {"error_code": self.error_code, "message": self.message}, status_code=self.status, headers=headers
        )


class MetadataAuth:
    """The service's authentication state: the token table (None: open) and the counts of
    refused requests by reason (`missing`, `invalid`, `forbidden`, `agent_id`) for /metrics."""

    def __init__(self, tokens: TokenTable | None, *, clock_s: Callable[[], float] = time.monotonic) -> None:
        self.tokens = tokens
        self.refused: Counter[str] = Counter()
        self._clock_s = clock_s
        self._last_log_s: float | None = None
        self._public_paths: frozenset[str] | None = None

    @property
    def enabled(self) -> bool:
        return self.tokens is not None

    def authenticate(self, authorization: str | None) -> Caller:
        """The caller (roles, bound agent ids) from an Authorization header value, or AuthError(401)."""
        assert self.tokens is not None
        if not authorization:
            raise self._refuse(
                "missing",
                AuthError(
                    401,
                    SASL_AUTHENTICATION_FAILED,
                    "authentication required: send Authorization: Bearer <token> (see docs/operations.md,"
                    " Securing the metadata service)",
                    'Bearer realm="skiff-metadata"',
                ),
            )
        caller = self.tokens.caller_for(presented_token(authorization))
        if caller is None:
            raise self._refuse(
                "invalid",
                AuthError(
                    401,
                    SASL_AUTHENTICATION_FAILED,
                    "invalid bearer token",
                    'Bearer realm="skiff-metadata", error="invalid_token"',
                ),
            )
        return caller

    def authorize(self, roles: frozenset[str], route: APIRoute, method: str) -> None:
        allowed = allowed_roles(route)
        if allowed is None or roles & allowed:
            return
        raise self._refuse(
            "forbidden",
            AuthError(
                403,
                CLUSTER_AUTHORIZATION_FAILED,
                f"{method} {route.path} needs the role {' or '.join(sorted(allowed))};"
                f" this token has {', '.join(sorted(roles))}",
            ),
        )

    def check_agent_id(self, caller: Caller | None, agent_id: str, what: str) -> None:
        """Refuse (403) a caller whose token is bound to other agent ids than `agent_id`;
        `what` names the request for the message (e.g. `POST /v1/agents/heartbeat`)."""
        if not self.enabled or caller is None or caller.may_act_as(agent_id):
            return
        assert caller.agent_ids is not None
        raise self._refuse(
            "agent_id",
            AuthError(
                403,
                CLUSTER_AUTHORIZATION_FAILED,
                f"{what}: this token is bound to agent id {', '.join(sorted(caller.agent_ids))}"
                f" and may not act as agent id {agent_id[:MAX_AGENT_ID_CHARS]!r}",
            ),
        )

    def is_public_path(self, app: Any, path: str) -> bool:
        if self._public_paths is None:  # routes are all declared by the first request
            self._public_paths = public_paths(app)
        return path in self._public_paths

    def _refuse(self, reason: str, err: AuthError) -> AuthError:
        self.refused[reason] += 1
        now = self._clock_s()
        if self._last_log_s is None or now - self._last_log_s >= DENIED_LOG_INTERVAL_S:
            self._last_log_s = now
            log.warning(
                "metadata request refused (%s): %s [refused so far: %s]",
                reason,
                err.message,
                dict(self.refused),
            )
        return err

    def metrics_lines(self) -> list[str]:
        lines = [
            "# HELP skiff_metadata_requests_refused_total Requests refused by authentication or authorization.",
            "# TYPE skiff_metadata_requests_refused_total counter",
        ]
        for reason in ("missing", "invalid", "forbidden", "agent_id"):
            lines.append(f'skiff_metadata_requests_refused_total{{reason="{reason}"}} {self.refused[reason]}')
        return lines


def iter_routes(routes: Iterable[Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(full path, route) of every route, descending into included routers (FastAPI keeps
    an included router as one entry with `original_router`, not as flattened routes)."""
    for r in routes:
        sub = getattr(r, "original_router", None)
        if sub is not None:
            ctx = getattr(r, "include_context", None)
            yield from iter_routes(sub.routes, prefix + str(getattr(ctx, "prefix", "") or ""))
        else:
            yield prefix + str(getattr(r, "path", "")), r


def public_paths(app: FastAPI) -> frozenset[str]:
    """Paths callable without a token: routes declared `public()` and FastAPI's own API
    description (/openapi.json, /docs: the API is open source, and the docs page has an
    Authorize button for trying calls with a token)."""
    out = {p for p, r in iter_routes(app.routes) if isinstance(r, APIRoute) and allowed_roles(r) is None}
    for url in (app.openapi_url, app.docs_url, app.redoc_url, app.swagger_ui_oauth2_redirect_url):
        if url:
            out.add(url)
    return frozenset(out)


def presented_token(authorization: str) -> str:
    """The token in an Authorization header: `Bearer TOKEN`, or HTTP basic auth `USER:TOKEN`
    (what Confluent's schema registry clients send, `basic.auth.user.info`; the user name is
    not checked, the token decides the roles). "" when there is none."""
    scheme, _, credentials = authorization.strip().partition(" ")
    if scheme.lower() == "bearer":
        return credentials.strip()
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(credentials.strip(), validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return ""
        return decoded.partition(":")[2]
    return ""


class AuthMiddleware:
    """Step 1 (see the module docstring): authenticate before anything reads the body."""

    def __init__(self, app: Any, auth: MetadataAuth, fastapi_app: FastAPI) -> None:
        self.app = app
        self.auth = auth
        self.fastapi_app = fastapi_app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan" or not self.auth.enabled:
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":  # no websocket route exists: refuse rather than pass unchecked
            await send({"type": "websocket.close", "code": 1008})
            return
        if not self.auth.is_public_path(self.fastapi_app, scope["path"]):
            header = None
            for k, v in scope.get("headers", ()):
                if k == b"authorization":
                    header = v.decode("latin-1")
                    break
            try:
                scope[_SCOPE_CALLER] = self.auth.authenticate(header)
            except AuthError as e:
                await e.response()(scope, receive, send)
                return
        await self.app(scope, receive, send)


class Authorizer:
    """Step 2: the app-wide dependency checking the matched route's declared roles."""

    def __init__(self, auth: MetadataAuth) -> None:
        self.auth = auth

    async def __call__(self, request: Request) -> None:
        if not self.auth.enabled:
            return
        route = request.scope.get("route")
        if not isinstance(route, APIRoute):  # not reachable through FastAPI's router
            raise AuthError(403, CLUSTER_AUTHORIZATION_FAILED, "no route")
        if allowed_roles(route) is None:
            return
        caller = request.scope.get(_SCOPE_CALLER)
        if caller is None:
            caller = self.auth.authenticate(request.headers.get("authorization"))
            request.scope[_SCOPE_CALLER] = caller
        self.auth.authorize(caller.roles, route, request.method)


def check_acting_as(request: Request, agent_id: str) -> None:
    """In a route: refuse (AuthError 403) when the caller's token is bound to other agent
    ids than `agent_id` (a no-op when authentication is off or the token is unbound)."""
    auth: MetadataAuth | None = getattr(request.app.state, "auth", None)
    if auth is None or not auth.enabled:
        return
    caller = request.scope.get(_SCOPE_CALLER)
    if caller is None:  # the Authorizer sets it on every non-public route: fail closed
        raise AuthError(403, CLUSTER_AUTHORIZATION_FAILED, "no authenticated caller")
    auth.check_agent_id(caller, agent_id, f"{request.method} {request.url.path}")


def unbound_agent_warning(tokens: TokenTable | None) -> str | None:
    """The start-up warning when agent tokens are not bound to agent ids (None if all are)."""
    n = 0 if tokens is None else tokens.unbound_agent_tokens()
    if not n:
        return None
    return (
        f"{n} agent token(s) are not bound to an agent id: any holder can register a broker under"
        f" any id and address. Bind each agent's token to its id ({AGENT}=ID:TOKEN in the tokens"
        " file, docs/operations.md)"
    )


def install(app: FastAPI, auth: MetadataAuth) -> None:
    """Enforce `auth` on `app`: call before declaring routes (the Authorizer joins every
    route declared afterwards, on the app or on routers included into it) and add the
    middleware last of all (outermost)."""
    app.router.dependencies.append(Depends(Authorizer(auth)))

    @app.exception_handler(AuthError)
    async def _auth_error(_req: Request, e: AuthError) -> JSONResponse:
        return e.response()


def add_middleware(app: FastAPI, auth: MetadataAuth) -> None:
    app.add_middleware(AuthMiddleware, auth=auth, fastapi_app=app)


def is_loopback(host: str) -> bool:
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def exposure_warnings(host: str, *, auth_enabled: bool, tls: bool) -> list[str]:
    """What to warn about when the service binds `host` (an empty list on loopback)."""
    if is_loopback(host):
        return []
    if not auth_enabled:
        return [
            f"the metadata service listens on {host} without authentication: anyone who can reach"
            " it can create and delete topics, rewrite offsets and register agents. Configure"
            f" --tokens-file ({ENV_TOKENS_FILE}) outside a playground (docs/operations.md)"
        ]
    if not tls:
        return [
            f"the metadata service listens on {host} over plain HTTP: bearer tokens travel in"
            " clear text. Configure --tls-cert and --tls-key (docs/operations.md)"
        ]
    return []
