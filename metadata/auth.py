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
- `admin`: everything, including every route that declares no role.

A token is at least 16 printable ASCII characters without spaces (`openssl rand -hex 32`).
The same token on several lines has the union of their roles (an agent that also runs
compaction: `agent,compactor:TOKEN`); two tokens for one role let a token be rotated
without downtime. A configured file with no token is an error, never an open service.

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

import hashlib
import hmac
import ipaddress
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.params import Depends as DependsParam
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from metadata.errors import CLUSTER_AUTHORIZATION_FAILED, SASL_AUTHENTICATION_FAILED

log = logging.getLogger(__name__)

AGENT = "agent"
COMPACTOR = "compactor"
READER = "reader"
ADMIN = "admin"
ROLES = frozenset({AGENT, COMPACTOR, READER, ADMIN})

MIN_TOKEN_CHARS = 16


ENV_TOKENS = "SKIFF_METADATA_TOKENS"
ENV_TOKENS_FILE = "SKIFF_METADATA_TOKENS_FILE"

# Where the middleware leaves the caller's roles for the Authorizer (an ASGI scope key).
_SCOPE_ROLES = "skiff.roles"

# A denied request is logged at most this often (a hostile client must not flood the log);
# the counts are always in /metrics.
DENIED_LOG_INTERVAL_S = 10.0


class TokenConfigError(ValueError):
    """The tokens file or variable is malformed; the message names the line, never a token."""


class TokenTable:
    """Configured tokens (kept only as SHA-256 digests) and their roles."""

    def __init__(self, roles_by_token: Mapping[str, Iterable[str]]) -> None:
        if not roles_by_token:
            raise TokenConfigError("no tokens configured")
        self._entries = [
            (hashlib.sha256(token.encode()).digest(), frozenset(roles))
            for token, roles in roles_by_token.items()
        ]

    def __len__(self) -> int:
        return len(self._entries)

    def roles_for(self, token: str) -> frozenset[str] | None:
        """The token's roles, or None if it is not configured. Constant time in the token:
        every configured digest is compared, whatever matched before."""
        presented = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        found: frozenset[str] | None = None
        for digest, roles in self._entries:
            if hmac.compare_digest(presented, digest):
                found = roles
        return found

    @classmethod
    def parse(cls, text: str, source: str) -> TokenTable:
        """Parse `ROLE[,ROLE...]:TOKEN` entries (one per line, or space-separated)."""
        roles_by_token: dict[str, set[str]] = {}
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
                roles = {r.strip() for r in role_part.split(",") if r.strip()}
                unknown = roles - ROLES
                if not roles or unknown:  # not echoed: a swapped TOKEN:ROLE would print the token
                    raise TokenConfigError(f"{where}: unknown role; roles are {', '.join(sorted(ROLES))}")
                if len(token) < MIN_TOKEN_CHARS or not all(0x21 <= ord(c) <= 0x7E for c in token):
                    raise TokenConfigError(
                        f"{where}: a token must be at least {MIN_TOKEN_CHARS} printable ASCII characters"
                        " without spaces (e.g. `openssl rand -hex 32`)"
                    )
                roles_by_token.setdefault(token, set()).update(roles)
        if not roles_by_token:
            raise TokenConfigError(f"{source} holds no token (an empty file would leave the service open)")
        return cls(roles_by_token)


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
    refused requests by reason (`missing`, `invalid`, `forbidden`) for /metrics."""

    def __init__(self, tokens: TokenTable | None, *, clock_s: Callable[[], float] = time.monotonic) -> None:
        self.tokens = tokens
        self.refused: Counter[str] = Counter()
        self._clock_s = clock_s
        self._last_log_s: float | None = None
        self._public_paths: frozenset[str] | None = None

    @property
    def enabled(self) -> bool:
        return self.tokens is not None

    def authenticate(self, authorization: str | None) -> frozenset[str]:
        """The caller's roles from an Authorization header value, or AuthError(401)."""
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
        scheme, _, credentials = authorization.strip().partition(" ")
        roles = self.tokens.roles_for(credentials.strip()) if scheme.lower() == "bearer" else None
        if roles is None:
            raise self._refuse(
                "invalid",
                AuthError(
                    401,
                    SASL_AUTHENTICATION_FAILED,
                    "invalid bearer token",
                    'Bearer realm="skiff-metadata", error="invalid_token"',
                ),
            )
        return roles

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
        for reason in ("missing", "invalid", "forbidden"):
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
                scope[_SCOPE_ROLES] = self.auth.authenticate(header)
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
        roles = request.scope.get(_SCOPE_ROLES)
        if roles is None:
            roles = self.auth.authenticate(request.headers.get("authorization"))
        self.auth.authorize(roles, route, request.method)


def install(app: FastAPI, auth: MetadataAuth) -> None:
    """Enforce `auth` on `app`: call before declaring routes (the Authorizer joins every
    route declared afterwards, on the app or on routers included into it) and add the
    middleware last of all (outermost)."""
    app.router.dependencies.append(Depends(Authorizer(auth)))

    @app.exception_handler(AuthError)
    async def _auth_error(_req: Request, e: AuthError) -> JSONResponse:
        return e.response()


def add_middleware(app: FastAPI, auth: MetadataAuth) -> None:
    app.add_middleware(AuthMiddleware, auth=auth, fastapi_app=app)  # type: ignore[arg-type]


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
