"""Call an agent's request handler on a kio request, without a socket.

`await call_handler(ctx, body)` does what the agent's connection does with a decoded request
(agent.connection `_run_handler`), minus the bytes: it builds the `Request` (header from
the body's API key and version, a `ConnectionInfo` for an anonymous PLAINTEXT client unless
one is given), applies the declared cluster gate (`refusal_response`), awaits the
registered handler with the agent's `AgentContext`, turns an escaping exception into the
error response the agent would send (or raises `ConnectionWouldClose` where the agent
closes the connection), and converts the answer to the request's version. It returns the
response entity (None for a request answered with nothing, e.g. Produce with acks=0).

What it leaves out, so tests of these stay on sockets: framing and decoding, per-connection
ordering and concurrency limits, SASL and TLS, and the encoding of the answer.

From a test thread, with the agent's loop in another thread (tests/component's
`AgentHarness`): `h.call(call_handler(h.agent.ctx, body))`.
"""

from __future__ import annotations

import functools
import itertools
from typing import TYPE_CHECKING, Any

from skiff.agent.handlers import (
    ConnectionInfo,
    HandlerRegistry,
    Request,
    default_registry,
    error_of,
    refusal_response,
)
from skiff.agent.protocol import RequestHeader, convert, error_response, response_schema

if TYPE_CHECKING:
    from skiff.agent.context import AgentContext

_connection_ids = itertools.count(1)


class ConnectionWouldClose(Exception):
    """The agent would close the connection instead of answering (a handler failed on an
    API whose response has no top-level error code)."""


@functools.cache
def _default_registry() -> HandlerRegistry:
    return default_registry()


def connection(peer: str = "127.0.0.1:40000", **state: Any) -> ConnectionInfo:
    """A client connection's state as a handler sees it (principal, listener, ...)."""
    return ConnectionInfo(next(_connection_ids), peer, **state)


async def call_handler(
    ctx: AgentContext,
    body: Any,
    *,
    registry: HandlerRegistry | None = None,
    conn: ConnectionInfo | None = None,
    correlation_id: int = 1,
    client_id: str | None = "handler-test",
) -> Any:
    """The response the agent with `ctx` gives to the kio request `body` (see the module)."""
    registry = registry or _default_registry()
    key, version = int(body.__api_key__), int(body.__version__)
    spec = registry.get(key)
    assert spec is not None, f"no handler registered for api key {key}"
    assert spec.supports(version), f"{spec.name} v{version} is not served"
    header = RequestHeader(key, version, correlation_id, client_id, header_version=2)
    request = Request(header, body, conn or connection(), registry)
    try:
        result = refusal_response(ctx, spec, request)
        if result is None:
            result = await spec.handler(ctx, request)
    except Exception as e:
        result = error_response(key, version, error_of(e)[0])
        if result is None:
            raise ConnectionWouldClose(f"{spec.name} v{version}: {e!r}") from e
    if result is None:
        return None
    assert getattr(result, "__api_key__", None) == key, f"{spec.name} answered {type(result).__name__}"
    target = response_schema(key, version)
    assert target is not None
    return convert(result, target)
