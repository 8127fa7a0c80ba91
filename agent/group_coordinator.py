"""The classic consumer-group protocol (JoinGroup / SyncGroup / Heartbeat / LeaveGroup).

One `GroupCoordinator` per agent holds, in memory, the groups this agent coordinates
(the agent chosen for a group id by rendezvous hashing, `LiveAgents.coordinator_for_group`).
Committed offsets are not kept here: they are durable in metadata. Group membership is
soft state: if the coordinator moves (an agent joins or leaves), clients get
NOT_COORDINATOR, find the new one, are told UNKNOWN_MEMBER_ID and simply rejoin.

States, as in Kafka's GroupMetadata:

    Empty --join--> PreparingRebalance --all joined / rebalance timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable
    Stable --join (new member, changed metadata, leader rejoin) / leave / expiry--> PreparingRebalance
    CompletingRebalance --join / leave / expiry / sync timeout--> PreparingRebalance
    PreparingRebalance --last member gone--> Empty (at the end of the join phase)
    any --DeleteGroups (only when Empty)--> Dead (and forgotten)

- JoinGroup: a member without an id (v4+) first gets MEMBER_ID_REQUIRED with a fresh id and
  is *pending* until it joins with it. Joins park on a future; the join phase ends when
  every known member has rejoined and no pending member is left, or when the rebalance
  timeout (the largest of the members') expires: members that did not rejoin are removed
  (static ones are kept). A group leaving Empty waits `initial_rebalance_delay_ms` first
  (re-armed while new members keep arriving, bounded by the rebalance timeout), as
  Kafka's `group.initial.rebalance.delay.ms`. The protocol is chosen among those every
  member supports, by vote of each member's first supported preference; a member that
  shares none with the group gets INCONSISTENT_GROUP_PROTOCOL. The leader's join answer
  lists every member's metadata for that protocol; the others get an empty list.
- SyncGroup: followers park until the leader's SyncGroup carries the assignments; then all
  get theirs and the group is Stable. If not every member has synced within the
  rebalance timeout, those that did not are removed and the group rebalances.
- Heartbeat: resets the member's session timer; answers REBALANCE_IN_PROGRESS while
  preparing a rebalance, ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID.
- A member whose session timer fires is removed and the group rebalances.
- Static membership (`group.instance.id`): a join with a known instance id and no member
  id replaces the old member id; if the group is Stable and the metadata unchanged, no
  rebalance happens (the leader, if it was the leader, gets the member list with
  `skip_assignment`). Requests with the old member id get FENCED_INSTANCE_ID.

Protocol metadata and assignments are opaque bytes, carried as the clients sent them.
Time comes from an injected `Scheduler` (asyncio's `call_later` by default), so the unit
tests drive the whole state machine on a fake clock.
"""

from __future__ import annotations

import asyncio
import enum
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from agent.context import AgentContext

GROUP_COORDINATOR = "group_coordinator"


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    def call_later(self, delay_s: float, callback: Callable[[], None]) -> Cancellable: ...


class AsyncioScheduler:
    def call_later(self, delay_s: float, callback: Callable[[], None]) -> Cancellable:
        return asyncio.get_running_loop().call_later(delay_s, callback)


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
    session_timer: Cancellable | None = None

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


@dataclass
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, Cancellable] = field(default_factory=dict)  # member ids given out, not joined yet
    static: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    rebalance_timer: Cancellable | None = None
    initial_delay_active: bool = False
    new_member_added: bool = False
    rebalance_deadline: float = 0.0

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

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


class GroupCoordinator:
    """All groups this agent coordinates. Single-threaded: call it from one event loop."""

    def __init__(
        self,
        *,
        scheduler: Scheduler | None = None,
        monotonic: Callable[[], float] | None = None,
        initial_rebalance_delay_ms: int = 0,
        min_session_timeout_ms: int = 6_000,
        max_session_timeout_ms: int = 1_800_000,
    ) -> None:
        self._scheduler = scheduler or AsyncioScheduler()
        self._monotonic = monotonic or (lambda: asyncio.get_running_loop().time())
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.groups: dict[str, Group] = {}

    # ------------------------------------------------------------------ helpers

    def _new_future(self, result: JoinResult | SyncResult | None = None) -> asyncio.Future:  # type: ignore[type-arg]
        fut: asyncio.Future = asyncio.get_event_loop().create_future()  # type: ignore[type-arg]
        if result is not None:
            fut.set_result(result)
        return fut

    @staticmethod
    def _complete(fut: asyncio.Future | None, result: object) -> None:  # type: ignore[type-arg]
        if fut is not None and not fut.done():
            fut.set_result(result)

    def _schedule_session(self, group: Group, member: Member) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        member.session_timer = self._scheduler.call_later(
            member.session_timeout_ms / 1000, lambda: self._on_session_expired(group, member)
        )

    def _on_session_expired(self, group: Group, member: Member) -> None:
        member.session_timer = None
        if group.members.get(member.member_id) is not member:
            return
        if member.awaiting_join or (member.sync_future is not None and not member.sync_future.done()):
            self._schedule_session(group, member)  # waiting on us: the rebalance timers govern
            return
        self._remove_member(group, member)

    def _fenced(self, group: Group, member_id: str, instance_id: str | None) -> bool:
        if instance_id is None:
            return False
        known = group.static.get(instance_id)
        return known is not None and known != member_id

    def _cancel_timer(self, group: Group) -> None:
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
            group.rebalance_timer = None

    # ------------------------------------------------------------------ join

    def join(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        *,
        client_id: str = "",
        client_host: str = "",
        require_known_member_id: bool = True,
    ) -> asyncio.Future[JoinResult]:
        """JoinGroup. The future completes when the join phase ends (or at once on error)."""

        def now(error: ErrorCode, mid: str = member_id) -> asyncio.Future[JoinResult]:
            return self._new_future(JoinResult(error, member_id=mid))

        if not group_id:
            return now(ErrorCode.invalid_group_id)
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            return now(ErrorCode.invalid_session_timeout)
        if rebalance_timeout_ms <= 0:
            rebalance_timeout_ms = session_timeout_ms
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return now(ErrorCode.unknown_member_id)
            group = self.groups[group_id] = Group(group_id)
        names = [n for n, _ in protocols]
        if not group.supports(protocol_type, names):
            return now(ErrorCode.inconsistent_group_protocol)
        protos = [(n, bytes(d)) for n, d in protocols]

        if not member_id:
            return self._join_unknown(
                group,
                group_instance_id,
                protocol_type,
                protos,
                session_timeout_ms,
                rebalance_timeout_ms,
                client_id,
                client_host,
                require_known_member_id,
            )
        if member_id in group.pending:
            group.pending.pop(member_id).cancel()
            member = Member(
                member_id,
                group_instance_id,
                client_id,
                client_host,
                session_timeout_ms,
                rebalance_timeout_ms,
                protocol_type,
                protos,
            )
            return self._add_and_rebalance(group, member)
        if self._fenced(group, member_id, group_instance_id):
            return now(ErrorCode.fenced_instance_id)
        existing = group.members.get(member_id)
        if existing is None:
            return now(ErrorCode.unknown_member_id)
        existing.session_timeout_ms = session_timeout_ms
        existing.rebalance_timeout_ms = rebalance_timeout_ms
        changed = existing.protocols != protos
        if group.state == GroupState.PREPARING_REBALANCE:
            existing.protocols = protos
            return self._await_join(group, existing)
        if group.state == GroupState.COMPLETING_REBALANCE:
            if not changed:  # it lost the join answer: say it again
                return self._new_future(self._join_answer(group, existing))
            existing.protocols = protos
            fut = self._await_join(group, existing, check=False)
            self._prepare_rebalance(group)
            return fut
        if group.state == GroupState.STABLE:
            if changed or member_id == group.leader_id:
                existing.protocols = protos
                fut = self._await_join(group, existing, check=False)
                self._prepare_rebalance(group)
                return fut
            return self._new_future(self._join_answer(group, existing))
        return now(ErrorCode.unknown_member_id)

    def _join_unknown(
        self,
        group: Group,
        instance_id: str | None,
        protocol_type: str,
        protos: list[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        client_id: str,
        client_host: str,
        require_known_member_id: bool,
    ) -> asyncio.Future[JoinResult]:
        new_id = f"{client_id or 'member'}-{uuid.uuid4()}"
        member = Member(
            new_id,
            instance_id,
            client_id,
            client_host,
            session_timeout_ms,
            rebalance_timeout_ms,
            protocol_type,
            protos,
        )
        if instance_id is not None:
            old_id = group.static.get(instance_id)
            if old_id is not None and old_id in group.members:
                return self._replace_static(group, group.members[old_id], member)
            return self._add_and_rebalance(group, member)
        if require_known_member_id:
            timer = self._scheduler.call_later(
                session_timeout_ms / 1000, lambda: self._on_pending_expired(group, new_id)
            )
            group.pending[new_id] = timer
            return self._new_future(JoinResult(ErrorCode.member_id_required, member_id=new_id))
        return self._add_and_rebalance(group, member)

    def _on_pending_expired(self, group: Group, member_id: str) -> None:
        if group.pending.pop(member_id, None) is not None:
            self._maybe_complete_join(group)

    def _replace_static(self, group: Group, old: Member, new: Member) -> asyncio.Future[JoinResult]:
        """A static member came back with a new member id: the new id takes the old one's place."""
        fenced = JoinResult(ErrorCode.fenced_instance_id, member_id=old.member_id)
        self._complete(old.join_future, fenced)
        self._complete(old.sync_future, SyncResult(ErrorCode.fenced_instance_id))
        if old.session_timer is not None:
            old.session_timer.cancel()
        del group.members[old.member_id]
        new.assignment = old.assignment
        group.members[new.member_id] = new
        assert new.group_instance_id is not None
        group.static[new.group_instance_id] = new.member_id
        was_leader = group.leader_id == old.member_id
        if was_leader:
            group.leader_id = new.member_id
        self._schedule_session(group, new)
        unchanged = old.protocols == new.protocols
        if group.state == GroupState.STABLE and unchanged:
            answer = self._join_answer(group, new)
            if was_leader:
                answer = JoinResult(
                    ErrorCode.none,
                    new.member_id,
                    group.generation_id,
                    group.protocol_type,
                    group.protocol_name,
                    new.member_id,
                    self._member_list(group),
                    skip_assignment=True,
                )
            return self._new_future(answer)
        fut = self._await_join(group, new, check=False)
        if group.state == GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group)
        return fut

    def _add_and_rebalance(self, group: Group, member: Member) -> asyncio.Future[JoinResult]:
        group.members[member.member_id] = member
        if group.protocol_type is None or len(group.members) == 1:
            group.protocol_type = member.protocol_type
        if member.group_instance_id is not None:
            group.static[member.group_instance_id] = member.member_id
        group.new_member_added = True
        self._schedule_session(group, member)
        fut = self._await_join(group, member, check=False)
        if group.state == GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group)
        return fut

    def _await_join(self, group: Group, member: Member, check: bool = True) -> asyncio.Future[JoinResult]:
        old = member.join_future
        fut: asyncio.Future[JoinResult] = self._new_future()
        member.join_future = fut
        if old is not None and not old.done():  # a duplicate join: the older one is superseded
            self._complete(old, JoinResult(ErrorCode.rebalance_in_progress, member_id=member.member_id))
        if check:
            self._maybe_complete_join(group)
        return fut

    def _join_answer(self, group: Group, member: Member) -> JoinResult:
        leader = member.member_id == group.leader_id
        return JoinResult(
            ErrorCode.none,
            member.member_id,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            self._member_list(group) if leader else (),
        )

    def _member_list(self, group: Group) -> tuple[JoinMember, ...]:
        proto = group.protocol_name or ""
        return tuple(
            JoinMember(m.member_id, m.group_instance_id, m.metadata_for(proto))
            for m in group.members.values()
        )

    # ------------------------------------------------------------------ rebalance

    def _prepare_rebalance(self, group: Group) -> None:
        if group.state == GroupState.COMPLETING_REBALANCE:
            for m in group.members.values():
                m.assignment = b""
                self._complete(m.sync_future, SyncResult(ErrorCode.rebalance_in_progress))
                m.sync_future = None
        self._cancel_timer(group)
        timeout_ms = group.rebalance_timeout_ms()
        now = self._monotonic()
        group.rebalance_deadline = now + timeout_ms / 1000
        if group.state == GroupState.EMPTY and self.initial_rebalance_delay_ms > 0:
            group.initial_delay_active = True
            group.new_member_added = False
            delay = min(self.initial_rebalance_delay_ms, timeout_ms)
            group.rebalance_timer = self._scheduler.call_later(
                delay / 1000, lambda: self._on_initial_delay(group)
            )
        else:
            group.initial_delay_active = False
            group.rebalance_timer = self._scheduler.call_later(
                timeout_ms / 1000, lambda: self._on_rebalance_timeout(group)
            )
        group.state = GroupState.PREPARING_REBALANCE
        self._maybe_complete_join(group)

    def _on_initial_delay(self, group: Group) -> None:
        group.rebalance_timer = None
        remaining = group.rebalance_deadline - self._monotonic()
        if group.new_member_added and remaining > 0:
            group.new_member_added = False
            delay = min(self.initial_rebalance_delay_ms / 1000, remaining)
            group.rebalance_timer = self._scheduler.call_later(delay, lambda: self._on_initial_delay(group))
            return
        group.initial_delay_active = False
        if not self._maybe_complete_join(group):
            group.rebalance_timer = self._scheduler.call_later(
                max(remaining, 0.0), lambda: self._on_rebalance_timeout(group)
            )

    def _on_rebalance_timeout(self, group: Group) -> None:
        group.rebalance_timer = None
        if group.state == GroupState.PREPARING_REBALANCE:
            self._complete_join(group)

    def _maybe_complete_join(self, group: Group) -> bool:
        if group.state != GroupState.PREPARING_REBALANCE or group.initial_delay_active:
            return False
        if group.pending or not all(m.awaiting_join for m in group.members.values()):
            return False
        self._complete_join(group)
        return True

    def _complete_join(self, group: Group) -> None:
        self._cancel_timer(group)
        group.initial_delay_active = False
        for m in list(group.members.values()):
            if not m.awaiting_join and m.group_instance_id is None:
                self._drop(group, m)
        for timer in group.pending.values():
            timer.cancel()
        group.pending.clear()
        group.generation_id += 1
        joined = [m for m in group.members.values() if m.awaiting_join]
        if not joined:
            # Nobody rejoined (static members that did not come back stay until they expire).
            for m in list(group.members.values()):
                self._drop(group, m)
            group.state = GroupState.EMPTY
            group.protocol_name = None
            group.leader_id = None
            return
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members or not group.members[group.leader_id].awaiting_join:
            group.leader_id = joined[0].member_id
        group.state = GroupState.COMPLETING_REBALANCE
        for m in group.members.values():
            fut = m.join_future
            m.join_future = None
            self._complete(fut, self._join_answer(group, m))
            self._schedule_session(group, m)
        generation = group.generation_id
        group.rebalance_timer = self._scheduler.call_later(
            group.rebalance_timeout_ms() / 1000, lambda: self._on_sync_timeout(group, generation)
        )

    def _on_sync_timeout(self, group: Group, generation: int) -> None:
        group.rebalance_timer = None
        if group.state != GroupState.COMPLETING_REBALANCE or group.generation_id != generation:
            return
        for m in list(group.members.values()):
            if m.sync_future is None:
                self._drop(group, m)
        self._after_removal(group)

    # ------------------------------------------------------------------ sync

    def sync(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        assignments: Sequence[tuple[str, bytes]],
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> asyncio.Future[SyncResult]:
        def now(error: ErrorCode) -> asyncio.Future[SyncResult]:
            return self._new_future(SyncResult(error))

        group = self.groups.get(group_id)
        if group is None:
            return now(ErrorCode.unknown_member_id)
        if self._fenced(group, member_id, group_instance_id):
            return now(ErrorCode.fenced_instance_id)
        member = group.members.get(member_id)
        if member is None:
            return now(ErrorCode.unknown_member_id)
        if generation_id != group.generation_id:
            return now(ErrorCode.illegal_generation)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return now(ErrorCode.inconsistent_group_protocol)
        if group.state == GroupState.PREPARING_REBALANCE:
            return now(ErrorCode.rebalance_in_progress)
        if group.state == GroupState.STABLE:
            self._schedule_session(group, member)
            return self._new_future(self._sync_answer(group, member))
        if group.state != GroupState.COMPLETING_REBALANCE:
            return now(ErrorCode.unknown_member_id)
        self._schedule_session(group, member)
        fut: asyncio.Future[SyncResult] = self._new_future()
        self._complete(member.sync_future, SyncResult(ErrorCode.rebalance_in_progress))
        member.sync_future = fut
        if member_id == group.leader_id:
            given = {mid: bytes(a) for mid, a in assignments}
            for m in group.members.values():
                m.assignment = given.get(m.member_id, b"")
            self._cancel_timer(group)
            group.state = GroupState.STABLE
            for m in group.members.values():
                sf = m.sync_future
                m.sync_future = None
                self._complete(sf, self._sync_answer(group, m))
        return fut

    @staticmethod
    def _sync_answer(group: Group, member: Member) -> SyncResult:
        return SyncResult(ErrorCode.none, member.assignment, group.protocol_type, group.protocol_name)

    # ------------------------------------------------------------------ heartbeat, leave, expiry

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if self._fenced(group, member_id, group_instance_id):
            return ErrorCode.fenced_instance_id
        member = group.members.get(member_id)
        if member is None or group.state in (GroupState.EMPTY, GroupState.DEAD):
            return ErrorCode.unknown_member_id
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        self._schedule_session(group, member)
        if group.state == GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, group_id: str, members: Sequence[LeaveRequest]) -> list[ErrorCode]:
        group = self.groups.get(group_id)
        if group is None:
            return [ErrorCode.unknown_member_id for _ in members]
        out: list[ErrorCode] = []
        removed = False
        for req in members:
            member_id = req.member_id
            if not member_id and req.group_instance_id is not None:
                member_id = group.static.get(req.group_instance_id, "")
            elif self._fenced(group, member_id, req.group_instance_id):
                out.append(ErrorCode.fenced_instance_id)
                continue
            if member_id in group.pending:
                group.pending.pop(member_id).cancel()
                removed = True
                out.append(ErrorCode.none)
                continue
            member = group.members.get(member_id)
            if member is None:
                out.append(ErrorCode.unknown_member_id)
                continue
            self._drop(group, member)
            removed = True
            out.append(ErrorCode.none)
        if removed:
            self._after_removal(group)
        return out

    def _drop(self, group: Group, member: Member) -> None:
        """Forget a member; whoever waits on it is told UNKNOWN_MEMBER_ID."""
        group.members.pop(member.member_id, None)
        if member.group_instance_id is not None and group.static.get(member.group_instance_id) == (
            member.member_id
        ):
            del group.static[member.group_instance_id]
        if member.session_timer is not None:
            member.session_timer.cancel()
            member.session_timer = None
        self._complete(member.join_future, JoinResult(ErrorCode.unknown_member_id, member.member_id))
        self._complete(member.sync_future, SyncResult(ErrorCode.unknown_member_id))
        member.join_future = member.sync_future = None

    def _remove_member(self, group: Group, member: Member) -> None:
        self._drop(group, member)
        self._after_removal(group)

    def _after_removal(self, group: Group) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            if group.members:
                self._prepare_rebalance(group)
            else:
                self._to_empty(group)
        elif group.state == GroupState.PREPARING_REBALANCE:
            if not group.members and not group.pending:
                self._cancel_timer(group)
                group.generation_id += 1
                self._to_empty(group)
            else:
                self._maybe_complete_join(group)

    def _to_empty(self, group: Group) -> None:
        self._cancel_timer(group)
        group.state = GroupState.EMPTY
        group.protocol_name = None
        group.leader_id = None
        group.initial_delay_active = False

    # ------------------------------------------------------------------ offsets, admin

    def validate_commit(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        """May this OffsetCommit proceed? (generation -1 with no member id: a simple commit.)"""
        if generation_id < 0 and not member_id and group_instance_id is None:
            return ErrorCode.none
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.illegal_generation if generation_id >= 0 else ErrorCode.unknown_member_id
        if self._fenced(group, member_id, group_instance_id):
            return ErrorCode.fenced_instance_id
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.state == GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        self._schedule_session(group, member)
        return ErrorCode.none

    def list_groups(self) -> list[Group]:
        return [g for g in self.groups.values() if g.state != GroupState.DEAD]

    def describe(self, group_id: str) -> GroupDescription:
        group = self.groups.get(group_id)
        if group is None:
            return GroupDescription(group_id, GroupState.DEAD.value, "", "", ())
        stable = group.state == GroupState.STABLE
        proto = group.protocol_name or ""
        return GroupDescription(
            group_id,
            group.state.value,
            group.protocol_type or "",
            proto,
            tuple(
                MemberDescription(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata_for(proto),
                    m.assignment if stable else b"",
                )
                for m in group.members.values()
            ),
        )

    def is_empty(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is None or (group.state == GroupState.EMPTY and not group.members)

    def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups: only an empty group (or one this agent does not know) can go."""
        if not self.is_empty(group_id):
            return ErrorCode.non_empty_group
        group = self.groups.pop(group_id, None)
        if group is not None:
            for t in group.pending.values():
                t.cancel()
            self._cancel_timer(group)
            group.state = GroupState.DEAD
        return ErrorCode.none

    def close(self) -> None:
        """Stop every timer and answer every waiter (the agent is shutting down)."""
        for group in self.groups.values():
            self._cancel_timer(group)
            for t in group.pending.values():
                t.cancel()
            for m in group.members.values():
                if m.session_timer is not None:
                    m.session_timer.cancel()
                self._complete(m.join_future, JoinResult(ErrorCode.not_coordinator, m.member_id))
                self._complete(m.sync_future, SyncResult(ErrorCode.not_coordinator))
        self.groups.clear()


# ---------------------------------------------------------------------- handler helpers


def coordinator(ctx: AgentContext) -> GroupCoordinator:
    """The agent's coordinator (created on first use if the runtime did not register one)."""
    found = ctx.services.get(GROUP_COORDINATOR)
    if found is None:
        found = ctx.services[GROUP_COORDINATOR] = GroupCoordinator()
    assert isinstance(found, GroupCoordinator)
    return found


def owns_group(ctx: AgentContext, group_id: str) -> bool:
    """Whether this agent coordinates `group_id` (else the answer is NOT_COORDINATOR)."""
    return ctx.agents.coordinator_for_group(group_id).node_id == ctx.agents.self_node_id
