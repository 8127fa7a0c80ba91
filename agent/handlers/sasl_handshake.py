"""SaslHandshake (api key 17), v1: the client picks a SASL mechanism (agent.sasl).

On a SASL listener (SASL_PLAINTEXT, SASL_SSL) before authentication: NONE and the enabled
mechanisms if the mechanism is one of them, else UNSUPPORTED_SASL_MECHANISM with the list
(and the connection is closed after the answer, as Kafka does). Anywhere else (a
PLAINTEXT or SSL listener, or a connection already authenticated: re-authentication is not
offered) ILLEGAL_SASL_STATE.

v0 (tokens sent raw after the handshake, without SaslAuthenticate) is not served: every
client that knows SaslAuthenticate (Kafka 1.0+, librdkafka, kafka-python, the Java client)
sends v1 when the agent advertises it.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse

from agent.context import AgentContext
from agent.handlers import HandlerSpec, Request
from agent.sasl import SASL_HANDSHAKE_KEY, SaslState


async def handle(ctx: AgentContext, request: Request) -> Any:
    sasl: SaslState | None = request.connection.sasl
    mechanism = request.body.mechanism
    if sasl is None or sasl.authenticated or sasl.mechanism is not None:
        return SaslHandshakeResponse(error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    if mechanism not in sasl.enabled:
        sasl.close_requested = True
        return SaslHandshakeResponse(error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=sasl.enabled)
    sasl.mechanism = mechanism
    return SaslHandshakeResponse(error_code=ErrorCode.none, mechanisms=sasl.enabled)


SPEC = HandlerSpec(SASL_HANDSHAKE_KEY, 1, 1, handle)
