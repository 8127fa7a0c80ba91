"""The classic consumer-group protocol (JoinGroup / SyncGroup / Heartbeat / LeaveGroup, and
the group checks of OffsetCommit and the admin requests): `GroupCoordinator`, what the
handlers call, and the handlers' helpers (`coordinator`, `owns_group`, `ensure_coordinator`).

One `GroupCoordinator` per agent holds, in memory, the groups this agent coordinates (the
holder of a group's lease; a vacant group is taken by the rendezvous choice in the client's
zone, agent.groups.placement). It is built in layers, one module each:

- `agent.groups.rebalance`: the state machine (states, join and sync phases, sessions, on
  the two purgatories), Kafka's GroupMetadata and the rebalance half of its GroupCoordinator;
- `agent.groups.persistence`: every group state a member can learn (a new generation, the
  leader's assignment) is stored in metadata under the group's coordinator lease before
  the answers go out, and a next coordinator takes the group over from it, as Kafka's
  coordinator loads a group on failover: if the coordinator moves (an agent joins or
  leaves, or dies), clients get NOT_COORDINATOR, find the new one, and go on in their
  generation there;
- `agent.groups.fencing`: the leases (acquired on a group's first request, renewed in
  batches, released when the group leaves the agent);
- `agent.groups.placement`: which agent coordinates a group for a client of a zone;
- this module: the requests, validated as Kafka's GroupCoordinator does (unknown member,
  illegal generation, fenced instance id, inconsistent protocol, session timeout bounds).

Committed offsets are not kept here: they are durable in metadata.

Purgatory callbacks run on the event loop (the coordinator is loop-confined, like the
purgatory): `start()` starts both purgatories' drivers (and the lease renewals) on the
running loop, `close()` answers every waiter with NOT_COORDINATOR and stops them. Unit tests
pass purgatories on a manual clock and drive them with `advance_clock()`.

Empty groups are forgotten at once. An Empty group has no member, so the only state it
still holds is its generation number and protocol type, and neither matters: member ids
are random, so no stale member can be mistaken for a current one whatever the generation
(with fencing the generation goes on anyway: it is stored when the group is forgotten).
What users expect to outlive the members, the committed offsets, is in metadata, and the
handlers look there for groups not in memory: ListGroups lists every group with committed
offsets that this agent coordinates (state Empty), DescribeGroups reports such a group
Empty (Dead when it has no offsets either), and DeleteGroups / OffsetDelete accept it.
Kafka differs only in keeping an Empty group without offsets around until its next
offsets-cleanup pass; forgetting it at once means memory never grows with groups that came
and went.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode
from skiff.agent.groups.consumer_model import ConsumerGroup, TopicView
from skiff.agent.groups.consumer_protocol import DEFAULT_HEARTBEAT_INTERVAL_MS, DEFAULT_SESSION_TIMEOUT_MS
from skiff.agent.groups.consumer_requests import HeartbeatResult, MemberRequest
from skiff.agent.groups.fencing import GroupFence
from skiff.agent.groups.mixed import ClassicJoin, classic_topics
from skiff.agent.groups.model import (
    Group,
    GroupDescription,
    GroupState,
    JoinResult,
    LeaveRequest,
    Member,
    MemberDescription,
    SyncResult,
)
from skiff.agent.groups.persistence import GroupPersistence
from skiff.agent.groups.placement import GroupPlacement
from skiff.agent.groups.rebalance import NEW_MEMBER_JOIN_TIMEOUT_MS, DelayedHeartbeat
from skiff.agent.purgatory import DelayedOperation, DelayedOperationPurgatory

if TYPE_CHECKING:
    from skiff.agent.agent_registry import LiveAgents
    from skiff.agent.config import AgentConfig
    from skiff.agent.context import Clock
    from skiff.metadata.wire.operations import AgentClient

log = logging.getLogger(__name__)


class GroupCoordinator(GroupPersistence):
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
        consumer_session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        consumer_heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
    ) -> None:
        super().__init__(
            initial_rebalance_delay_ms=initial_rebalance_delay_ms,
            new_member_join_timeout_ms=new_member_join_timeout_ms,
            heartbeat_purgatory=heartbeat_purgatory,
            rebalance_purgatory=rebalance_purgatory,
            fence=fence,
            consumer_session_timeout_ms=consumer_session_timeout_ms,
            consumer_heartbeat_interval_ms=consumer_heartbeat_interval_ms,
        )
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms

    @classmethod
    def from_config(cls, config: AgentConfig, fence: GroupFence | None = None) -> GroupCoordinator:
        return cls(
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
            fence=fence,
            consumer_session_timeout_ms=config.group_consumer_session_timeout_ms,
            consumer_heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
        )

    @classmethod
    def fenced(
        cls, config: AgentConfig, metadata: AgentClient, agents: LiveAgents, clock: Clock
    ) -> GroupCoordinator:
        """The agent's coordinator, fenced by leases in metadata; it coordinates the groups
        whose lease it holds, and takes the vacant ones placed on it (agent.groups.placement)."""

        def monotonic_ms() -> float:
            return clock.monotonic() * 1000.0

        fence = GroupFence(
            metadata,
            config.agent_id,
            ttl_ms=config.group_lease_ttl_ms,
            renew_interval_ms=config.group_lease_renew_interval_ms,
            # A group stays with its lease holder (agent.groups.placement) while it is ready.
            owns=lambda _group_id: agents.self_ready,
            monotonic_ms=monotonic_ms,
            placement=GroupPlacement(metadata, agents, monotonic_ms=monotonic_ms),
        )
        return cls.from_config(config, fence)

    @property
    def placement(self) -> GroupPlacement | None:
        """Where groups are coordinated (None without fencing: hashed, `LiveAgents`)."""
        return self.fence.placement if self.fence is not None else None

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
        await self._stop_storing()
        await self.heartbeat_purgatory.shutdown()
        await self.rebalance_purgatory.shutdown()

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
        view: TopicView | None = None,
    ) -> asyncio.Future[JoinResult]:
        """JoinGroup. The future completes when the join phase ends (or at once on error).
        In a consumer-protocol group (a mixed group, agent.groups.mixed) the member is served
        by the consumer group: `view` has the topics its subscription names."""

        def now(error: ErrorCode, mid: str = member_id) -> asyncio.Future[JoinResult]:
            return self._new_future(JoinResult(error, member_id=mid))

        if not group_id:
            return now(ErrorCode.invalid_group_id)
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            return now(ErrorCode.invalid_session_timeout)
        if rebalance_timeout_ms <= 0:
            rebalance_timeout_ms = session_timeout_ms
        mixed = self.consumer.groups.get(group_id)
        if mixed is not None:
            if view is None:  # it became a consumer group while the handler looked up topics
                return now(ErrorCode.coordinator_not_available)
            req = ClassicJoin(
                member_id,
                group_instance_id,
                protocol_type,
                tuple((n, bytes(d)) for n, d in protocols),
                session_timeout_ms,
                rebalance_timeout_ms,
                client_id,
                client_host,
                require_known_member_id,
            )
            return self._stored_then(mixed, self.classic_members.join(mixed, req, view))
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return now(ErrorCode.unknown_member_id)
            # registered once it holds a member or a pending id
            group = self._new_group(group_id)
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

    def _stored_then(self, group: ConsumerGroup, result: JoinResult) -> asyncio.Future[JoinResult]:
        """The answer once the consumer group is stored under its lease (NOT_COORDINATOR if
        the lease was lost meanwhile)."""

        async def answer() -> JoinResult:
            if result.error != ErrorCode.none or await self.consumer.flush(group):
                return result
            return JoinResult(ErrorCode.not_coordinator, result.member_id)

        return asyncio.ensure_future(answer())

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

        mixed = self.consumer.groups.get(group_id)
        if mixed is not None:
            return self._new_future(
                self.classic_members.sync(
                    mixed, generation_id, member_id, group_instance_id, protocol_type, protocol_name
                )
            )
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
            self._assignment_given(group)  # Stable, now or once stored (agent.groups.persistence)
        self._synced(group, member_id)
        return fut

    # ------------------------------------------------------------------ heartbeat, leave

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        mixed = self.consumer.groups.get(group_id)
        if mixed is not None:
            return self.classic_members.heartbeat(mixed, generation_id, member_id, group_instance_id)
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
        mixed = self.consumer.groups.get(group_id)
        if mixed is not None:
            codes = self.classic_members.leave(mixed, members)
            if self.consumer.groups.get(group_id) is mixed:
                self.consumer.store_later(mixed)  # nobody waits on a leave: store in the background
            return codes
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

    # ------------------------------------------------------------------ offsets, admin

    def validate_commit(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        *,
        api_version: int = 9,
        partitions: Sequence[tuple[str, int]] = (),
    ) -> ErrorCode:
        """May this OffsetCommit proceed? (generation -1 with no member id: a simple commit;
        in a consumer-protocol group the generation is the member epoch: STALE_MEMBER_EPOCH.)"""
        consumer = self.consumer.validate_commit(
            group_id,
            member_id,
            generation_id,
            api_version=api_version,
            transactional=False,
            partitions=partitions,
        )
        if consumer is not None:
            return consumer
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

    def validate_txn_commit(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        """May this TxnOffsetCommit (v3+, KIP-447) proceed? Kafka's validateOffsetCommit with
        isTransactional: generation -1, no member id and no instance id skip the check (older
        producers send none); otherwise FENCED_INSTANCE_ID, UNKNOWN_MEMBER_ID (a member id the
        group does not know), ILLEGAL_GENERATION. No REBALANCE_IN_PROGRESS, no heartbeat. A
        group not in memory is Kafka's new Empty group at generation 0. In a consumer-protocol
        group the generation is the member epoch (ILLEGAL_GENERATION if it is not the member's)."""
        if generation_id < 0 and not member_id and group_instance_id is None:
            return ErrorCode.none
        consumer = self.consumer.validate_commit(
            group_id, member_id, generation_id, api_version=9, transactional=True
        )
        if consumer is not None:
            return consumer
        group = self.groups.get(group_id)
        if group is not None and group.state == GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if group is not None and self._fenced(group, member_id, group_instance_id):
            return ErrorCode.fenced_instance_id
        if member_id and (group is None or member_id not in group.members):
            return ErrorCode.unknown_member_id
        if generation_id != (0 if group is None else group.generation_id):
            return ErrorCode.illegal_generation
        return ErrorCode.none

    def list_groups(self) -> list[Group | ConsumerGroup]:
        """The groups in memory, of both protocols (the ListGroups handler adds those known
        only from metadata)."""
        classic: list[Group | ConsumerGroup] = [g for g in self.groups.values() if g.state != GroupState.DEAD]
        return classic + list(self.consumer.groups.values())

    def wanted_topics(self, req: MemberRequest) -> tuple[set[str], bool]:
        """The topics a ConsumerGroupHeartbeat's handler must look up: the consumer group's,
        and those a classic group it would upgrade subscribes to or was assigned."""
        names, listing = self.consumer.wanted_topics(req)
        classic = self.groups.get(req.group_id)
        if classic is not None and req.member_epoch == 0:
            names |= classic_topics(classic)
        return names, listing

    def consumer_heartbeat(self, req: MemberRequest, view: TopicView) -> HeartbeatResult:
        """ConsumerGroupHeartbeat (agent.groups.consumer_protocol). A member joining a classic
        group with members converts it to a consumer group whose classic members keep their
        protocol (the online upgrade, agent.groups.mixed); until the group can be converted
        (it is rebalancing) the member gets COORDINATOR_NOT_AVAILABLE, retriable. An empty
        classic group is simply replaced (its committed offsets stay)."""
        classic = self.groups.get(req.group_id)
        if classic is not None and req.member_epoch >= 0:
            if self.is_empty(req.group_id) and not classic.pending:
                self.delete(req.group_id)
            elif req.member_epoch == 0:  # a member joining: Kafka converts only then
                refusal = self._upgrade(classic, view)
                if refusal is not None:
                    return HeartbeatResult(
                        ErrorCode.coordinator_not_available,
                        f"Classic group {req.group_id} cannot be upgraded now: {refusal}.",
                        req.member_id,
                    )
        result = self.consumer.heartbeat(req, view)
        group = self.consumer.groups.get(req.group_id)
        if group is not None and group.only_classic():
            self._downgrade(group)  # the member that converted the group was refused
        return result

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
        consumer = self.consumer.groups.get(group_id)
        if consumer is not None and consumer.members:
            return False
        group = self.groups.get(group_id)
        return group is None or (group.state == GroupState.EMPTY and not group.members)

    def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups: only an empty group (or one this agent does not hold) can go."""
        if not self.is_empty(group_id) or not self.consumer.delete(group_id):
            return ErrorCode.non_empty_group
        group = self.groups.pop(group_id, None)
        if group is not None:
            self._forgotten(group)
            group.state = GroupState.DEAD
            self._complete_dead_group_ops(group)  # pending member ids
            group.pending.clear()
        return ErrorCode.none
