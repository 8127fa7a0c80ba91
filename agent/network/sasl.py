"""SASL on SASL_PLAINTEXT/SASL_SSL listeners: the per-connection state machine and the
credential cache.

Exchange (Kafka's, with SaslHandshake v1): the client sends ApiVersions (optional), then
SaslHandshake(mechanism), then one SaslAuthenticate per SASL token until the mechanism is
done. Until then only ApiVersions, SaslHandshake and SaslAuthenticate are served: any
other request closes the connection (`SaslState.allows`), as Kafka's broker does. A failed
authentication answers SASL_AUTHENTICATION_FAILED with a message and closes the connection
`FAILED_AUTH_CLOSE_DELAY_S` later.

Mechanisms:

- PLAIN (RFC 4616): one token `[authzid] NUL user NUL password`; an authzid other than
  the user is refused, as in Kafka. The password is checked against the user's stored
  SCRAM-SHA-256 credential, else its SCRAM-SHA-512 one (`metadata.security.scram_types.
  password_matches`: PBKDF2 with the stored salt and iterations, off the event loop);
  Skiff stores no plaintext passwords.
- SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802): two tokens, client-first (parsed, and
  answered with server-first, by the `scramp` library) and client-final (the proof checked
  by `metadata.security.scram_types.verify_client_final`, which, like Kafka, accepts librdkafka's
  nonce that only ends with the server's), answered with server-final. Channel binding is
  not offered (Kafka does not either).

Credentials come from metadata (`AgentClient.scram_credentials`) through
`CredentialCache`: each user's list is reused for `scram_credential_cache_ms`, so a
changed or deleted password takes effect for new logins within that bound; the cache
holds at most `MAX_CACHED_USERS` users (unknown names included, so a client trying
random names costs one metadata read per name and TTL, in bounded memory).

When metadata cannot be reached, the connection is closed without an answer (clients
reconnect and retry) rather than failing the login (which clients treat as fatal).
Each listener counts its exchanges by mechanism in one `SaslCounts` shared by its
connections' `SaslState`s (exported as `skiff_successful_authentication_total` and
`skiff_failed_authentication_total`, Kafka's successful-/failed-authentication-total): a
login or re-authentication completed, or refused (wrong credentials, an unknown user, a
malformed token, metadata refusing the read). Metadata out of reach counts as neither.
KIP-368 re-authentication: with `connections_max_reauth_ms` > 0 (Kafka's
connections.max.reauth.ms) SaslAuthenticate answers that session lifetime; the client must
re-authenticate on the connection (same principal) before it ends, else its next request
closes the connection. 0 (the default): sessions never end, re-authentication is refused.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scramp import ScramException, ScramMechanism
from skiff.metadata.errors import MetadataError, MetadataUnavailable
from skiff.metadata.security.scram_types import (
    MAX_USER_NAME_CHARS,
    MECHANISM_CODES,
    ScramCredential,
    ScramProofError,
    password_matches,
    verify_client_final,
)
from skiff.metadata.wire.operations import AgentClient

log = logging.getLogger(__name__)

PLAIN = "PLAIN"
SUPPORTED_MECHANISMS = (PLAIN, *MECHANISM_CODES)

API_VERSIONS_KEY = 18
SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
PRE_AUTH_KEYS = frozenset({API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY})

# Largest request read from a client that has not authenticated yet (Kafka's
# sasl.server.max.receive.size): an unauthenticated client cannot make the agent hold more.
PRE_AUTH_MAX_REQUEST_BYTES = 512 * 1024
# A refused login is answered, and the connection closed this long after (Kafka's
# connection.failed.authentication.delay.ms is 100 ms): the client reads the error first.
FAILED_AUTH_CLOSE_DELAY_S = 0.1
MAX_CACHED_USERS = 10_000
MAX_TOKEN_BYTES = 64 * 1024  # far above any PLAIN or SCRAM message


def parse_mechanisms(text: str) -> tuple[str, ...]:
    """`PLAIN,SCRAM-SHA-512` -> the mechanisms (ValueError on unknown or none)."""
    mechs = tuple(m.strip().upper() for m in text.split(",") if m.strip())
    if not mechs:
        raise ValueError("sasl_enabled_mechanisms must name at least one mechanism")
    for m in mechs:
        if m not in SUPPORTED_MECHANISMS:
            raise ValueError(
                f"sasl_enabled_mechanisms: unsupported mechanism {m!r} (one of {', '.join(SUPPORTED_MECHANISMS)})"
            )
    return mechs


class CredentialCache:
    """user -> their SCRAM credentials by mechanism, read from metadata, reused for `ttl_ms`."""

    def __init__(
        self,
        metadata: AgentClient,
        ttl_ms: int,
        monotonic: Callable[[], float],
        max_users: int = MAX_CACHED_USERS,
    ) -> None:
        self._metadata = metadata
        self._ttl_s = ttl_ms / 1000.0
        self._monotonic = monotonic
        self._max_users = max_users
        self._entries: OrderedDict[str, tuple[float, dict[str, ScramCredential]]] = OrderedDict()
        self.reads = 0  # metadata reads, for tests and metrics

    async def get(self, user: str) -> dict[str, ScramCredential]:
        """Raises MetadataUnavailable when metadata cannot answer. A name metadata could not
        hold (empty, too long) has no credentials, without asking."""
        if not 0 < len(user) <= MAX_USER_NAME_CHARS:
            return {}
        now = self._monotonic()
        hit = self._entries.get(user)
        if hit is not None and now - hit[0] < self._ttl_s:
            return hit[1]
        self.reads += 1
        creds = {c.mechanism: c for c in await self._metadata.scram_credentials(user)}
        self._entries[user] = (now, creds)
        self._entries.move_to_end(user)
        while len(self._entries) > self._max_users:
            self._entries.popitem(last=False)
        return creds


class AuthFailed(Exception):
    """The client's credentials are wrong: SASL_AUTHENTICATION_FAILED with this message."""


@dataclass
class SaslCounts:
    """One listener's SASL exchanges by mechanism: completed and refused (for metrics). The
    keys are mechanisms a handshake accepted, so there are at most SUPPORTED_MECHANISMS."""

    succeeded: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)


@dataclass
class SaslState:
    """One connection's SASL progress (ConnectionInfo.sasl on SASL listeners)."""

    enabled: tuple[str, ...]
    credentials: CredentialCache
    mechanism: str | None = None
    authenticated: bool = False
    close_requested: bool = False  # set on failure: the server closes after the response
    # KIP-368: with reauth_ms > 0 a session lasts that long; the client re-authenticates on
    # the same connection (SaslHandshake + SaslAuthenticate again, same principal) before
    # it ends, and a request other than those after it ends closes the connection.
    reauth_ms: int = 0
    monotonic: Callable[[], float] = time.monotonic
    expires_s: float | None = None  # monotonic time the session ends (None: never)
    reauthenticating: bool = False
    counts: SaslCounts | None = None  # the listener's, shared by its connections
    _scram: object | None = field(default=None, repr=False)
    _scram_step: int = 0
    _user: str = ""
    _cred: Any = field(default=None, repr=False)

    def allows(self, api_key: int) -> bool:
        if api_key in PRE_AUTH_KEYS:
            return True
        if not self.authenticated:
            return False
        return self.expires_s is None or self.monotonic() < self.expires_s

    def start(self, mechanism: str) -> bool:
        """SaslHandshake: begin an exchange (first, or re-authentication when enabled).
        False if no exchange may start now."""
        if self.authenticated and not self.reauth_ms:
            return False
        if not self.authenticated and self.mechanism is not None:
            return False
        self.reauthenticating = self.authenticated
        self.mechanism, self._scram, self._scram_step = mechanism, None, 0
        return True

    def session_done(self) -> int:
        """The exchange completed: the session lifetime in ms to report (0: unlimited)."""
        self.mechanism, self.reauthenticating = None, False
        if not self.reauth_ms:
            return 0
        self.expires_s = self.monotonic() + self.reauth_ms / 1000.0
        return self.reauth_ms

    async def authenticate(self, token: bytes) -> tuple[bytes, str | None]:
        """One SaslAuthenticate token -> (server token, principal once authenticated else
        None). Raises AuthFailed on wrong credentials or a malformed exchange. Counted in
        `counts`: a principal returned is a success, AuthFailed or MetadataError a failure."""
        mechanism = self.mechanism or "none"
        try:
            answer = await self._authenticate(token)
        except (AuthFailed, MetadataError):
            if self.counts is not None:
                self.counts.failed[mechanism] += 1
            raise
        if answer[1] is not None and self.counts is not None:
            self.counts.succeeded[mechanism] += 1
        return answer

    async def _authenticate(self, token: bytes) -> tuple[bytes, str | None]:
        if self.mechanism is None or (self.authenticated and not self.reauthenticating):
            raise AuthFailed("SaslAuthenticate without a SaslHandshake")
        if len(token) > MAX_TOKEN_BYTES:
            raise AuthFailed("SASL token too large")
        if self.mechanism == PLAIN:
            return b"", await self._plain(token)
        return await self._scram_token(token)

    async def _plain(self, token: bytes) -> str:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise AuthFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise AuthFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        if not user:
            raise AuthFailed("Authentication failed: username not specified")
        if authzid and authzid != user:
            raise AuthFailed(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        creds = await self.credentials.get(user)
        # One credential is checked (SCRAM-SHA-256 if the user has one: the cheaper PBKDF2),
        # so a wrong password costs one derivation, not one per mechanism.
        cred = creds.get("SCRAM-SHA-256") or creds.get("SCRAM-SHA-512")
        if cred is not None and await asyncio.to_thread(password_matches, cred, password):
            self.authenticated = True
            return f"User:{user}"
        raise AuthFailed("Authentication failed: Invalid username or password")

    async def _scram_token(self, token: bytes) -> tuple[bytes, str | None]:
        mech = self.mechanism
        assert mech is not None
        failed = f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mech}"
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthFailed(f"Invalid {mech} message: not UTF-8") from None
        try:
            if self._scram_step == 0:
                user = _scram_user(text)
                cred = (await self.credentials.get(user)).get(mech)
                server = ScramMechanism(mech).make_server(
                    lambda _u: _auth_info(cred, failed)  # raises AuthFailed for an unknown user
                )
                server.set_client_first(text)
                assert cred is not None  # else auth_fn raised
                self._scram, self._scram_step, self._cred = server, 1, cred
                self._user = user
                return server.get_server_first().encode("utf-8"), None
            if self._scram_step == 1:
                # The proof is checked here, not by scramp: librdkafka's client-final nonce
                # only *ends with* the server's, which Kafka accepts and scramp does not.
                state: Any = self._scram
                final = verify_client_final(self._cred, state.client_first_bare, state.server_first, text)
                self._scram_step = 2
                self.authenticated = True
                return final.encode("utf-8"), f"User:{self._user}"
        except AuthFailed:
            raise
        except (ScramException, ScramProofError) as e:
            log.debug("SCRAM exchange failed: %s", e)
            raise AuthFailed(failed) from None
        except (MetadataError, MetadataUnavailable):
            raise
        except Exception as e:  # boundary: untrusted bytes: a hostile message must not become a server error
            log.debug("SCRAM exchange failed on a malformed message: %r", e)
            raise AuthFailed(failed) from None
        raise AuthFailed(f"Unexpected {mech} message")


def _auth_info(cred: ScramCredential | None, failed: str) -> tuple[bytes, bytes, bytes, int]:
    if cred is None:
        raise AuthFailed(failed)
    return cred.salt, cred.stored_key, cred.server_key, cred.iterations


def _scram_user(client_first: str) -> str:
    """The user name of a SCRAM client-first message (`n,,n=user,r=nonce`), unescaped
    (RFC 5802: `=2C` is `,` and `=3D` is `=`)."""
    parts = client_first.split(",")
    if len(parts) < 4 or not parts[2].startswith("n="):
        raise AuthFailed("Invalid SCRAM client-first message")
    return parts[2][2:].replace("=2C", ",").replace("=3D", "=")
