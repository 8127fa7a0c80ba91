"""SaslAuthenticate (api key 36), v0-v2: one SASL token of the mechanism chosen with
SaslHandshake (agent.sasl).

Answers the server's token; once the mechanism completes, the connection is
authenticated and its principal set (`User:<name>`). Wrong credentials, a malformed token
or a SaslAuthenticate without a handshake answer SASL_AUTHENTICATION_FAILED (ILLEGAL_SASL_STATE
for the last) with a message, then the connection is closed. Metadata out of reach while
reading the user's credentials closes the connection without an answer: clients reconnect
and try again, where an authentication error would be final for them.
session_lifetime (v1+) is `connections_max_reauth_ms` (KIP-368; 0: sessions never end). A
re-authentication must name the principal the connection already has.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
from kio.static.primitive import i64Timedelta
from skiff.agent.context import AgentContext
from skiff.agent.handlers import HandlerSpec, Request
from skiff.agent.handlers._access import PRE_AUTH
from skiff.agent.network.sasl import SASL_AUTHENTICATE_KEY, AuthFailed, SaslState
from skiff.metadata.errors import MetadataError, MetadataUnavailable

log = logging.getLogger(__name__)


async def handle(ctx: AgentContext, request: Request) -> Any:
    sasl: SaslState | None = request.connection.sasl
    peer = request.connection.peer
    if sasl is None or sasl.mechanism is None or (sasl.authenticated and not sasl.reauthenticating):
        if sasl is not None:
            sasl.close_requested = True
        return _failed(
            ErrorCode.illegal_sasl_state, "SaslAuthenticate is not expected now (no SaslHandshake)"
        )
    try:
        token, principal = await sasl.authenticate(request.body.auth_bytes)
    except AuthFailed as e:
        sasl.close_requested = True
        log.info("SASL %s authentication from %s failed: %s", sasl.mechanism, peer, e)
        return _failed(ErrorCode.sasl_authentication_failed, str(e))
    except MetadataUnavailable as e:
        log.warning("SASL authentication from %s: cannot read credentials from metadata: %s", peer, e)
        sasl.close_requested = True
        return None  # closed without an answer: the client retries on a new connection
    except MetadataError as e:  # metadata answered, but not with credentials: no login
        sasl.close_requested = True
        log.info("SASL %s authentication from %s refused by metadata: %s", sasl.mechanism, peer, e.message)
        return _failed(ErrorCode.sasl_authentication_failed, "Authentication failed: invalid credentials")
    lifetime_ms = 0
    if principal is not None:
        if sasl.reauthenticating and principal != request.connection.principal:
            sasl.close_requested = True
            return _failed(
                ErrorCode.sasl_authentication_failed, "Cannot change principals during re-authentication"
            )
        request.connection.principal = principal
        log.debug("connection %s authenticated as %s (%s)", peer, principal, sasl.mechanism)
        lifetime_ms = sasl.session_done()
    return SaslAuthenticateResponse(
        error_code=ErrorCode.none,
        error_message=None,
        auth_bytes=token,
        session_lifetime=i64Timedelta.parse(datetime.timedelta(milliseconds=lifetime_ms)),
    )


def _failed(code: ErrorCode, message: str) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(error_code=code, error_message=message, auth_bytes=b"")


ACCESS = PRE_AUTH

SPEC = HandlerSpec(SASL_AUTHENTICATE_KEY, 0, 2, handle, access=ACCESS)
