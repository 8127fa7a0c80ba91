"""The classic consumer-group protocol's state machine (Kafka's GroupMetadata and the
rebalance half of its GroupCoordinator): `GroupRebalancer`, the base of
`agent.groups.coordinator.GroupCoordinator`, which adds the handler-facing requests.

States, as in Kafka's GroupMetadata:

    Empty --join--> PreparingRebalance --all joined / rebalance timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable
    Stable --join (new member, changed metadata, leader rejoin) / leave / expiry--> PreparingRebalance
    CompletingRebalance --join / leave / expiry / sync timeout--> PreparingRebalance
    PreparingRebalance --nobody left at the end of the join phase--> Empty (then forgotten)
    Empty --DeleteGroups--> Dead (forgotten)

- JoinGroup: a member without an id (v4+) first gets MEMBER_ID_REQUIRED with a fresh id and
  is *pending* until it joins with it. Joins park on a future. The protocol is chosen among
  those every member supports, by vote of each member's first supported preference; a
  member that shares none with the group gets INCONSISTENT_GROUP_PROTOCOL. The leader's
  join answer lists every member's metadata for that protocol; the others get an empty list.
- SyncGroup: followers park until the leader's SyncGroup carries the assignments; then
  (with fencing, once metadata stored them) all get theirs and the group is Stable.
- Heartbeat: keeps the member's session; answers REBALANCE_IN_PROGRESS while preparing a
  rebalance, ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID.
- Static membership (`group.instance.id`): a join with a known instance id and no member
  id replaces the old member id; if the group is Stable and the metadata unchanged, no
  rebalance happens (the leader, if it was the leader, gets the member list with
  `skip_assignment`). Requests with the old member id get FENCED_INSTANCE_ID.

Time: delayed operations on the request purgatory (`agent.purgatory`), as in Kafka's
GroupCoordinator, with its two purgatories per coordinator:

- *Rebalance* purgatory.
  - `DelayedJoin`, watched on `("join", group)`: the join phase. It completes as soon as
    every known member has (re)joined and no pending member is left (the group key is
    checked after every join, leave and member removal), else at the rebalance timeout
    (the largest of the members'). Completing it removes the dynamic members that did not
    rejoin (static ones stay, and if only such members are left the phase waits another
    rebalance timeout, until their sessions expire), starts the next generation and
    answers the joins; a group left with no member becomes Empty.
  - `InitialDelayedJoin` (`group.initial.rebalance.delay.ms`): a group leaving Empty
    waits the initial delay before completing its first join phase, re-armed while new
    members keep arriving, in all at most the rebalance timeout. Only its delay completes
    it, as in Kafka.
  - `DelayedSync`, watched on `("sync", group)`: every member of a new generation must
    send SyncGroup within the rebalance timeout; at the timeout, those that did not are
    removed and the group rebalances. It completes early once all have synced (or the
    group moved on).
- *Heartbeat* purgatory: `DelayedHeartbeat`, watched on `(group, member id)`, is the
  member's session. Each heartbeat, join, sync (and offset commit) of the member completes
  the current one (`check_and_complete` on its key with the heartbeat marked satisfied)
  and schedules the next one, `session.timeout.ms` ahead. A member waiting for the end of
  a join or sync phase is satisfied (those phases have their own timeouts), except a new
  member, whose first join may last `NEW_MEMBER_JOIN_TIMEOUT_MS`. At expiry an
  unsatisfied member is removed and the group rebalances. A pending member id
  (MEMBER_ID_REQUIRED) gets a `DelayedHeartbeat` of one session timeout that completes
  when it joins, and forgets the id if it does not.

Purgatory callbacks run on the event loop: the state machine is loop-confined, like the
purgatory (the coordinator's `start()` / `close()` drive and stop them).

Hooks where a group's state must be stored before anyone learns it (overridden by
`agent.groups.persistence` when the coordinator is fenced, answered at once here):
`_generation_formed` (the join answers of a new generation), `_assignment_given` (the
leader's assignment, i.e. the SyncGroup answers), `_members_replaced` (a static member's
new id without a rebalance), `_forgotten` (an emptied group leaves memory), `_new_group`.
"""

from __future__ import annotations

import asyncio
import logging

from kio.schema.errors import ErrorCode
from skiff.agent.groups.model import Group, GroupState, JoinMember, JoinResult, Member, SyncResult
from skiff.agent.purgatory import DelayedOperation, DelayedOperationPurgatory

log = logging.getLogger(__name__)

# How long a new member's first JoinGroup may wait before the member is dropped (Kafka's
# GroupCoordinator.NewMemberJoinTimeoutMs, KIP-394): a client that gave up on a long join
# phase and retries must not leave defunct members holding the group.
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000


# ---------------------------------------------------------------------- delayed operations


class DelayedHeartbeat(DelayedOperation):
    """A member's session (or a pending member id's wait for its join), Kafka's DelayedHeartbeat."""

    __slots__ = ("coordinator", "group", "member_id", "pending")

    def __init__(
        self, coordinator: GroupRebalancer, group: Group, member_id: str, pending: bool, delay_ms: int
    ) -> None:
        super().__init__(delay_ms)
        self.coordinator = coordinator
        self.group = group
        self.member_id = member_id
        self.pending = pending

    def try_complete(self) -> bool:
        return self.coordinator._heartbeat_satisfied(self.group, self.member_id, self.pending)

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        self.coordinator._on_heartbeat_expired(self.group, self.member_id, self.pending)


class DelayedJoin(DelayedOperation):
    """The join phase: complete once every member has (re)joined, or at the rebalance timeout."""

    __slots__ = ("coordinator", "group")

    def __init__(self, coordinator: GroupRebalancer, group: Group, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self.coordinator = coordinator
        self.group = group

    def try_complete(self) -> bool:
        return not self.coordinator._alive(self.group) or self.group.all_joined()

    def on_complete(self) -> None:
        self.coordinator._on_complete_join(self.group)

    def on_expiration(self) -> None:
        pass


class InitialDelayedJoin(DelayedJoin):
    """The first join phase of a group leaving Empty: only its delay completes it."""

    __slots__ = ("remaining_ms",)

    def __init__(self, coordinator: GroupRebalancer, group: Group, delay_ms: int, remaining_ms: int) -> None:
        super().__init__(coordinator, group, delay_ms)
        self.remaining_ms = remaining_ms

    def try_complete(self) -> bool:
        return not self.coordinator._alive(self.group)

    def on_complete(self) -> None:
        self.coordinator._on_initial_delay_done(self)


class DelayedSync(DelayedOperation):
    """Every member of `generation_id` must send SyncGroup before the rebalance timeout."""

    __slots__ = ("coordinator", "group", "generation_id")

    def __init__(self, coordinator: GroupRebalancer, group: Group, generation_id: int, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self.coordinator = coordinator
        self.group = group
        self.generation_id = generation_id

    def try_complete(self) -> bool:
        group = self.group
        return (
            not self.coordinator._alive(group)
            or group.generation_id != self.generation_id
            or group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE)
            or not group.pending_sync
        )

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        self.coordinator._on_sync_expired(self.group, self.generation_id)


# ---------------------------------------------------------------------- the state machine


class GroupRebalancer:
    """The groups in memory and their state machine. Single-threaded: one event loop."""

    def __init__(
        self,
        *,
        initial_rebalance_delay_ms: int = 3_000,
        new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS,
        heartbeat_purgatory: DelayedOperationPurgatory[DelayedHeartbeat] | None = None,
        rebalance_purgatory: DelayedOperationPurgatory[DelayedOperation] | None = None,
    ) -> None:
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.new_member_join_timeout_ms = new_member_join_timeout_ms
        self.heartbeat_purgatory: DelayedOperationPurgatory[DelayedHeartbeat] = (
            heartbeat_purgatory if heartbeat_purgatory is not None else DelayedOperationPurgatory("Heartbeat")
        )
        self.rebalance_purgatory: DelayedOperationPurgatory[DelayedOperation] = (
            rebalance_purgatory if rebalance_purgatory is not None else DelayedOperationPurgatory("Rebalance")
        )
        self.groups: dict[str, Group] = {}

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _new_future(result: JoinResult | SyncResult | None = None) -> asyncio.Future:  # type: ignore[type-arg]
        fut: asyncio.Future = asyncio.get_event_loop().create_future()  # type: ignore[type-arg]
        if result is not None:
            fut.set_result(result)
        return fut

    @staticmethod
    def _complete(fut: asyncio.Future | None, result: object) -> bool:  # type: ignore[type-arg]
        if fut is not None and not fut.done():
            fut.set_result(result)
            return True
        return False

    def _alive(self, group: Group) -> bool:
        return group.state != GroupState.DEAD and self.groups.get(group.group_id) is group

    def _fenced(self, group: Group, member_id: str, instance_id: str | None) -> bool:
        if instance_id is None:
            return False
        known = group.static.get(instance_id)
        return known is not None and known != member_id

    def _check_join(self, group: Group) -> None:
        if group.state == GroupState.PREPARING_REBALANCE:
            self.rebalance_purgatory.check_and_complete(group.join_key)

    def _maybe_forget(self, group: Group) -> None:
        """Drop an Empty group with nobody in it (why: agent.groups.coordinator's docstring)."""
        if group.state == GroupState.EMPTY and not group.members and not group.pending:
            if self.groups.get(group.group_id) is group:
                del self.groups[group.group_id]
                self._forgotten(group)
            group.state = GroupState.DEAD
            self._complete_dead_group_ops(group)

    def _complete_dead_group_ops(self, group: Group) -> None:
        """Let the operations of a group that is gone complete (with no effect)."""
        self.rebalance_purgatory.check_and_complete(group.join_key)
        self.rebalance_purgatory.check_and_complete(group.sync_key)
        for member_id in [*group.members, *group.pending]:
            self.heartbeat_purgatory.check_and_complete((group.group_id, member_id))

    # ------------------------------------------------------------------ hooks (see the module docstring)

    def _new_group(self, group_id: str) -> Group:
        """A group not in memory, about to get its first member or pending member id."""
        return Group(group_id)

    def _generation_formed(self, group: Group) -> bool:
        """A new generation formed (CompletingRebalance): whether its join answers wait (the
        hook then calls `_answer_joins`); here they go out at once."""
        return False

    def _assignment_given(self, group: Group) -> None:
        """The leader's SyncGroup set the members' assignments: here the group is Stable at once."""
        self._assignment_stored(group)

    def _members_replaced(self, group: Group) -> None:
        """A Stable group's member ids changed without a rebalance (a static member came back)."""

    def _forgotten(self, group: Group) -> None:
        """An emptied group left memory."""

    def _answer_joins(self, group: Group) -> None:
        """Answer the parked joins of the group's current generation; each member's session
        restarts from its answer (Kafka's onCompleteJoin)."""
        for m in group.members.values():
            fut = m.join_future
            m.join_future = None
            self._complete(fut, self._join_answer(group, m))
            self._heartbeat(group, m)

    # ------------------------------------------------------------------ heartbeats (sessions)

    def _heartbeat(self, group: Group, member: Member) -> None:
        """Complete the member's current heartbeat expectation and schedule the next one
        (Kafka's completeAndScheduleNextHeartbeatExpiration)."""
        key = (group.group_id, member.member_id)
        member.heartbeat_satisfied = True
        self.heartbeat_purgatory.check_and_complete(key)
        member.heartbeat_satisfied = False
        timeout = self.new_member_join_timeout_ms if member.is_new else member.session_timeout_ms
        op = DelayedHeartbeat(self, group, member.member_id, False, timeout)
        self.heartbeat_purgatory.try_complete_else_watch(op, (key,))

    def _heartbeat_satisfied(self, group: Group, member_id: str, pending: bool) -> bool:
        if not self._alive(group):
            return True
        if pending:
            return member_id not in group.pending  # it joined, or left
        member = group.members.get(member_id)
        return member is None or member.is_leaving or member.has_satisfied_heartbeat

    def _on_heartbeat_expired(self, group: Group, member_id: str, pending: bool) -> None:
        if not self._alive(group):
            return
        if pending:
            if member_id in group.pending:
                log.info(
                    "group %s: pending member %s did not join within its session", group.group_id, member_id
                )
                group.pending.discard(member_id)
                self._after_pending_removed(group)
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat:
            return
        log.info("group %s: member %s missed its session timeout, removing it", group.group_id, member_id)
        self._drop(group, member)
        self._after_member_removed(group)

    # ------------------------------------------------------------------ membership

    def _add_pending(self, group: Group, member_id: str, session_timeout_ms: int) -> None:
        """KIP-394: hand out a member id; it must join with it within one session timeout."""
        self.groups.setdefault(group.group_id, group)
        group.pending.add(member_id)
        op = DelayedHeartbeat(self, group, member_id, True, session_timeout_ms)
        self.heartbeat_purgatory.try_complete_else_watch(op, ((group.group_id, member_id),))

    def _add_member_and_rebalance(self, group: Group, member: Member) -> asyncio.Future[JoinResult]:
        self.groups.setdefault(group.group_id, group)
        group.members[member.member_id] = member
        if group.protocol_type is None or len(group.members) == 1:
            group.protocol_type = member.protocol_type
        if member.group_instance_id is not None:
            group.static[member.group_instance_id] = member.member_id
        member.is_new = True
        if group.state == GroupState.PREPARING_REBALANCE and group.initial_delay:
            group.new_member_added = True
        fut = self._await_join(member)
        self._heartbeat(group, member)
        if group.state == GroupState.PREPARING_REBALANCE:
            self._check_join(group)
        else:
            self._prepare_rebalance(group, f"new member {member.member_id} joined")
        return fut

    def _replace_static(self, group: Group, old: Member, new: Member) -> asyncio.Future[JoinResult]:
        """A static member came back with a new member id: the new id takes the old one's place."""
        self._complete(old.join_future, JoinResult(ErrorCode.fenced_instance_id, member_id=old.member_id))
        self._complete(old.sync_future, SyncResult(ErrorCode.fenced_instance_id))
        old.join_future = old.sync_future = None
        del group.members[old.member_id]
        old.is_leaving = True
        self.heartbeat_purgatory.check_and_complete((group.group_id, old.member_id))
        if old.member_id in group.pending_sync:
            group.pending_sync.discard(old.member_id)
            group.pending_sync.add(new.member_id)
        new.assignment = old.assignment
        group.members[new.member_id] = new
        assert new.group_instance_id is not None
        group.static[new.group_instance_id] = new.member_id
        was_leader = group.leader_id == old.member_id
        if was_leader:
            group.leader_id = new.member_id
        self._heartbeat(group, new)
        unchanged = old.protocols == new.protocols
        if group.state == GroupState.STABLE and unchanged:
            self._members_replaced(group)
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
        fut = self._await_join(new)
        if group.state == GroupState.PREPARING_REBALANCE:
            self._check_join(group)
        else:
            self._prepare_rebalance(group, f"static member {new.group_instance_id} rejoined")
        return fut

    def _await_join(self, member: Member) -> asyncio.Future[JoinResult]:
        old = member.join_future
        fut: asyncio.Future[JoinResult] = self._new_future()
        member.join_future = fut
        if old is not None and not old.done():  # a duplicate join: the older one is superseded
            old.set_result(JoinResult(ErrorCode.rebalance_in_progress, member_id=member.member_id))
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

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.state == GroupState.COMPLETING_REBALANCE:
            for m in group.members.values():
                m.assignment = b""
                self._answer_sync(group, m, SyncResult(ErrorCode.rebalance_in_progress))
        was_empty = group.state == GroupState.EMPTY
        group.state = GroupState.PREPARING_REBALANCE
        group.unconfirmed = group.storing_assignment = False
        if group.pending_sync:
            group.pending_sync.clear()
        self.rebalance_purgatory.check_and_complete(group.sync_key)  # the sync wait is over
        log.info(
            "group %s: preparing to rebalance (generation %d, %s)",
            group.group_id,
            group.generation_id,
            reason,
        )
        timeout_ms = group.rebalance_timeout_ms()
        op: DelayedJoin
        if was_empty and self.initial_rebalance_delay_ms > 0:
            delay = min(self.initial_rebalance_delay_ms, timeout_ms)
            group.initial_delay = True
            group.new_member_added = False
            op = InitialDelayedJoin(self, group, delay, max(timeout_ms - delay, 0))
        else:
            op = DelayedJoin(self, group, timeout_ms)
        self.rebalance_purgatory.try_complete_else_watch(op, (group.join_key,))

    def _on_initial_delay_done(self, op: InitialDelayedJoin) -> None:
        group = op.group
        if not self._alive(group) or group.state != GroupState.PREPARING_REBALANCE:
            return
        if group.new_member_added and op.remaining_ms > 0:
            # Members keep arriving: wait another initial delay, within the rebalance timeout.
            group.new_member_added = False
            delay = min(self.initial_rebalance_delay_ms, op.remaining_ms)
            nxt = InitialDelayedJoin(self, group, delay, op.remaining_ms - delay)
            self.rebalance_purgatory.try_complete_else_watch(nxt, (group.join_key,))
            return
        self._on_complete_join(group)

    def _on_complete_join(self, group: Group) -> None:
        """The join phase is over (Kafka's onCompleteJoin)."""
        if not self._alive(group) or group.state != GroupState.PREPARING_REBALANCE:
            return
        group.initial_delay = group.new_member_added = False
        for m in list(group.members.values()):
            if not m.awaiting_join and m.group_instance_id is None:
                log.info(
                    "group %s: member %s did not rejoin in time, removing it", group.group_id, m.member_id
                )
                self._drop(group, m)
        joined = [m for m in group.members.values() if m.awaiting_join]
        if not joined and group.members:
            # Only static members that did not rejoin are left: wait for them to come back
            # or for their sessions to expire (which completes this phase).
            op = DelayedJoin(self, group, group.rebalance_timeout_ms())
            self.rebalance_purgatory.try_complete_else_watch(op, (group.join_key,))
            return
        group.generation_id += 1
        if not group.members:
            group.state = GroupState.EMPTY
            group.protocol_name = None
            group.leader_id = None
            log.info("group %s: empty at generation %d", group.group_id, group.generation_id)
            self._maybe_forget(group)
            return
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members or not group.members[group.leader_id].awaiting_join:
            group.leader_id = joined[0].member_id
        group.state = GroupState.COMPLETING_REBALANCE
        log.info(
            "group %s: generation %d with %d member(s), protocol %s",
            group.group_id,
            group.generation_id,
            len(group.members),
            group.protocol_name,
        )
        for m in group.members.values():
            m.is_new = False
            group.pending_sync.add(m.member_id)
        group.unconfirmed = self._generation_formed(group)
        if not group.unconfirmed:
            self._answer_joins(group)
        op_sync = DelayedSync(self, group, group.generation_id, group.rebalance_timeout_ms())
        self.rebalance_purgatory.try_complete_else_watch(op_sync, (group.sync_key,))

    def _on_sync_expired(self, group: Group, generation_id: int) -> None:
        if not self._alive(group) or group.generation_id != generation_id:
            return
        if group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        missing = [group.members[mid] for mid in list(group.pending_sync) if mid in group.members]
        log.info(
            "group %s: %s did not send SyncGroup in time, removing them",
            group.group_id,
            ", ".join(m.member_id for m in missing),
        )
        for m in missing:
            self._drop(group, m)
        self._prepare_rebalance(group, "members did not sync")

    # ------------------------------------------------------------------ sync

    def _assignment_stored(self, group: Group) -> None:
        """The leader's assignment holds: the group is Stable, every waiting member learns its part."""
        group.storing_assignment = False
        group.state = GroupState.STABLE
        for m in group.members.values():
            self._answer_sync(group, m, self._sync_answer(group, m))

    def _synced(self, group: Group, member_id: str) -> None:
        if member_id in group.pending_sync:
            group.pending_sync.discard(member_id)
            if not group.pending_sync:
                self.rebalance_purgatory.check_and_complete(group.sync_key)

    def _answer_sync(self, group: Group, member: Member, result: SyncResult) -> None:
        """Answer a parked SyncGroup; the member's session restarts from here (as Kafka's
        propagateAssignment does: its expiry may have been ignored while it waited)."""
        fut = member.sync_future
        member.sync_future = None
        if self._complete(fut, result):
            self._heartbeat(group, member)

    @staticmethod
    def _sync_answer(group: Group, member: Member) -> SyncResult:
        return SyncResult(ErrorCode.none, member.assignment, group.protocol_type, group.protocol_name)

    # ------------------------------------------------------------------ removal

    def _drop(self, group: Group, member: Member) -> None:
        """Forget a member (no state change); whoever waits on it is told UNKNOWN_MEMBER_ID."""
        group.members.pop(member.member_id, None)
        group.pending_sync.discard(member.member_id)
        if member.group_instance_id is not None and group.static.get(member.group_instance_id) == (
            member.member_id
        ):
            del group.static[member.group_instance_id]
        self._complete(member.join_future, JoinResult(ErrorCode.unknown_member_id, member.member_id))
        self._complete(member.sync_future, SyncResult(ErrorCode.unknown_member_id))
        member.join_future = member.sync_future = None
        member.is_leaving = True
        self.heartbeat_purgatory.check_and_complete((group.group_id, member.member_id))

    def _after_member_removed(self, group: Group) -> None:
        """Kafka's removeMemberAndUpdateGroup, after the member is gone."""
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, "a member left")
        elif group.state == GroupState.PREPARING_REBALANCE:
            self._check_join(group)

    def _after_pending_removed(self, group: Group) -> None:
        if group.state == GroupState.PREPARING_REBALANCE:
            self._check_join(group)
        elif group.state == GroupState.EMPTY:
            self._maybe_forget(group)
