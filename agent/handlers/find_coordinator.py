"""FindCoordinator (api key 10), v0-v6: which agent coordinates a consumer group or a
transactional id.

v0-v3 ask for one key, v4+ for a batch (`coordinator_keys`), answered one entry each.
Key type 0 is a group; a principal without DESCRIBE on it gets GROUP_AUTHORIZATION_FAILED
(Kafka's ACLs). Key type 1 is a transactional id (DESCRIBE on it, else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED). Any other key type gets INVALID_REQUEST, as Kafka
answers an unknown one. Only ready agents coordinate (agent.health); with none ready the
answer is COORDINATOR_NOT_AVAILABLE, which clients retry.

Zones (agent.zones; the client's zone is its connection's): a group's coordinator is the
agent holding its coordinator lease, whatever its zone (members of one group in several
zones all reach it), else the rendezvous choice among the ready agents of the client's zone
(agent.groups.placement; the group requests' own check applies the same rule). A
transactional id's is the rendezvous owner of `b"txn:" + id` among the ready agents of the
client's zone (`agent.transactions.coordinator.TxnCoordinator.coordinator_for`): its state is
in metadata, so no agent holds it. Either falls back to all ready agents when the zone has
none or the client states none. Answers are counted by zone
(`skiff_find_coordinator_answers_total`).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v6.response import Coordinator
from kio.static.primitive import i32
from skiff.agent.context import AgentContext
from skiff.agent.handlers import NO_THROTTLE, HandlerSpec, Op, Request, Resource, authorized
from skiff.agent.handlers._access import GROUP_DENIED, RT, TXN_ID_DENIED, item, on, requires
from skiff.agent.protocol import response_schema

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 6

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1


def _failed(key: str, code: ErrorCode, message: str) -> Coordinator:
    return Coordinator(
        key=key,
        node_id=i32(-1),  # type: ignore[arg-type]
        host="",
        port=i32(-1),
        error_code=code,
        error_message=message,
    )


async def _find(ctx: AgentContext, request: Request, key: str, key_type: int) -> Coordinator:
    zone = request.connection.zone.zone
    placement = ctx.parts.groups.placement
    if key_type == TRANSACTION_KEY_TYPE:
        if not key:
            return _failed(key, ErrorCode.invalid_request, "empty transactional id")
        if not authorized(ctx, request, Op.DESCRIBE, Resource.TRANSACTIONAL_ID, key):
            return _failed(
                key, ErrorCode.transactional_id_authorization_failed, "Transactional Id authorization failed."
            )
        b = ctx.parts.transactions.coordinator_for(key, zone)
    elif key_type != GROUP_KEY_TYPE:
        return _failed(key, ErrorCode.invalid_request, f"Unknown coordinator type {key_type}")
    elif not authorized(ctx, request, Op.DESCRIBE, Resource.GROUP, key):
        return _failed(key, ErrorCode.group_authorization_failed, "Group authorization failed.")
    elif not key:
        return _failed(key, ErrorCode.invalid_group_id, "empty group id")
    elif placement is None:  # an agent without fencing (unit tests): hashed
        b = ctx.agents.coordinator_for_group(key, zone)
    else:
        b = await placement.choose(key, zone)
    if b is None:  # no agent is ready (agent.agent_registry): retriable
        return _failed(key, ErrorCode.coordinator_not_available, "no agent is ready to coordinate")
    if placement is not None:
        placement.count_answer(zone, b)
    host, port = b.address(request.connection.listener)  # on the listener the client connected through
    return Coordinator(
        key=key,
        node_id=i32(b.node_id),  # type: ignore[arg-type]
        host=host,
        port=i32(port),
        error_code=ErrorCode.none,
        error_message=None,
    )


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = request.body
    cls = response_schema(API_KEY, request.api_version)
    assert cls is not None
    if request.api_version >= 4:
        found = tuple([await _find(ctx, request, k, int(body.key_type)) for k in body.coordinator_keys])
        return cls(throttle_time=NO_THROTTLE, coordinators=found)
    c = await _find(ctx, request, body.key, int(getattr(body, "key_type", GROUP_KEY_TYPE)))
    kwargs: dict[str, Any] = {
        "error_code": c.error_code,
        "node_id": c.node_id,
        "host": c.host,
        "port": c.port,
    }
    if request.api_version >= 1:
        kwargs["throttle_time"] = NO_THROTTLE
        kwargs["error_message"] = c.error_message
    return cls(**kwargs)


ACCESS = requires(
    item(on(RT.GROUP, Op.DESCRIBE), GROUP_DENIED, when="group coordinators"),
    item(on(RT.TRANSACTIONAL_ID, Op.DESCRIBE), TXN_ID_DENIED, when="transaction coordinators"),
)

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
