"""Mixed groups: classic-protocol members inside a consumer-protocol (KIP-848) group, and the
online upgrade and downgrade between the two protocols, as Kafka 4 does with
`group.consumer.migration.policy=bidirectional` (GroupMetadataManager's
classicGroup*ToConsumerGroup, ConsumerGroup.fromClassicGroup, ClassicGroup.fromConsumerGroup).

Upgrade (`to_consumer_group`): the first ConsumerGroupHeartbeat (epoch 0) for a classic group
that has members converts it, when the group is Stable and its protocol type is "consumer"
(else COORDINATOR_NOT_AVAILABLE, retriable: the member retries once the rebalance is over).
Each classic member becomes a `ConsumerMember` with `classic` metadata (session timeout,
JoinGroup protocols), its subscription read from its protocol metadata, member epoch =
the generation, its assignment the one the leader gave it, which is also its target; the
group epoch and the target epoch are the generation. The joining member then bumps the
group epoch and the server-side assignor assigns every member.

Classic members of a consumer group (`ClassicMembers`) keep speaking the classic protocol:

- JoinGroup: its subscription (topics, owned partitions) updates the member, a change bumps
  the group epoch, the target is recomputed, and the member is reconciled with the owned
  partitions it reports (`consumer_model.reconcile`: partitions it must give up stay its
  own, pending revocation, until a later join no longer reports them; an eager client has
  revoked everything before joining). The answer comes at once, after the group is stored:
  generation = its member epoch, protocol type "consumer", its first protocol, no leader
  (every classic member is a follower: the assignment is the server's).
- SyncGroup: its assigned partitions (without those pending revocation) in the embedded
  protocol (`agent.groups.embedded_protocol`), in its subscription's version.
  ILLEGAL_GENERATION for another generation than its member epoch; REBALANCE_IN_PROGRESS
  if the group epoch moved past it (it must rejoin first).
- Heartbeat: its session restarts; REBALANCE_IN_PROGRESS when it must rejoin: the group
  epoch is past its member epoch, it has partitions to revoke, or every partition it waits
  for has been released by its previous owner.
- LeaveGroup: the member is removed (its partitions are free at once).
- OffsetCommit / OffsetFetch: the generation must be its member epoch (ILLEGAL_GENERATION),
  Kafka's rule; any OffsetCommit version.

So a partition moves from a classic member to another member only once the classic member
rejoined without it, and from a consumer member only once its heartbeat reported it
revoked: never owned twice. A classic member that does not rejoin within its rebalance
timeout after being asked to revoke is removed, like a consumer member (Kafka's join timer).

Downgrade (`to_classic_group`): when the last consumer-protocol member leaves or expires and
classic members remain, the group becomes a classic group again at generation = the largest
member epoch, Stable with the members' current assignments, and rebalances at once: members
at that generation are told REBALANCE_IN_PROGRESS, the others ILLEGAL_GENERATION; all rejoin
and the client-side leader assigns, as in any classic rebalance.

Persistence: classic members are stored with their classic metadata in the consumer group's
state (`agent.groups.consumer_persistence`), so a next coordinator serves them as this one.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode
from skiff.agent.groups.consumer_model import (
    ClassicMeta,
    ConsumerGroup,
    ConsumerMember,
    DoubleOwnership,
    MemberState,
    TopicView,
    apply,
    reconcile,
)
from skiff.agent.groups.embedded_protocol import decode_assignment, decode_subscription, encode_assignment
from skiff.agent.groups.model import (
    CONSUMER_PROTOCOL_TYPE,
    Group,
    GroupState,
    JoinResult,
    LeaveRequest,
    Member,
    SyncResult,
)

if TYPE_CHECKING:
    from skiff.agent.groups.consumer_protocol import ConsumerGroups

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ClassicJoin:
    """A JoinGroup, as a consumer group reads it."""

    member_id: str
    instance_id: str | None
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str = ""
    client_host: str = ""
    require_known_member_id: bool = True


def _by_id(group: ConsumerGroup, by_name: dict[str, frozenset[int]]) -> dict[uuid.UUID, frozenset[int]]:
    """Partitions named by topic, as the group's topic ids (topics it does not know dropped)."""
    out: dict[uuid.UUID, frozenset[int]] = {}
    for name, ps in by_name.items():
        topic = group.topics.get(name)
        if topic is not None and ps:
            out[topic[0]] = out.get(topic[0], frozenset()) | frozenset(p for p in ps if p < topic[1])
    return out


def _by_name(group: ConsumerGroup, by_id: dict[uuid.UUID, frozenset[int]]) -> dict[str, frozenset[int]]:
    names = group.topic_names()
    return {names[t]: ps for t, ps in by_id.items() if t in names and ps}


def _version(meta: ClassicMeta) -> int:
    sub = decode_subscription(meta.protocols[0][1]) if meta.protocols else None
    return sub.version if sub is not None else 0


def member_assignment(group: ConsumerGroup, member: ConsumerMember) -> bytes:
    """A classic member's assigned partitions (not those pending revocation), as SyncGroup bytes."""
    assert member.classic is not None
    return encode_assignment(_by_name(group, member.assigned), _version(member.classic))


# ---------------------------------------------------------------------- conversions


def classic_topics(classic: Group) -> set[str]:
    """The topics a classic group's members subscribe to or were assigned (to look up
    before converting it)."""
    names: set[str] = set()
    for m in classic.members.values():
        sub = decode_subscription(m.metadata_for(classic.protocol_name or ""))
        names |= set(sub.topics) if sub is not None else set()
        names |= set(decode_assignment(m.assignment) or {})
    return names


def upgrade_refusal(classic: Group, max_size: int) -> str | None:
    """Why this classic group cannot be converted now (None: it can)."""
    if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return f"its protocol type is {classic.protocol_type!r}, not 'consumer'"
    if classic.state != GroupState.STABLE:
        return f"it is {classic.state.value} (it converts once Stable)"
    if classic.pending:
        return "a member is joining"
    if len(classic.members) >= max_size:
        return f"it has {len(classic.members)} members"
    return None


def to_consumer_group(classic: Group, view: TopicView) -> ConsumerGroup | str:
    """The consumer group a Stable classic group becomes (see the module docstring); a
    reason if a member's metadata or assignment does not parse."""
    generation = classic.generation_id
    group = ConsumerGroup(classic.group_id, group_epoch=generation, assignment_epoch=generation)
    assignments: dict[str, dict[str, frozenset[int]]] = {}
    for m in classic.members.values():
        sub = decode_subscription(m.metadata_for(classic.protocol_name or ""))
        given = decode_assignment(m.assignment)
        if sub is None or given is None:
            return f"member {m.member_id}'s embedded consumer protocol does not parse"
        group.members[m.member_id] = ConsumerMember(
            m.member_id,
            instance_id=m.group_instance_id,
            rack_id=sub.rack_id,
            client_id=m.client_id,
            client_host=m.client_host,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            subscribed_topic_names=tuple(sorted(set(sub.topics))),
            member_epoch=generation,
            previous_member_epoch=generation,
            classic=ClassicMeta(m.session_timeout_ms, tuple(m.protocols)),
        )
        if m.group_instance_id is not None:
            group.static[m.group_instance_id] = m.member_id
        assignments[m.member_id] = given
    group.refresh_topics(view)
    try:
        for member_id, given in assignments.items():
            assigned = _by_id(group, given)
            group.set_partitions(group.members[member_id], assigned, {})
            group.target[member_id] = assigned
    except DoubleOwnership as e:
        return f"the leader's assignment gives a partition twice ({e})"
    group.changed()
    return group


def to_classic_group(group: ConsumerGroup) -> Group:
    """The classic group a consumer group of classic members only becomes: Stable at the
    largest member epoch, with the members' current assignments (the caller rebalances it)."""
    members = list(group.members.values())
    classic = Group(
        group.group_id,
        state=GroupState.STABLE,
        protocol_type=CONSUMER_PROTOCOL_TYPE,
        generation_id=max(m.member_epoch for m in members),
    )
    for m in members:
        assert m.classic is not None
        classic.members[m.member_id] = Member(
            m.member_id,
            m.instance_id,
            m.client_id,
            m.client_host,
            m.classic.session_timeout_ms,
            m.rebalance_timeout_ms,
            CONSUMER_PROTOCOL_TYPE,
            list(m.classic.protocols),
            assignment=member_assignment(group, m),
        )
        if m.instance_id is not None:
            classic.static[m.instance_id] = m.member_id
    classic.protocol_name = classic.select_protocol()
    classic.leader_id = members[0].member_id
    return classic


# ---------------------------------------------------------------------- classic requests


class ClassicMembers:
    """The classic requests of classic members in consumer groups (synchronous: the caller
    stores the group before answering a join, as for a ConsumerGroupHeartbeat)."""

    def __init__(self, consumer: ConsumerGroups) -> None:
        self.consumer = consumer

    def _member(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None
    ) -> ConsumerMember | ErrorCode:
        if instance_id is not None:
            known = group.static.get(instance_id)
            if known is not None and known != member_id:
                return ErrorCode.fenced_instance_id
        member = group.members.get(member_id)
        if member is None or member.classic is None:
            return ErrorCode.unknown_member_id  # a consumer-protocol member does not JoinGroup
        return member

    def join(self, group: ConsumerGroup, req: ClassicJoin, view: TopicView) -> JoinResult:
        """JoinGroup of a classic member (see the module docstring)."""
        sub = decode_subscription(req.protocols[0][1]) if req.protocols else None
        if req.protocol_type != CONSUMER_PROTOCOL_TYPE or sub is None:
            return JoinResult(ErrorCode.inconsistent_group_protocol, req.member_id)
        if not req.member_id and req.require_known_member_id:
            return JoinResult(ErrorCode.member_id_required, f"{req.client_id or 'member'}-{uuid.uuid4()}")
        member_id = req.member_id or f"{req.client_id or 'member'}-{uuid.uuid4()}"
        found = self._joining(group, member_id, req.instance_id)
        if isinstance(found, ErrorCode):
            return JoinResult(found, member_id)
        old, joined = found
        updated = dataclasses.replace(
            old,
            rack_id=sub.rack_id or old.rack_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            subscribed_topic_names=tuple(sorted(set(sub.topics))),
            subscribed_topic_regex=None,
            server_assignor=None,
            classic=ClassicMeta(req.session_timeout_ms, req.protocols),
        )
        group.members[member_id] = updated
        if updated != old:
            group.changed()
        resubscribed = joined or updated.subscribed_topic_names != old.subscribed_topic_names
        if group.refresh_topics(view) or resubscribed:
            group.bump_epoch()
        group.update_target()
        new = reconcile(group, updated, _by_id(group, sub.owned), lambda t, p: group.owners.get((t, p)))
        apply(group, updated, new)
        self.consumer.disarm_join(group, group.members[member_id])
        self.consumer._arm_session(group, group.members[member_id])
        self.consumer._arm_revocation(group, old, group.members[member_id])
        return JoinResult(
            ErrorCode.none,
            member_id,
            new.member_epoch,
            CONSUMER_PROTOCOL_TYPE,
            req.protocols[0][0],
            "",  # no leader: the assignment is the coordinator's
        )

    def _joining(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None
    ) -> tuple[ConsumerMember, bool] | ErrorCode:
        """The joining member (created if new) and whether it is new."""
        old = group.members.get(member_id)
        if old is not None and old.classic is None:
            return ErrorCode.unknown_member_id  # a consumer-protocol member does not JoinGroup
        if instance_id is not None:
            holder = group.static.get(instance_id)
            if holder is not None and holder != member_id:
                # A static member back under a new id: the old one is gone (classic semantics).
                self.consumer._remove(group, holder)
                if self.consumer.groups.get(group.group_id) is not group:
                    return ErrorCode.rebalance_in_progress  # converted back meanwhile: rejoin
        if old is not None:
            return old, False
        if len(group.members) >= self.consumer.max_group_size:
            return ErrorCode.group_max_size_reached
        member = ConsumerMember(member_id, instance_id=instance_id)
        group.members[member_id] = member
        if instance_id is not None:
            group.static[instance_id] = member_id
        return member, True

    def sync(
        self,
        group: ConsumerGroup,
        generation_id: int,
        member_id: str,
        instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> SyncResult:
        member = self._member(group, member_id, instance_id)
        if isinstance(member, ErrorCode):
            return SyncResult(member)
        assert member.classic is not None
        if generation_id != member.member_epoch:
            return SyncResult(ErrorCode.illegal_generation)
        names = [n for n, _ in member.classic.protocols]
        if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or (
            protocol_name is not None and protocol_name not in names
        ):
            return SyncResult(ErrorCode.inconsistent_group_protocol)
        if group.group_epoch > member.member_epoch and member.state != MemberState.UNREVOKED_PARTITIONS:
            return SyncResult(ErrorCode.rebalance_in_progress)
        self.consumer._arm_session(group, member)
        return SyncResult(
            ErrorCode.none,
            member_assignment(group, member),
            CONSUMER_PROTOCOL_TYPE,
            protocol_name or names[0],
        )

    def heartbeat(
        self, group: ConsumerGroup, generation_id: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        member = self._member(group, member_id, instance_id)
        if isinstance(member, ErrorCode):
            return member
        if generation_id != member.member_epoch:
            return ErrorCode.illegal_generation
        self.consumer._arm_session(group, member)
        if not must_rejoin(group, member):
            return ErrorCode.none
        self.consumer.arm_join(group, member)
        return ErrorCode.rebalance_in_progress

    def leave(self, group: ConsumerGroup, members: Sequence[LeaveRequest]) -> list[ErrorCode]:
        out: list[ErrorCode] = []
        for req in members:
            member_id = req.member_id
            if req.group_instance_id is not None:
                known = group.static.get(req.group_instance_id)
                if known is None:
                    out.append(ErrorCode.unknown_member_id)
                    continue
                if member_id and known != member_id:
                    out.append(ErrorCode.fenced_instance_id)
                    continue
                member_id = known
            member = group.members.get(member_id)
            if (
                member is None
                or member.classic is None
                or self.consumer.groups.get(group.group_id) is not group
            ):
                out.append(ErrorCode.unknown_member_id)
                continue
            log.info("group %s: classic member %s left", group.group_id, member_id)
            self.consumer._remove(group, member_id)
            out.append(ErrorCode.none)
        return out


def must_rejoin(group: ConsumerGroup, member: ConsumerMember) -> bool:
    """Whether a classic member's heartbeat answers REBALANCE_IN_PROGRESS (Kafka's three
    conditions: a newer group epoch, partitions to revoke, every awaited partition free)."""
    if member.member_epoch < group.group_epoch or member.state == MemberState.UNREVOKED_PARTITIONS:
        return True
    if member.state != MemberState.UNRELEASED_PARTITIONS:
        return False
    target = group.target.get(member.member_id, {})
    awaited = [(t, p) for t, ps in target.items() for p in ps if p not in member.assigned.get(t, frozenset())]
    return all(group.owners.get(tp) in (None, member.member_id) for tp in awaited)
