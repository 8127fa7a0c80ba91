"""The consumer group protocol's model (KIP-848; Kafka's ConsumerGroup, ConsumerGroupMember
and CurrentAssignmentBuilder): groups, members, the target assignment and each member's
reconciliation towards it. Pure: no I/O, no clock (`agent.groups.consumer_protocol`
drives it).

Epochs. The *group epoch* goes up whenever what the assignment depends on changes (a member
joins or leaves, a subscription changes, a subscribed topic appears, goes or changes its
partition count). The *target assignment* is computed by the group's assignor at a group
epoch (`assignment_epoch`). Each member has a *member epoch*: the target epoch it has
reconciled to; a request carrying another epoch is fenced.

Reconciliation (`reconcile`, per member, on its own heartbeat), with A its assigned
partitions and T its target:

- partitions in A but not in T are *pending revocation*: the member keeps its epoch and
  state UNREVOKED_PARTITIONS until a heartbeat reports owned partitions without them (or
  it reports none of them already);
- then it moves to the target epoch with A ∩ T plus those of T that are *free* (no other
  member holds them, as assigned or pending revocation); the others stay unassigned and
  the member is UNRELEASED_PARTITIONS until their owners let go (a later heartbeat
  assigns them), else STABLE.

So a partition is never given to a member while another one may still hold it: `owners`
records, for every partition, the one member holding it (assigned or pending revocation),
and `set_partitions` refuses to make two holders (`DoubleOwnership`).

Group states (Kafka's ConsumerGroupState): Empty (no member), Assigning (the target is
older than the group epoch), Reconciling (a member is not at the target epoch, or not
STABLE), Stable.

Subscriptions: topic names and/or a regular expression (`SubscribedTopicRegex`). Kafka uses
RE2J; this uses Python's `re` with the same full-match rule, bounded: patterns up to
`MAX_REGEX_CHARS`, compiled once per group, internal topics (`__` prefix) never matched.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from skiff.agent.groups.assignors import ASSIGNORS, DEFAULT_ASSIGNOR, Assignment, MemberSpec

MAX_REGEX_CHARS = 1_000
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
CONSUMER_GROUP_TYPE = "consumer"


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class DoubleOwnership(AssertionError):
    """A partition would be held by two members at once: a bug, never a client's doing."""


class InvalidRegex(ValueError):
    pass


@dataclass(frozen=True)
class ClassicMeta:
    """A member that speaks the classic protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup)
    inside a consumer-protocol group (Kafka's ClassicMemberMetadata; `agent.groups.mixed`)."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]  # (name, subscription metadata), in preference order


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 300_000
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    # The topics matching the regex that this member's principal may DESCRIBE, as of its last
    # heartbeat (agent.groups.consumer_protocol); None: not filtered (no authorizer asked).
    regex_allowed: frozenset[str] | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    # The member epoch at which it got each partition it holds (KIP-1251's assignment epochs:
    # a commit at an older member epoch is accepted for partitions held since then).
    assigned_at: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)
    # Timer tokens (agent.groups.consumer_protocol): a timer fires only if its token is current.
    session_token: int = 0
    revoke_token: int = 0
    classic: ClassicMeta | None = None  # set for a classic-protocol member (a mixed group)
    join_token: int = 0  # a classic member's join timer (agent.groups.consumer_protocol)
    join_armed: bool = False


@dataclass
class TopicView:
    """What the caller looked up in metadata for this heartbeat: `found` for the names in
    `checked` (a checked name absent from `found` does not exist), and, when `listed`, every
    topic (for regular expressions). Topics not checked keep what the group knew of them."""

    found: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)  # name -> (id, partitions)
    checked: frozenset[str] = frozenset()
    listed: bool = False


@dataclass
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, Assignment] = field(default_factory=dict)  # member id -> target assignment
    topics: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)  # subscribed: name -> (id, count)
    regex_topics: dict[str, frozenset[str]] = field(default_factory=dict)  # pattern -> matched names
    owners: dict[tuple[uuid.UUID, int], str] = field(default_factory=dict)  # partition -> holder
    assignor: str = DEFAULT_ASSIGNOR
    dead: bool = False  # no longer held here: forgotten (emptied) or dropped
    lost: bool = False  # dropped: its lease is lost or given up
    version: int = 0  # bumped by every change a member may learn (stored before answers)
    stored_version: int = 0
    protocol_type: str = CONSUMER_GROUP_TYPE

    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.assignment_epoch < self.group_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            if m.member_epoch != self.assignment_epoch or m.state != MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def only_classic(self) -> bool:
        """Members left, and every one speaks the classic protocol (the group converts back)."""
        return bool(self.members) and all(m.classic is not None for m in self.members.values())

    def changed(self) -> None:
        self.version += 1

    def bump_epoch(self) -> None:
        self.group_epoch += 1
        self.changed()

    def topic_names(self) -> dict[uuid.UUID, str]:
        return {tid: name for name, (tid, _) in self.topics.items()}

    # ------------------------------------------------------------------ ownership

    def set_partitions(
        self, member: ConsumerMember, assigned: Assignment, pending: Assignment, epoch: int | None = None
    ) -> None:
        """Give `member` these assigned and pending-revocation partitions, keeping `owners`
        exact (those it did not hold yet it holds from `epoch`, default its member epoch);
        DoubleOwnership if another member holds one of them."""
        wanted = {(t, p) for part in (assigned, pending) for t, ps in part.items() for p in ps}
        for tp in wanted:
            holder = self.owners.get(tp)
            if holder is not None and holder != member.member_id:
                raise DoubleOwnership(
                    f"group {self.group_id}: {tp} is held by {holder}, not {member.member_id}"
                )
        self._release(member, keep=wanted)
        for tp in wanted:
            self.owners[tp] = member.member_id
        since = member.member_epoch if epoch is None else epoch
        member.assigned_at = {tp: member.assigned_at.get(tp, since) for tp in wanted}
        member.assigned = {t: ps for t, ps in assigned.items() if ps}
        member.pending_revocation = {t: ps for t, ps in pending.items() if ps}

    def _release(
        self, member: ConsumerMember, keep: AbstractSet[tuple[uuid.UUID, int]] = frozenset()
    ) -> None:
        for part in (member.assigned, member.pending_revocation):
            for t, ps in part.items():
                for p in ps:
                    if (t, p) not in keep and self.owners.get((t, p)) == member.member_id:
                        del self.owners[(t, p)]

    def remove_member(self, member_id: str) -> ConsumerMember | None:
        """Forget a member and free its partitions; the group epoch goes up."""
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self._release(member)
        self.target.pop(member_id, None)
        if member.instance_id is not None and self.static.get(member.instance_id) == member_id:
            del self.static[member.instance_id]
        self.bump_epoch()
        return member

    # ------------------------------------------------------------------ subscriptions

    def subscribed_names(self, member: ConsumerMember) -> set[str]:
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            matched = self.regex_topics.get(member.subscribed_topic_regex, frozenset())
            names |= matched if member.regex_allowed is None else matched & member.regex_allowed
        return names

    def subscribed_ids(self, member: ConsumerMember) -> frozenset[uuid.UUID]:
        return frozenset(self.topics[n][0] for n in self.subscribed_names(member) if n in self.topics)

    def all_subscribed_names(self) -> set[str]:
        return {n for m in self.members.values() for n in m.subscribed_topic_names}

    def regexes(self) -> set[str]:
        return {m.subscribed_topic_regex for m in self.members.values() if m.subscribed_topic_regex}

    def refresh_topics(self, view: TopicView) -> bool:
        """Update the regex matches and the subscribed topics' ids and partition counts
        from `view`; True if anything changed (the caller bumps the group epoch)."""
        regex_topics = dict(self.regex_topics) if not view.listed else {}
        for pattern in self.regexes():
            if view.listed:
                regex_topics[pattern] = match_topics(pattern, view.found)
            regex_topics.setdefault(pattern, frozenset())
        regex_topics = {p: ns for p, ns in regex_topics.items() if p in self.regexes()}
        names = self.all_subscribed_names() | {n for ns in regex_topics.values() for n in ns}
        topics: dict[str, tuple[uuid.UUID, int]] = {}
        for name in names:
            if name in view.found:
                topics[name] = view.found[name]
            elif not view.listed and name not in view.checked and name in self.topics:
                topics[name] = self.topics[name]
        if topics == self.topics and regex_topics == self.regex_topics:
            return False
        self.topics, self.regex_topics = topics, regex_topics
        return True

    # ------------------------------------------------------------------ target assignment

    def preferred_assignor(self) -> str:
        """The server assignor most members ask for (Kafka's rule), else the default."""
        asked = Counter(m.server_assignor for m in self.members.values() if m.server_assignor)
        if not asked:
            return DEFAULT_ASSIGNOR
        return max(sorted(asked), key=lambda name: asked[name])

    def update_target(self) -> bool:
        """Compute the target assignment if it is older than the group epoch."""
        if self.assignment_epoch >= self.group_epoch:
            return False
        self.assignor = self.preferred_assignor()
        specs = {
            mid: MemberSpec(self.subscribed_ids(m), self.target.get(mid, {}))
            for mid, m in self.members.items()
        }
        counts = {tid: count for tid, count in self.topics.values()}
        self.target = ASSIGNORS[self.assignor](specs, counts)
        self.assignment_epoch = self.group_epoch
        self.changed()
        return True


def with_authorized_regex_topics(
    group: ConsumerGroup, member: ConsumerMember, describable: Callable[[str], bool] | None
) -> ConsumerMember:
    """The member with the topics matching its regex that its principal may DESCRIBE (KIP-848's
    rule since Kafka 4.0, KAFKA-18813; resolved per member here, where Kafka resolves a regex
    once with the principal of the member that last changed it). Fail-closed: a topic created
    since the member's last heartbeat is assigned to it only from its next one."""
    pattern = member.subscribed_topic_regex
    if describable is None or pattern is None:
        return member
    allowed = frozenset(n for n in group.regex_topics.get(pattern, frozenset()) if describable(n))
    return member if allowed == member.regex_allowed else dataclasses.replace(member, regex_allowed=allowed)


def compile_regex(pattern: str) -> re.Pattern[str]:
    if not pattern or len(pattern) > MAX_REGEX_CHARS:
        raise InvalidRegex(f"the regular expression must have 1 to {MAX_REGEX_CHARS} characters")
    try:
        return _compiled(pattern)
    except re.error as e:
        raise InvalidRegex(f"invalid regular expression {pattern!r}: {e}") from None


_REGEX_CACHE: dict[str, re.Pattern[str]] = {}
_REGEX_CACHE_MAX = 1_024


def _compiled(pattern: str) -> re.Pattern[str]:
    found = _REGEX_CACHE.get(pattern)
    if found is None:
        found = re.compile(pattern)
        if len(_REGEX_CACHE) >= _REGEX_CACHE_MAX:
            _REGEX_CACHE.clear()
        _REGEX_CACHE[pattern] = found
    return found


def match_topics(pattern: str, topics: Mapping[str, object]) -> frozenset[str]:
    """The topic names the pattern fully matches (internal `__` topics excluded); none if it
    does not compile (it was checked when the member subscribed)."""
    try:
        regex = compile_regex(pattern)
    except InvalidRegex:
        return frozenset()
    return frozenset(n for n in topics if not n.startswith("__") and regex.fullmatch(n))


# ---------------------------------------------------------------------- reconciliation

Owned = Mapping[uuid.UUID, frozenset[int]] | None  # what the member reported (None: not sent)


def _owns_any(owned: Owned, partitions: Assignment) -> bool:
    if owned is None:
        return True  # not reported: assume it still holds them
    return any(owned.get(t, frozenset()) & ps for t, ps in partitions.items())


def reconcile(
    group: ConsumerGroup, member: ConsumerMember, owned: Owned, holder: Callable[[uuid.UUID, int], str | None]
) -> ConsumerMember:
    """The member's next state towards the group's target (a new object, or `member`
    itself when it cannot progress); `holder(topic, partition)` is the member holding a
    partition now (None if free)."""
    target_epoch = group.assignment_epoch
    if member.state == MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
    elif member.state == MemberState.UNREVOKED_PARTITIONS and _owns_any(owned, member.pending_revocation):
        return member
    return _next_assignment(group, member, owned, holder)


def _next_assignment(
    group: ConsumerGroup, member: ConsumerMember, owned: Owned, holder: Callable[[uuid.UUID, int], str | None]
) -> ConsumerMember:
    target = group.target.get(member.member_id, {})
    subscribed = group.subscribed_ids(member)
    unreleased = False
    assigned: dict[uuid.UUID, frozenset[int]] = {}
    revoking: dict[uuid.UUID, frozenset[int]] = {}
    pending: dict[uuid.UUID, set[int]] = {}
    for topic in set(target) | set(member.assigned):
        want = target.get(topic, frozenset()) if topic in subscribed else frozenset()
        have = member.assigned.get(topic, frozenset())
        keep = have & want
        if keep:
            assigned[topic] = keep
        if have - keep:
            revoking[topic] = have - keep
        mine = member.pending_revocation.get(topic, frozenset())
        for p in sorted(want - keep):
            h = holder(topic, p)
            if h is None or (h == member.member_id and p in mine):
                pending.setdefault(topic, set()).add(p)
            else:
                unreleased = True
    if revoking and _owns_any(owned, revoking):
        return dataclasses.replace(
            member, state=MemberState.UNREVOKED_PARTITIONS, assigned=assigned, pending_revocation=revoking
        )
    for topic, ps in pending.items():
        assigned[topic] = assigned.get(topic, frozenset()) | frozenset(ps)
    return dataclasses.replace(
        member,
        state=MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE,
        member_epoch=group.assignment_epoch,
        previous_member_epoch=member.member_epoch,
        assigned=assigned,
        pending_revocation={},
    )


def apply(group: ConsumerGroup, old: ConsumerMember, new: ConsumerMember) -> bool:
    """Install `new` in place of `old` (ownership updated); True if anything changed."""
    if new is old:
        return False
    assigned, pending = new.assigned, new.pending_revocation
    new.assigned, new.pending_revocation = old.assigned, old.pending_revocation
    group.members[new.member_id] = new
    group.set_partitions(new, assigned, pending)
    if new != old:
        group.changed()
        return True
    return False
