"""SaslHandshake (api key 17), v1: the client picks a SASL mechanism (agent.sasl).

On a SASL listener (SASL_PLAINTEXT, SASL_SSL) before authentication: NONE and the enabled
mechanisms if the mechanism is one of them, else UNSUPPORTED_SASL_MECHANISM with the list
(and the connection is closed after the answer, as Kafka does). Anywhere else (a
PLAINTEXT or SSL listener, or a connection already authenticated when re-authentication
(KIP-368, `connections_max_reauth_ms`) is off) ILLEGAL_SASL_STATE.

v0 is answered like v1, but the tokens that follow must come in SaslAuthenticate requests:
the raw-token exchange of pre-1.0 clients (v0 without SaslAuthenticate) is not served (such
a token does not parse as a request and closes the connection). v0 is advertised because
librdkafka (kcat, confluent-kafka) will not do SASL with a broker that lacks it; it then
uses v1 and SaslAuthenticate, as do kafka-python and the Java client.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse
from skiff.agent.context import AgentContext
from skiff.agent.handlers import HandlerSpec, Request
from skiff.agent.handlers._access import PRE_AUTH
from skiff.agent.network.sasl import SASL_HANDSHAKE_KEY, SaslState


async def handle(ctx: AgentContext, request: Request) -> Any:
    sasl: SaslState | None = request.connection.sasl
    mechanism = request.body.mechanism
    if (
        sasl is None
        or (sasl.authenticated and not sasl.reauth_ms)
        or (not sasl.authenticated and sasl.mechanism)
    ):
        return SaslHandshakeResponse(error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    if mechanism not in sasl.enabled:
        sasl.close_requested = True
        return SaslHandshakeResponse(error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=sasl.enabled)
    if not sasl.start(mechanism):
        return SaslHandshakeResponse(error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    return SaslHandshakeResponse(error_code=ErrorCode.none, mechanisms=sasl.enabled)


ACCESS = PRE_AUTH

SPEC = HandlerSpec(SASL_HANDSHAKE_KEY, 0, 1, handle, access=ACCESS)
