"""Who is looking at the console: the token cookie, the login page's gate and CSRF tokens.

The console uses the metadata service's tokens and roles (metadata.server.auth): `reader`
views, `admin` acts. A browser cannot send `Authorization: Bearer`, so:

- `/console/login` (public) takes a token in a form, checks it against the token table,
  and stores it in a cookie (`skiff_console_token`: HttpOnly, SameSite=Strict, Path
  /console, Secure when the request came over TLS; the token base64url-encoded); `/console/logout` clears it.
- `ConsoleGate`, an ASGI middleware outside the service's `AuthMiddleware`, turns that
  cookie into the Authorization header of requests under /console (so authentication and
  each route's declared roles are checked exactly as for the API). A request without a
  token that asks for HTML (a browser) is redirected to the login page instead of
  getting the bare 401; other clients get the service's 401 as usual. A cookie whose token
  is no longer configured is cleared on the way to the login page.
- With authentication off (the playground) there is no login; the gate gives each browser
  a random session cookie (`skiff_console_session`) instead, for CSRF.

CSRF: every admin form carries `csrf_token(request)`, an HMAC-SHA256 keyed with the
caller's secret (the bearer token, or the session cookie with authentication off) over a
fixed label. It needs no server state, so any metadata replica verifies it; a page of
another site can neither read it nor (SameSite=Strict) send the cookie it is bound to.
`check_csrf` compares in constant time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import quote

from fastapi import Request
from skiff.metadata.server.auth import MetadataAuth

PREFIX = "/console"
LOGIN_PATH = "/console/login"
LOGOUT_PATH = "/console/logout"
STATIC_PREFIX = "/console/static/"
TOKEN_COOKIE = "skiff_console_token"
SESSION_COOKIE = "skiff_console_session"
# Where the gate leaves the session secret with authentication off (an ASGI scope key).
SCOPE_SESSION = "skiff.console.session"
# Where metadata.server.auth leaves the authenticated caller (its AuthMiddleware).
SCOPE_CALLER = "skiff.caller"
_CSRF_LABEL = b"skiff-console-csrf-v1"
_SESSION_FORMAT = re.compile(r"[A-Za-z0-9_-]{32,64}")
MAX_COOKIE_CHARS = 4096

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _header(scope: Scope, name: bytes) -> str | None:
    for k, v in scope.get("headers", ()):
        if k == name:
            return str(v.decode("latin-1"))
    return None


def cookies_of(scope: Scope) -> dict[str, str]:
    raw = _header(scope, b"cookie")
    if not raw or len(raw) > MAX_COOKIE_CHARS:
        return {}
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(raw)
    except CookieError:  # a malformed Cookie header is no cookie
        return {}
    return {k: m.value for k, m in jar.items()}


def cookie_header(scope: Scope, name: str, value: str, *, max_age_s: int | None = None) -> str:
    """A Set-Cookie value: HttpOnly, SameSite=Strict, Path /console, Secure over TLS."""
    parts = [f"{name}={value}", f"Path={PREFIX}", "HttpOnly", "SameSite=Strict"]
    if max_age_s is not None:
        parts.append(f"Max-Age={max_age_s}")
    if scope.get("scheme") == "https":
        parts.append("Secure")
    return "; ".join(parts)


def encode_token(token: str) -> str:
    """A token as a cookie value: base64url (a token may hold `;`, `,` or `"`)."""
    return base64.urlsafe_b64encode(token.encode("ascii")).decode("ascii").rstrip("=")


def decode_token(value: str) -> str | None:
    try:
        raw = base64.b64decode(value + "=" * (-len(value) % 4), altchars=b"-_", validate=True)
        return raw.decode("ascii")
    except (ValueError, UnicodeDecodeError):
        return None


def wants_html(scope: Scope) -> bool:
    return "text/html" in (_header(scope, b"accept") or "")


def safe_next(path: str | None) -> str:
    """Where to go after the login: a console path of this site, nothing else."""
    if not path or not path.startswith(PREFIX) or path.startswith("//") or "\\" in path:
        return PREFIX
    return path


class ConsoleGate:
    """The middleware of the module docstring (outermost: before the service's auth)."""

    def __init__(self, app: ASGIApp, auth: MetadataAuth) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path != PREFIX and not path.startswith(PREFIX + "/"):
            await self.app(scope, receive, send)
            return
        if not self.auth.enabled:
            await self._open(scope, receive, send)
            return
        public = path in (LOGIN_PATH, LOGOUT_PATH) or path.startswith(STATIC_PREFIX)
        if public or _header(scope, b"authorization") is not None:
            await self.app(scope, receive, send)
            return
        cookie = cookies_of(scope).get(TOKEN_COOKIE)
        token = decode_token(cookie) if cookie else None
        tokens = self.auth.tokens
        if token and tokens is not None and tokens.caller_for(token) is not None:
            scope["headers"] = [*scope.get("headers", ()), (b"authorization", f"Bearer {token}".encode())]
        elif wants_html(scope):
            await _to_login(scope, send, clear=bool(cookie))
            return
        await self.app(scope, receive, send)

    async def _open(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Authentication off: a session cookie (made here on the first visit) keys CSRF."""
        session = cookies_of(scope).get(SESSION_COOKIE)
        if session and _SESSION_FORMAT.fullmatch(session):
            scope[SCOPE_SESSION] = session
            await self.app(scope, receive, send)
            return
        session = secrets.token_urlsafe(32)
        scope[SCOPE_SESSION] = session
        set_cookie = cookie_header(scope, SESSION_COOKIE, session).encode("latin-1")

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), (b"set-cookie", set_cookie)]
            await send(message)

        await self.app(scope, receive, send_with_cookie)


async def _to_login(scope: Scope, send: Send, *, clear: bool) -> None:
    target = scope.get("path", PREFIX)
    query = scope.get("query_string", b"").decode("latin-1")
    if query:
        target += "?" + query
    headers = [(b"location", f"{LOGIN_PATH}?next={quote(safe_next(target), safe='')}".encode("latin-1"))]
    if clear:
        headers.append((b"set-cookie", cookie_header(scope, TOKEN_COOKIE, "", max_age_s=0).encode("latin-1")))
    headers.append((b"content-length", b"0"))
    await send({"type": "http.response.start", "status": 303, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


def session_secret(request: Request) -> str:
    """The caller's secret that keys CSRF: its bearer token, else the session cookie."""
    header = request.headers.get("authorization")
    if header:
        return header.partition(" ")[2].strip()
    return str(request.scope.get(SCOPE_SESSION) or "")


def csrf_token(request: Request) -> str:
    secret = session_secret(request)
    if not secret:
        return ""
    key = hashlib.sha256(secret.encode("utf-8", "surrogateescape")).digest()
    return hmac.new(key, _CSRF_LABEL, hashlib.sha256).hexdigest()


def check_csrf(request: Request, presented: str | None) -> bool:
    expected = csrf_token(request)
    return bool(expected) and presented is not None and hmac.compare_digest(expected, presented)


def caller_roles(request: Request, auth: MetadataAuth) -> frozenset[str]:
    """The roles of the caller ({'admin'} with authentication off: the playground)."""
    if not auth.enabled:
        return frozenset({"admin"})
    caller = request.scope.get(SCOPE_CALLER)
    return frozenset(getattr(caller, "roles", frozenset()))
