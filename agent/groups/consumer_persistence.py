"""A consumer-protocol group (KIP-848, `agent.groups.consumer_model`) as JSON in the group's
lease row (`group_leases.group_state`, the column classic groups are stored in: see
`agent.groups.persistence`), and back.

The state is the whole group: what Kafka writes to `__consumer_offsets` as its
ConsumerGroupMetadata, ConsumerGroupMemberMetadata, ConsumerGroupTargetAssignment* and
ConsumerGroupCurrentMemberAssignment records, in one document:

    {"type": "consumer", "epoch": int, "assignment_epoch": int, "assignor": str,
     "topics": {name: [topic id, partitions]}, "regex": {pattern: [names]},
     "members": [{"id", "instance", "rack", "client_id", "client_host", "rebalance_ms",
                  "names": [str], "regex": str|null, "allowed": [str]|null, "assignor": str|null,
                  "epoch", "previous", "state", "assigned": {topic id: [p]},
                  "revoking": {topic id: [p]}, "target": {topic id: [p]},
                  "since": [[topic id, p, member epoch it was assigned at]],
                  "classic": null | {"session_ms": int, "protocols": [[name, base64]]}}]}

`classic`: a classic-protocol member of a mixed group (`agent.groups.mixed`), with what it
sent in its last JoinGroup, so a next coordinator answers its SyncGroup and Heartbeat as
this one and can convert the group back to a classic one.

`type` tells it from a classic group's state. Loading rebuilds the partition owners from
the members' assigned and pending-revocation partitions, so what one coordinator promised
(who holds what, who must revoke what) binds the next one. Session and revocation timers
are not stored: they restart when a coordinator loads the group, as Kafka's do.
"""

from __future__ import annotations

import base64
import json
import logging
import uuid
from typing import Any

from skiff.agent.groups.assignors import Assignment
from skiff.agent.groups.consumer_model import (
    CONSUMER_GROUP_TYPE,
    ClassicMeta,
    ConsumerGroup,
    ConsumerMember,
    DoubleOwnership,
    MemberState,
)

log = logging.getLogger(__name__)


def _parts(a: Assignment) -> dict[str, list[int]]:
    return {str(t): sorted(ps) for t, ps in sorted(a.items(), key=lambda kv: str(kv[0])) if ps}


def _unparts(d: dict[str, list[int]]) -> Assignment:
    return {uuid.UUID(t): frozenset(int(p) for p in ps) for t, ps in d.items() if ps}


def encode_consumer_group(group: ConsumerGroup) -> str:
    return json.dumps(
        {
            "type": CONSUMER_GROUP_TYPE,
            "epoch": group.group_epoch,
            "assignment_epoch": group.assignment_epoch,
            "assignor": group.assignor,
            "topics": {n: [str(tid), count] for n, (tid, count) in sorted(group.topics.items())},
            "regex": {p: sorted(ns) for p, ns in sorted(group.regex_topics.items())},
            "members": [_member(group, m) for m in group.members.values()],
        },
        separators=(",", ":"),
    )


def _member(group: ConsumerGroup, m: ConsumerMember) -> dict[str, Any]:
    return {
        "id": m.member_id,
        "instance": m.instance_id,
        "rack": m.rack_id,
        "client_id": m.client_id,
        "client_host": m.client_host,
        "rebalance_ms": m.rebalance_timeout_ms,
        "names": list(m.subscribed_topic_names),
        "regex": m.subscribed_topic_regex,
        "allowed": None if m.regex_allowed is None else sorted(m.regex_allowed),
        "assignor": m.server_assignor,
        "epoch": m.member_epoch,
        "previous": m.previous_member_epoch,
        "state": m.state.value,
        "assigned": _parts(m.assigned),
        "revoking": _parts(m.pending_revocation),
        "since": [
            [str(t), p, e]
            for (t, p), e in sorted(m.assigned_at.items(), key=lambda kv: (str(kv[0][0]), kv[0][1]))
        ],
        "target": _parts(group.target.get(m.member_id, {})),
        "classic": None
        if m.classic is None
        else {
            "session_ms": m.classic.session_timeout_ms,
            "protocols": [
                [name, base64.b64encode(data).decode("ascii")] for name, data in m.classic.protocols
            ],
        },
    }


def _classic(d: dict[str, Any] | None) -> ClassicMeta | None:
    if d is None:
        return None
    protocols = tuple((str(n), base64.b64decode(data, validate=True)) for n, data in d["protocols"])
    return ClassicMeta(int(d["session_ms"]), protocols)


def is_consumer_state(text: str | None) -> bool:
    """Whether a stored group state is a consumer-protocol group's (else a classic one's)."""
    if not text:
        return False
    try:
        d = json.loads(text)
    except ValueError:
        return False
    return isinstance(d, dict) and d.get("type") == CONSUMER_GROUP_TYPE


def decode_consumer_group(group_id: str, text: str) -> ConsumerGroup | None:
    """The stored group, or None if it does not parse (logged: the group starts afresh)."""
    try:
        d: dict[str, Any] = json.loads(text)
        group = ConsumerGroup(
            group_id,
            group_epoch=int(d["epoch"]),
            assignment_epoch=int(d["assignment_epoch"]),
            assignor=str(d.get("assignor") or "uniform"),
            topics={str(n): (uuid.UUID(v[0]), int(v[1])) for n, v in d.get("topics", {}).items()},
            regex_topics={str(p): frozenset(map(str, ns)) for p, ns in d.get("regex", {}).items()},
        )
        for md in d["members"]:
            _load_member(group, md)
    except (ValueError, KeyError, TypeError, IndexError, DoubleOwnership) as e:
        log.warning("group %s: ignoring a stored consumer group that does not load (%s)", group_id, e)
        return None
    group.stored_version = group.version
    return group


def _allowed(md: dict[str, Any]) -> frozenset[str] | None:
    """A member's `regex_allowed`. Absent (stored before the field existed): none, so a regex
    member is assigned nothing it was not re-checked for, until its next heartbeat."""
    allowed = md.get("allowed", [])
    return None if allowed is None else frozenset(str(n) for n in allowed)


def _load_member(group: ConsumerGroup, md: dict[str, Any]) -> None:
    m = ConsumerMember(
        str(md["id"]),
        instance_id=md.get("instance"),
        rack_id=md.get("rack"),
        client_id=str(md.get("client_id", "")),
        client_host=str(md.get("client_host", "")),
        rebalance_timeout_ms=int(md["rebalance_ms"]),
        subscribed_topic_names=tuple(str(n) for n in md.get("names", [])),
        subscribed_topic_regex=md.get("regex"),
        regex_allowed=_allowed(md),
        server_assignor=md.get("assignor"),
        member_epoch=int(md["epoch"]),
        previous_member_epoch=int(md.get("previous", -1)),
        state=MemberState(md["state"]),
        classic=_classic(md.get("classic")),
    )
    group.members[m.member_id] = m
    if m.instance_id is not None:
        group.static[m.instance_id] = m.member_id
    group.target[m.member_id] = _unparts(md.get("target", {}))
    m.assigned_at = {(uuid.UUID(t), int(p)): int(e) for t, p, e in md.get("since", [])}
    group.set_partitions(m, _unparts(md.get("assigned", {})), _unparts(md.get("revoking", {})))
