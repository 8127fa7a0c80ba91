"""The consumer-group model held by the coordinator (agent.groups.coordinator): group and
member state as in Kafka's GroupMetadata / MemberMetadata, the coordinator's answers, and
the protocol vote.

- `Group.select_protocol()`: among the protocols every member supports (in the first
  member's order of preference), each member votes for its first supported one; the most
  votes wins, ties going to the earlier preference.
- `Member.has_satisfied_heartbeat`: a member awaiting the end of a join or sync phase is
  satisfied (those phases have their own timeouts), except a new member.
- `subscription_topics()`: the topics of a ConsumerProtocolSubscription (every version
  starts with `version: int16, topics: [string]`), for OffsetDelete's check of subscribed
  topics.
"""

from __future__ import annotations

import asyncio
import enum
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class JoinMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinResult:
    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[JoinMember, ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True)
class SyncResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[SyncResult] | None = None
    is_new: bool = False  # joined, but no join phase has completed with it yet
    heartbeat_satisfied: bool = False
    is_leaving: bool = False

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""

    @property
    def awaiting_join(self) -> bool:
        return self.join_future is not None and not self.join_future.done()

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_future is not None and not self.sync_future.done()

    @property
    def has_satisfied_heartbeat(self) -> bool:
        """Kafka's MemberMetadata.hasSatisfiedHeartbeat."""
        if self.is_new:
            return self.heartbeat_satisfied  # new members may expire while awaiting their join
        if self.awaiting_join or self.awaiting_sync:
            return True  # the join / sync phase has its own timeout
        return self.heartbeat_satisfied


@dataclass
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)  # member ids given out, not joined yet
    pending_sync: set[str] = field(default_factory=set)  # this generation's members yet to sync
    static: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    initial_delay: bool = False  # an InitialDelayedJoin holds the join phase
    new_member_added: bool = False  # ... and a member arrived since it was armed
    unconfirmed: bool = False  # a new generation whose join answers wait for metadata (fencing)
    storing_assignment: bool = False  # the leader's assignment, being stored before Stable (fencing)

    @property
    def join_key(self) -> tuple[str, str]:
        return ("join", self.group_id)

    @property
    def sync_key(self) -> tuple[str, str]:
        return ("sync", self.group_id)

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_joined(self) -> bool:
        """Kafka's hasAllMembersJoined: every member awaits the join, no id is pending."""
        return not self.pending and all(m.awaiting_join for m in self.members.values())

    def candidate_protocols(self) -> list[str]:
        """Protocols every member supports, in the first member's order of preference."""
        members = list(self.members.values())
        if not members:
            return []
        common = set(members[0].protocol_names())
        for m in members[1:]:
            common &= set(m.protocol_names())
        return [p for p in members[0].protocol_names() if p in common]

    def supports(self, protocol_type: str, protocols: Sequence[str]) -> bool:
        if not protocols or not protocol_type:
            return False
        if not self.members:
            return True
        if protocol_type != self.protocol_type:
            return False
        return bool(set(self.candidate_protocols()) & set(protocols))

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to, read from their consumer-protocol metadata for
        the chosen protocol (Kafka's GroupMetadata.subscribedTopics). None when unknown (not
        a "consumer" group, no protocol chosen yet, metadata that does not parse): then every
        topic counts as subscribed."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            found = subscription_topics(m.metadata_for(self.protocol_name))
            if found is None:
                return None
            topics |= found
        return topics

    def select_protocol(self) -> str:
        candidates = self.candidate_protocols()
        if not candidates:  # cannot happen through `supports`; never crash the join phase over it
            return next(iter(self.members.values())).protocols[0][0]
        votes = dict.fromkeys(candidates, 0)
        for m in self.members.values():
            choice = next(p for p in m.protocol_names() if p in votes)
            votes[choice] += 1
        return max(candidates, key=lambda p: votes[p])  # ties: the first in preference order


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol_name: str
    members: tuple[MemberDescription, ...]


@dataclass(frozen=True)
class LeaveRequest:
    member_id: str
    group_instance_id: str | None = None


CONSUMER_PROTOCOL_TYPE = "consumer"


def subscription_topics(metadata: bytes) -> set[str] | None:
    """The topics of a ConsumerProtocolSubscription (any version: all start with
    `version: int16, topics: [string]`), None if it does not parse."""
    try:
        (version, count) = struct.unpack_from(">hi", metadata, 0)
        if version < 0:
            return None
        pos = 6
        topics: set[str] = set()
        for _ in range(max(count, 0)):
            (size,) = struct.unpack_from(">h", metadata, pos)
            pos += 2
            if size < 0 or pos + size > len(metadata):
                return None
            topics.add(metadata[pos : pos + size].decode())
            pos += size
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
