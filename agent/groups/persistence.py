"""What a fenced group coordinator stores in metadata under the group's lease, and how a
next coordinator takes a group over from it: `GroupPersistence`, between the state machine
(`agent.groups.rebalance`) and the handler-facing `agent.groups.coordinator`; the leases
themselves are `agent.groups.fencing`.

Every group state a member can learn is stored first, with the lease renewed and checked
(holder, epoch) in the same conditional UPDATE (`GroupFence.confirm`); if that fails the
lease is lost, the group is dropped and waiters get NOT_COORDINATOR:

- a new generation, before its join answers (`_generation_formed`; stored without
  assignments), so no generation number is ever handed out twice;
- the leader's assignment, before the SyncGroup answers (`_assignment_given`; as Kafka's
  storeGroup in doSyncGroup), so a next coordinator knows who owns what;
- a static member's new member id, when it came back without a rebalance (in the background:
  a stale id only makes the member rejoin);
- an emptied group's last generation, when it is forgotten (then the lease is released), so
  the next generation goes on from there.

Takeover (`load_group`, when a lease is acquired), as Kafka's coordinator loads a group when
it becomes the leader of its `__consumer_offsets` partition (GroupMetadataManager.loadGroup,
GroupCoordinator.onGroupLoaded): stored with the leader's assignment, the group is Stable at
that generation, with its leader, members, protocols and assignments, so the members'
heartbeats, commits, syncs and rejoins are answered as by the previous coordinator and
nobody rebalances because the coordinator moved; stored at the end of a join phase (the
previous coordinator died before the leader's assignment was stored), it is
CompletingRebalance at that generation: a member that lost its join answer gets it again and
the leader's SyncGroup completes it. Either way every member's session restarts at the load.
A later rebalance waits, as always, for every member to rejoin or expire, so members of the
previous coordinator's generation give up their partitions (eager) or declare them
(cooperative) before anyone else is given them.

`group_state` JSON: `{"generation": int, "protocol_type": str|null, "protocol": str|null,
"leader": str|null, "assigned": bool, "members": [{"id", "instance", "client_id",
"client_host", "session_ms", "rebalance_ms", "protocols": [[name, base64]], "assignment":
base64}]}`; `assigned`: stored with the leader's assignment (else the assignments are
empty). Kafka stores only the chosen protocol's metadata; all of them are kept here, so a
member rejoining with unchanged metadata after a takeover does not rebalance.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode
from skiff.agent.groups.consumer_model import ConsumerGroup, TopicView
from skiff.agent.groups.consumer_persistence import is_consumer_state
from skiff.agent.groups.consumer_protocol import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
    ConsumerGroups,
)
from skiff.agent.groups.mixed import ClassicMembers, to_classic_group, to_consumer_group, upgrade_refusal
from skiff.agent.groups.model import Group, GroupState, JoinResult, Member, SyncResult
from skiff.agent.groups.rebalance import DelayedSync, GroupRebalancer

if TYPE_CHECKING:
    from skiff.agent.groups.fencing import GroupFence

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoredMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes


@dataclass(frozen=True)
class StoredGroup:
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str | None
    assigned: bool  # stored with the leader's assignment (Stable), else at the end of a join phase
    members: tuple[StoredMember, ...]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def encode_group_state(group: Group, *, assigned: bool = False) -> str:
    """The group as a next coordinator loads it; `assigned`: the members' assignments are
    the leader's for this generation (stored at its SyncGroup, before anyone learns them)."""
    return json.dumps(
        {
            "generation": group.generation_id,
            "protocol_type": group.protocol_type,
            "protocol": group.protocol_name,
            "leader": group.leader_id,
            "assigned": assigned,
            "members": [
                {
                    "id": m.member_id,
                    "instance": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "session_ms": m.session_timeout_ms,
                    "rebalance_ms": m.rebalance_timeout_ms,
                    "protocols": [[name, _b64(data)] for name, data in m.protocols],
                    "assignment": _b64(m.assignment) if assigned else "",
                }
                for m in group.members.values()
            ],
        },
        separators=(",", ":"),
    )


def decode_group_state(text: str | None) -> StoredGroup | None:
    """None for no state, or state that does not parse (logged: the group starts afresh)."""
    if not text:
        return None
    try:
        d: dict[str, Any] = json.loads(text)
        protocol = d.get("protocol")
        return StoredGroup(
            int(d["generation"]),
            d.get("protocol_type"),
            protocol,
            d.get("leader"),
            bool(d.get("assigned", False)),
            tuple(
                StoredMember(
                    str(m["id"]),
                    m.get("instance"),
                    str(m.get("client_id", "")),
                    str(m.get("client_host", "")),
                    int(m["session_ms"]),
                    int(m["rebalance_ms"]),
                    tuple(
                        (str(name), base64.b64decode(data, validate=True))
                        for name, data in m.get("protocols", [[protocol or "", ""]])
                    ),
                    base64.b64decode(m.get("assignment", ""), validate=True),
                )
                for m in d["members"]
            ),
        )
    except (ValueError, KeyError, TypeError) as e:
        log.warning("ignoring a stored group state that does not parse (%s): %.200s", e, text)
        return None


class GroupPersistence(GroupRebalancer):
    """The state machine, with its group states stored under the coordinator's leases (when
    `fence` is given; without one, as in unit tests of the bare state machine, nothing is
    stored and every answer goes out at once)."""

    def __init__(
        self,
        *,
        fence: GroupFence | None = None,
        consumer_session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        consumer_heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.fence = fence
        if fence is not None:
            fence.coordinator = self
        self._base_generation: dict[str, int] = {}  # loaded empty groups: their last generation
        self._tasks: set[asyncio.Task[None]] = set()
        # The consumer-protocol (KIP-848) groups, under the same leases and purgatory.
        self.consumer = ConsumerGroups(
            self.rebalance_purgatory,
            fence=fence,
            session_timeout_ms=consumer_session_timeout_ms,
            heartbeat_interval_ms=consumer_heartbeat_interval_ms,
        )
        # Classic members of consumer groups, and the conversions (agent.groups.mixed).
        self.classic_members = ClassicMembers(self.consumer)
        self.consumer.on_only_classic = self._downgrade
        self.upgrades = 0
        self.downgrades = 0

    def holds(self, group_id: str) -> bool:
        """Whether a group of either protocol is in memory here (its lease is in use)."""
        return group_id in self.groups or group_id in self.consumer.groups

    async def _stop_storing(self) -> None:
        """Stop the stores in flight (the groups were dropped) and release every lease."""
        await self.consumer.close()
        if self.fence is not None:
            await self.fence.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def drain(self) -> None:
        """Wait for the stores in flight."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_event_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------ hooks of the state machine

    def _new_group(self, group_id: str) -> Group:
        return Group(group_id, generation_id=self._base_generation.pop(group_id, 0))

    def _generation_formed(self, group: Group) -> bool:
        if self.fence is None:
            return False
        self._spawn(self._confirm_generation(group, group.generation_id))
        return True

    def _assignment_given(self, group: Group) -> None:
        if self.fence is None:
            super()._assignment_given(group)
            return
        group.storing_assignment = True
        self._spawn(self._store_assignment(group, group.generation_id))

    def _members_replaced(self, group: Group) -> None:
        if self.fence is not None:
            self._spawn(self._store_stable(group, group.generation_id))

    def _forgotten(self, group: Group) -> None:
        if self.fence is not None:
            self.fence.forgotten(group.group_id, encode_group_state(group))

    # ------------------------------------------------------------------ takeover and loss

    def drop_group(self, group_id: str) -> None:
        """Forget a group whose lease this agent lost or gave up: whoever waits is told
        NOT_COORDINATOR and finds the coordinator again (then rejoins)."""
        self.consumer.drop(group_id)
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

    def load_group(self, group_id: str, group_state: str | None) -> None:
        """A lease was just acquired: take over the group's last stored state (see the module
        docstring), or start afresh if there is none (or it does not parse)."""
        self.drop_group(group_id)
        if is_consumer_state(group_state):
            assert group_state is not None
            self.consumer.load(group_id, group_state)
            return
        stored = decode_group_state(group_state)
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

    # ------------------------------------------------------------------ protocol conversions

    def _upgrade(self, classic: Group, view: TopicView) -> str | None:
        """Convert a classic group into a consumer group (agent.groups.mixed); why not, if
        it cannot be now. Its parked requests get REBALANCE_IN_PROGRESS (they rejoin)."""
        refusal = upgrade_refusal(classic, self.consumer.max_group_size)
        converted = to_consumer_group(classic, view) if refusal is None else refusal
        if isinstance(converted, str):
            return converted
        del self.groups[classic.group_id]
        classic.state = GroupState.DEAD
        for m in classic.members.values():
            self._complete(m.join_future, JoinResult(ErrorCode.rebalance_in_progress, m.member_id))
            self._complete(m.sync_future, SyncResult(ErrorCode.rebalance_in_progress))
            m.join_future = m.sync_future = None
        self._complete_dead_group_ops(classic)
        self.consumer.groups[classic.group_id] = converted
        for member in converted.members.values():
            self.consumer._arm_session(converted, member)
        self.upgrades += 1
        log.info(
            "group %s: upgraded to the consumer protocol at generation %d with %d classic member(s)",
            classic.group_id,
            classic.generation_id,
            len(classic.members),
        )
        return None  # the caller's heartbeat stores it (with the joining member) before answering

    def _downgrade(self, group: ConsumerGroup) -> None:
        """Only classic members are left: the group becomes a classic one and rebalances."""
        classic = to_classic_group(group)
        self.consumer.release(group)
        self.groups[group.group_id] = classic
        self.downgrades += 1
        log.info(
            "group %s: downgraded to the classic protocol at generation %d with %d member(s)",
            group.group_id,
            classic.generation_id,
            len(classic.members),
        )
        if self.fence is not None:
            self._spawn(self._store_converted(classic, encode_group_state(classic, assigned=True)))
        for m in classic.members.values():
            self._heartbeat(classic, m)
        self._prepare_rebalance(classic, "downgraded from the consumer protocol")

    async def _store_converted(self, group: Group, state: str) -> None:
        """Store a group just converted back to classic (the consumer group's state is what
        metadata holds until then); drop the group if the lease is lost."""
        assert self.fence is not None
        ok = await self.fence.confirm(group.group_id, state, lambda: self._alive(group))
        if self._alive(group) and not ok:
            self.fence.lose(group.group_id, release=False)

    # ------------------------------------------------------------------ stores

    async def _confirm_generation(self, group: Group, generation_id: int) -> None:
        """Answer the joins of a new generation once metadata confirmed it (see
        `_on_complete_join`); drop the group if the lease is lost."""
        assert self.fence is not None
        ok = await self.fence.confirm(group.group_id, encode_group_state(group), lambda: self._alive(group))
        if not self._alive(group):
            return
        if not ok:
            self.fence.lose(group.group_id, release=False)
            return
        if group.generation_id != generation_id or not group.unconfirmed:
            return  # it moved on: the joins still waiting belong to the next phase
        group.unconfirmed = False
        self._answer_joins(group)

    async def _store_assignment(self, group: Group, generation_id: int) -> None:
        """Answer the SyncGroups once metadata stored the leader's assignment (see `_assignment_given`);
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
        ok = await self.fence.confirm(
            group.group_id, encode_group_state(group, assigned=True), lambda: self._alive(group)
        )
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
        ok = await self.fence.confirm(
            group.group_id, encode_group_state(group, assigned=True), lambda: self._alive(group)
        )
        if self._alive(group) and not ok:
            self.fence.lose(group.group_id, release=False)
