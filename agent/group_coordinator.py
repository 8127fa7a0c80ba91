"""The classic consumer-group protocol (JoinGroup / SyncGroup / Heartbeat / LeaveGroup).

One `GroupCoordinator` per agent holds, in memory, the groups this agent coordinates
(the agent chosen for a group id by rendezvous hashing, `LiveAgents.coordinator_for_group`).
Committed offsets are not kept here: they are durable in metadata. So is every group state
a member can learn (a new generation, the leader's assignment), stored under the group's
coordinator lease before the answers go out (agent.group_fencing): if the coordinator moves
(an agent joins or leaves, or dies), clients get NOT_COORDINATOR, find the new one, and
go on in their generation there, as after a coordinator failover in Kafka (`load_group`).

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

Purgatory callbacks run on the event loop (the coordinator is loop-confined, like the
purgatory): `start()` starts both purgatories' drivers on the running loop, `close()`
answers every waiter with NOT_COORDINATOR and stops them. Unit tests pass purgatories on a
manual clock and drive them with `advance_clock()`.

Empty groups are forgotten at once. An Empty group has no member, so the only state it
still holds is its generation number and protocol type, and neither matters: member ids
are random, so no stale member can be mistaken for a current one whatever the generation,
and a new generation starts at 1 exactly as for a new group (the initial rebalance delay
applies to both alike). What users expect to outlive the members, the committed offsets,
is in metadata, and the handlers look there for groups not in memory: ListGroups lists
every group with committed offsets that this agent coordinates (state Empty),
DescribeGroups reports such a group Empty (Dead when it has no offsets either), and
DeleteGroups / OffsetDelete accept it. Kafka differs only in keeping an Empty group
without offsets around until its next offsets-cleanup pass; forgetting it at once means
memory never grows with groups that came and went.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from agent.group_fencing import GroupFence, StoredGroup, encode_group_state
from agent.group_model import (
    Group,
    GroupDescription,
    GroupState,
    JoinMember,
    JoinResult,
    LeaveRequest,
    Member,
    MemberDescription,
    SyncResult,
)
from agent.purgatory import DelayedOperation, DelayedOperationPurgatory

if TYPE_CHECKING:
    from agent.config import AgentConfig
    from agent.context import AgentContext

log = logging.getLogger(__name__)

GROUP_COORDINATOR = "group_coordinator"

# How long a new member's first JoinGroup may wait before the member is dropped (Kafka's
# GroupCoordinator.NewMemberJoinTimeoutMs, KIP-394): a client that gave up on a long join
# phase and retries must not leave defunct members holding the group.
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000


# ---------------------------------------------------------------------- delayed operations


class DelayedHeartbeat(DelayedOperation):
    """A member's session (or a pending member id's wait for its join), Kafka's DelayedHeartbeat."""

    __slots__ = ("coordinator", "group", "member_id", "pending")

    def __init__(
        self, coordinator: GroupCoordinator, group: Group, member_id: str, pending: bool, delay_ms: int
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

    def __init__(self, coordinator: GroupCoordinator, group: Group, delay_ms: int) -> None:
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

    def __init__(self, coordinator: GroupCoordinator, group: Group, delay_ms: int, remaining_ms: int) -> None:
        super().__init__(coordinator, group, delay_ms)
        self.remaining_ms = remaining_ms

    def try_complete(self) -> bool:
        return not self.coordinator._alive(self.group)

    def on_complete(self) -> None:
        self.coordinator._on_initial_delay_done(self)


class DelayedSync(DelayedOperation):
    """Every member of `generation_id` must send SyncGroup before the rebalance timeout."""

    __slots__ = ("coordinator", "group", "generation_id")

    def __init__(
        self, coordinator: GroupCoordinator, group: Group, generation_id: int, delay_ms: int
    ) -> None:
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


# ---------------------------------------------------------------------- the coordinator


class GroupCoordinator:
    """All groups this agent coordinates. Single-threaded: call it from one event loop."""

    def __init__(
        self,
        *,
        initial_rebalance_delay_ms: int = 3_000,
        min_session_timeout_ms: int = 6_000,
        max_session_timeout_ms: int = 1_800_000,
        new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS,
        heartbeat_purgatory: DelayedOperationPurgatory[DelayedHeartbeat] | None = None,
        rebalance_purgatory: DelayedOperationPurgatory[DelayedOperation] | None = None,
        fence: GroupFence | None = None,
    ) -> None:
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.new_member_join_timeout_ms = new_member_join_timeout_ms
        self.heartbeat_purgatory: DelayedOperationPurgatory[DelayedHeartbeat] = (
            heartbeat_purgatory if heartbeat_purgatory is not None else DelayedOperationPurgatory("Heartbeat")
        )
        self.rebalance_purgatory: DelayedOperationPurgatory[DelayedOperation] = (
            rebalance_purgatory if rebalance_purgatory is not None else DelayedOperationPurgatory("Rebalance")
        )
        self.groups: dict[str, Group] = {}
        # Fencing (agent.group_fencing): None in unit tests of the bare state machine.
        self.fence = fence
        if fence is not None:
            fence.coordinator = self
        self._base_generation: dict[str, int] = {}  # loaded empty groups: their last generation
        self._tasks: set[asyncio.Task[None]] = set()

    @classmethod
    def from_config(cls, config: AgentConfig, fence: GroupFence | None = None) -> GroupCoordinator:
        return cls(
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
            fence=fence,
        )

    @classmethod
    def from_context(cls, ctx: AgentContext) -> GroupCoordinator:
        """The agent's coordinator, fenced by leases in metadata."""
        config = ctx.config
        fence = GroupFence(
            ctx.metadata,
            config.agent_id,
            ttl_ms=config.group_lease_ttl_ms,
            renew_interval_ms=config.group_lease_renew_interval_ms,
            owns=lambda group_id: owns_group(ctx, group_id),
            monotonic_ms=lambda: ctx.clock.monotonic() * 1000.0,
        )
        return cls.from_config(config, fence)

    def start(self) -> None:
        """Drive both purgatories (and lease renewals) from the running event loop."""
        self.heartbeat_purgatory.start()
        self.rebalance_purgatory.start()
        if self.fence is not None:
            self.fence.start()

    async def close(self) -> None:
        """Answer every waiter with NOT_COORDINATOR, forget every group, stop the purgatories."""
        groups = list(self.groups.values())
        self.groups.clear()
        for group in groups:
            group.state = GroupState.DEAD
            for m in group.members.values():
                self._complete(m.join_future, JoinResult(ErrorCode.not_coordinator, m.member_id))
                self._complete(m.sync_future, SyncResult(ErrorCode.not_coordinator))
                m.join_future = m.sync_future = None
            self._complete_dead_group_ops(group)
        if self.fence is not None:
            await self.fence.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.heartbeat_purgatory.shutdown()
        await self.rebalance_purgatory.shutdown()

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
        """Drop an Empty group with nobody in it (see the module docstring)."""
        if group.state == GroupState.EMPTY and not group.members and not group.pending:
            if self.groups.get(group.group_id) is group:
                del self.groups[group.group_id]
                if self.fence is not None:
                    self.fence.forgotten(group.group_id, encode_group_state(group))
            group.state = GroupState.DEAD
            self._complete_dead_group_ops(group)

    def _complete_dead_group_ops(self, group: Group) -> None:
        """Let the operations of a group that is gone complete (with no effect)."""
        self.rebalance_purgatory.check_and_complete(group.join_key)
        self.rebalance_purgatory.check_and_complete(group.sync_key)
        for member_id in [*group.members, *group.pending]:
            self.heartbeat_purgatory.check_and_complete((group.group_id, member_id))

    # ------------------------------------------------------------------ fencing

    def drop_group(self, group_id: str) -> None:
        """Forget a group whose lease this agent lost or gave up: whoever waits is told
        NOT_COORDINATOR and finds the coordinator again (then rejoins)."""
        self._base_generation.pop(group_id, None)
        group = self.groups.pop(group_id, None)
        if group is None:
            return
        log.info("group %s: dropped (generation %d, not the coordinator)", group_id, group.generation_id)
        group.state = GroupState.DEAD
        for m in group.members.values():
            self._complete(m.join_future, JoinResult(ErrorCode.not_coordinator, m.member_id))
            self._complete(m.sync_future, SyncResult(ErrorCode.not_coordinator))
            m.join_future = m.sync_future = None
        self._complete_dead_group_ops(group)

    def load_group(self, group_id: str, stored: StoredGroup | None) -> None:
        """A lease was just acquired: take over the group's last stored generation, as Kafka's
        coordinator loads a group on failover (GroupMetadataManager.loadGroup, onGroupLoaded).

        Stored with the leader's assignment: the group is Stable at that generation, with
        its leader, members, protocols and assignments, so the members' heartbeats, commits,
        syncs and rejoins are answered as by the previous coordinator, and nobody rebalances
        because the coordinator moved. Stored at the end of a join phase (the previous
        coordinator died before the leader's assignment was stored): CompletingRebalance at
        that generation; a member that lost its join answer gets it again, the leader's
        SyncGroup completes it. Either way every member's session restarts now."""
        self.drop_group(group_id)
        if stored is None:
            return
        if not stored.members:
            self._base_generation[group_id] = stored.generation_id
            return
        group = Group(
            group_id,
            state=GroupState.STABLE if stored.assigned else GroupState.COMPLETING_REBALANCE,
            protocol_type=stored.protocol_type,
            protocol_name=stored.protocol_name,
            generation_id=stored.generation_id,
        )
        for sm in stored.members:
            group.members[sm.member_id] = Member(
                sm.member_id,
                sm.instance_id,
                sm.client_id,
                sm.client_host,
                sm.session_timeout_ms,
                sm.rebalance_timeout_ms,
                stored.protocol_type or "",
                list(sm.protocols),
                assignment=sm.assignment,
            )
            if sm.instance_id is not None:
                group.static[sm.instance_id] = sm.member_id
        leader = stored.leader_id
        group.leader_id = leader if leader in group.members else next(iter(group.members))
        self.groups[group_id] = group
        log.info(
            "group %s: taken over at generation %d (%s) with %d member(s)",
            group_id,
            group.generation_id,
            group.state.value,
            len(group.members),
        )
        for m in group.members.values():
            self._heartbeat(group, m)
        if group.state == GroupState.COMPLETING_REBALANCE:
            group.pending_sync.update(group.members)
            op = DelayedSync(self, group, group.generation_id, group.rebalance_timeout_ms())
            self.rebalance_purgatory.try_complete_else_watch(op, (group.sync_key,))

    async def _confirm_generation(self, group: Group, generation_id: int) -> None:
        """Answer the joins of a new generation once metadata confirmed it (see
        `_on_complete_join`); drop the group if the lease is lost."""
        assert self.fence is not None
        ok = await self.fence.confirm(group.group_id, encode_group_state(group))
        if not self._alive(group):
            return
        if not ok:
            self.fence.lose(group.group_id, release=False)
            return
        if group.generation_id != generation_id or not group.unconfirmed:
            return  # it moved on: the joins still waiting belong to the next phase
        group.unconfirmed = False
        for m in group.members.values():
            fut = m.join_future
            m.join_future = None
            self._complete(fut, self._join_answer(group, m))

    async def _store_assignment(self, group: Group, generation_id: int) -> None:
        """Answer the SyncGroups once metadata stored the leader's assignment (see `sync`);
        drop the group if the lease is lost (as Kafka answers the syncs with the store's error)."""
        assert self.fence is not None

        def current() -> bool:
            return (
                self._alive(group)
                and group.generation_id == generation_id
                and group.state == GroupState.COMPLETING_REBALANCE
                and group.storing_assignment
            )

        if not current():
            return  # it rebalanced meanwhile: the syncs were answered REBALANCE_IN_PROGRESS
        ok = await self.fence.confirm(group.group_id, encode_group_state(group, assigned=True))
        if self._alive(group) and not ok:
            self.fence.lose(group.group_id, release=False)
        elif ok and current():
            self._assignment_stored(group)

    async def _store_stable(self, group: Group, generation_id: int) -> None:
        """Store a Stable group whose membership changed without a rebalance (a static member
        came back with a new member id); drop the group if the lease is lost."""
        assert self.fence is not None
        if not self._alive(group) or group.state != GroupState.STABLE or group.generation_id != generation_id:
            return  # it moved on: the next generation is stored when it forms
        ok = await self.fence.confirm(group.group_id, encode_group_state(group, assigned=True))
        if self._alive(group) and not ok:
            self.fence.lose(group.group_id, release=False)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_event_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

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
            # registered once it holds a member or a pending id
            group = Group(group_id, generation_id=self._base_generation.pop(group_id, 0))
        names = [n for n, _ in protocols]
        if not group.supports(protocol_type, names):
            return now(ErrorCode.inconsistent_group_protocol)
        protos = [(n, bytes(d)) for n, d in protocols]

        def new_member(mid: str) -> Member:
            return Member(
                mid,
                group_instance_id,
                client_id,
                client_host,
                session_timeout_ms,
                rebalance_timeout_ms,
                protocol_type,
                protos,
            )

        if not member_id:
            member = new_member(f"{client_id or 'member'}-{uuid.uuid4()}")
            if group_instance_id is not None:
                old_id = group.static.get(group_instance_id)
                if old_id is not None and old_id in group.members:
                    return self._replace_static(group, group.members[old_id], member)
                return self._add_member_and_rebalance(group, member)
            if require_known_member_id:
                self._add_pending(group, member.member_id, session_timeout_ms)
                return now(ErrorCode.member_id_required, member.member_id)
            return self._add_member_and_rebalance(group, member)
        if member_id in group.pending:
            group.pending.discard(member_id)  # its pending DelayedHeartbeat completes below
            return self._add_member_and_rebalance(group, new_member(member_id))
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
            fut = self._await_join(existing)
            self._heartbeat(group, existing)
            self._check_join(group)
            return fut
        if group.state == GroupState.COMPLETING_REBALANCE and group.unconfirmed and not changed:
            # The generation is being confirmed in metadata: this join gets its answer then.
            return self._await_join(existing)
        if group.state == GroupState.COMPLETING_REBALANCE and not changed:
            # It lost the join answer: say it again.
            self._heartbeat(group, existing)
            return self._new_future(self._join_answer(group, existing))
        if group.state == GroupState.STABLE and not changed and member_id != group.leader_id:
            # A follower with nothing new: the current generation stands (a leader's join
            # always rebalances, so that it can react to changes its metadata does not show).
            self._heartbeat(group, existing)
            return self._new_future(self._join_answer(group, existing))
        if group.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            existing.protocols = protos
            fut = self._await_join(existing)
            self._heartbeat(group, existing)
            self._prepare_rebalance(group, f"member {member_id} rejoined")
            return fut
        return now(ErrorCode.unknown_member_id)

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
            if self.fence is not None:
                self._spawn(self._store_stable(group, group.generation_id))
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
        # With fencing, nobody learns the generation before metadata confirmed this agent
        # still holds the group's lease (and stored the generation for a next holder).
        group.unconfirmed = self.fence is not None
        for m in group.members.values():
            if not group.unconfirmed:
                fut = m.join_future
                m.join_future = None
                self._complete(fut, self._join_answer(group, m))
            m.is_new = False
            self._heartbeat(group, m)
            group.pending_sync.add(m.member_id)
        if group.unconfirmed:
            self._spawn(self._confirm_generation(group, group.generation_id))
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
            self._synced(group, member_id)
            self._heartbeat(group, member)
            return self._new_future(self._sync_answer(group, member))
        if group.state != GroupState.COMPLETING_REBALANCE:
            return now(ErrorCode.unknown_member_id)
        fut: asyncio.Future[SyncResult] = self._new_future()
        self._complete(member.sync_future, SyncResult(ErrorCode.rebalance_in_progress))
        member.sync_future = fut
        self._heartbeat(group, member)
        if member_id == group.leader_id and not group.storing_assignment:
            given = {mid: bytes(a) for mid, a in assignments}
            for m in group.members.values():
                m.assignment = given.get(m.member_id, b"")
            if self.fence is None:
                self._assignment_stored(group)
            else:
                # As Kafka's storeGroup: the assignment is stored (with the lease checked)
                # before anyone learns it, so a next coordinator takes over this generation.
                group.storing_assignment = True
                self._spawn(self._store_assignment(group, group.generation_id))
        self._synced(group, member_id)
        return fut

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

    # ------------------------------------------------------------------ heartbeat, leave, removal

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
        self._heartbeat(group, member)
        if group.state == GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, group_id: str, members: Sequence[LeaveRequest]) -> list[ErrorCode]:
        group = self.groups.get(group_id)
        if group is None:
            return [ErrorCode.unknown_member_id for _ in members]
        out: list[ErrorCode] = []
        removed_member = removed_pending = False
        for req in members:
            member_id = req.member_id
            if not member_id and req.group_instance_id is not None:
                member_id = group.static.get(req.group_instance_id, "")
            elif self._fenced(group, member_id, req.group_instance_id):
                out.append(ErrorCode.fenced_instance_id)
                continue
            if member_id in group.pending:
                group.pending.discard(member_id)
                self.heartbeat_purgatory.check_and_complete((group.group_id, member_id))
                removed_pending = True
                out.append(ErrorCode.none)
                continue
            member = group.members.get(member_id)
            if member is None:
                out.append(ErrorCode.unknown_member_id)
                continue
            log.info("group %s: member %s left", group.group_id, member_id)
            self._drop(group, member)
            removed_member = True
            out.append(ErrorCode.none)
        if removed_member:
            self._after_member_removed(group)
        elif removed_pending:
            self._after_pending_removed(group)
        return out

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
        self._heartbeat(group, member)  # a commit is as good as a heartbeat, as in Kafka
        return ErrorCode.none

    def list_groups(self) -> list[Group]:
        """The groups in memory (the ListGroups handler adds those known only from metadata)."""
        return [g for g in self.groups.values() if g.state != GroupState.DEAD]

    def describe(self, group_id: str) -> GroupDescription | None:
        """The group as DescribeGroups shows it; None if it is not in memory (the handler then
        reports it Empty if it has committed offsets, else Dead)."""
        group = self.groups.get(group_id)
        if group is None:
            return None
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
        """No member: the group is Empty or not in memory (maybe known from its offsets)."""
        group = self.groups.get(group_id)
        return group is None or (group.state == GroupState.EMPTY and not group.members)

    def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups: only an empty group (or one this agent does not hold) can go."""
        if not self.is_empty(group_id):
            return ErrorCode.non_empty_group
        group = self.groups.pop(group_id, None)
        if group is not None:
            if self.fence is not None:
                self.fence.forgotten(group_id, encode_group_state(group))
            group.state = GroupState.DEAD
            self._complete_dead_group_ops(group)  # pending member ids
            group.pending.clear()
        return ErrorCode.none


# ---------------------------------------------------------------------- handler helpers


def coordinator(ctx: AgentContext) -> GroupCoordinator:
    """The agent's coordinator (created and started on first use if the runtime did not
    register one; call it from a handler, i.e. on the running loop)."""
    found = ctx.services.get(GROUP_COORDINATOR)
    if found is None:
        found = ctx.services[GROUP_COORDINATOR] = GroupCoordinator.from_context(ctx)
        found.start()
    assert isinstance(found, GroupCoordinator)
    return found


def owns_group(ctx: AgentContext, group_id: str) -> bool:
    """Whether this agent coordinates `group_id` (else the answer is NOT_COORDINATOR)."""
    return ctx.agents.coordinator_for_group(group_id).node_id == ctx.agents.self_node_id


async def ensure_coordinator(ctx: AgentContext, group_id: str) -> ErrorCode:
    """Whether this agent may serve a request for `group_id` now: NONE, NOT_COORDINATOR
    (routed elsewhere, or another agent holds its lease) or COORDINATOR_NOT_AVAILABLE
    (metadata out of reach). Acquires the group's lease if needed (agent.group_fencing)."""
    fence = coordinator(ctx).fence
    if fence is None:
        return ErrorCode.none if owns_group(ctx, group_id) else ErrorCode.not_coordinator
    return await fence.ensure(group_id)
