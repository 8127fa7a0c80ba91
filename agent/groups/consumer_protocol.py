"""The consumer group protocol (KIP-848): `ConsumerGroups`, the coordinator's side of
ConsumerGroupHeartbeat (api key 68), ConsumerGroupDescribe (69) and the member-epoch checks
of OffsetCommit / OffsetFetch, over the model of `agent.groups.consumer_model`.

One heartbeat, in order (Kafka's GroupMetadataManager.consumerGroupHeartbeat):

1. Validate the request (`consumer_requests.validate`): group id, member id, epochs, the fields a joining
   member must send, the assignor (`uniform`, `range`: UNSUPPORTED_ASSIGNOR), the regex
   (INVALID_REGULAR_EXPRESSION).
2. Find the member: epoch 0 joins (or rejoins: a known member id sending 0 gets its whole
   assignment again, KIP-848's rejoin); a static member (InstanceId) replaces the member
   that left with epoch -2 and inherits its target (another member still holding the
   instance id: UNRELEASED_INSTANCE_ID); otherwise the member must exist
   (UNKNOWN_MEMBER_ID) at the sent epoch, or at its previous epoch while owning a subset of
   its assignment (a lost response), else FENCED_MEMBER_EPOCH.
3. Apply what changed (subscription, assignor, rebalance timeout): a new member or a new
   subscription, and any change of the subscribed topics (the handler looks them up in
   metadata, `TopicView`), bump the group epoch; a group epoch newer than the target
   assignment runs the assignor.
4. Reconcile the member towards its target (`consumer_model.reconcile`).
5. Answer with the member epoch, the heartbeat interval and the assignment when the
   member joined, sent a full request, or its assignment changed. With fencing, the
   handler first stores the group under its coordinator lease (`flush`): nothing a member
   learns is lost if the coordinator moves.

Leaving: epoch -1 removes the member (its partitions are free at once, the group epoch goes
up); -2 (a static member that will come back) keeps it, with its partitions, until its
session expires or its successor joins.

Time, on the coordinator's rebalance purgatory (its clock is the injected one in tests):
a member's *session* (`session_timeout_ms`, Kafka's group.consumer.session.timeout.ms)
restarts at each heartbeat, and a member asked to revoke partitions must do so within its
*rebalance timeout* (the consumer's max.poll.interval.ms); either expiring removes the
member (its next heartbeat gets UNKNOWN_MEMBER_ID and it rejoins).

Empty groups are forgotten at once, as classic ones are (`agent.groups.coordinator`): the
final state is stored so the group epoch goes on; the committed offsets stay in metadata.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode
from skiff.agent.groups.assignors import Assignment
from skiff.agent.groups.consumer_model import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    TopicView,
    apply,
    reconcile,
    with_authorized_regex_topics,
)
from skiff.agent.groups.consumer_offsets import validate_commit, validate_fetch
from skiff.agent.groups.consumer_persistence import decode_consumer_group, encode_consumer_group
from skiff.agent.groups.consumer_requests import HeartbeatResult, MemberRequest
from skiff.agent.purgatory import DelayedOperation, DelayedOperationPurgatory

if TYPE_CHECKING:
    from skiff.agent.groups.fencing import GroupFence

log = logging.getLogger(__name__)

DEFAULT_SESSION_TIMEOUT_MS = 45_000  # Kafka's group.consumer.session.timeout.ms
DEFAULT_HEARTBEAT_INTERVAL_MS = 5_000  # Kafka's group.consumer.heartbeat.interval.ms
MAX_GROUP_SIZE = 10_000  # members per group (GROUP_MAX_SIZE_REACHED beyond)
TIMER_KINDS = ("consumer-session", "consumer-revoke", "consumer-join")  # purgatory keys per member


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class _MemberTimer(DelayedOperation):
    """A member's session or revocation deadline; stale once the member's token moved on."""

    __slots__ = ("owner", "group", "member_id", "token", "kind")

    def __init__(
        self,
        owner: ConsumerGroups,
        group: ConsumerGroup,
        member_id: str,
        token: int,
        kind: str,
        delay_ms: int,
    ) -> None:
        super().__init__(delay_ms)
        self.owner = owner
        self.group = group
        self.member_id = member_id
        self.token = token
        self.kind = kind  # "session", "revoke" or "join" (a classic member told to rejoin)

    def try_complete(self) -> bool:
        return self.owner._timer_stale(self)

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        self.owner._timer_expired(self)


class ConsumerGroups:
    """The consumer-protocol groups this agent coordinates. Loop-confined, like the purgatory."""

    def __init__(
        self,
        purgatory: DelayedOperationPurgatory[DelayedOperation],
        *,
        fence: GroupFence | None = None,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
        max_group_size: int = MAX_GROUP_SIZE,
    ) -> None:
        self.purgatory = purgatory
        self.fence = fence
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_group_size = max_group_size
        self.groups: dict[str, ConsumerGroup] = {}
        self._base_epoch: dict[str, int] = {}  # forgotten groups: their last group epoch
        self._storing: dict[str, asyncio.Task[bool]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        # Called when only classic-protocol members are left (the coordinator converts the
        # group back to a classic one: agent.groups.mixed); None: the group stays as it is.
        self.on_only_classic: Callable[[ConsumerGroup], None] | None = None

    # ------------------------------------------------------------------ heartbeat

    def wanted_topics(self, req: MemberRequest) -> tuple[set[str], bool]:
        """The topic names the handler must look up for this heartbeat, and whether it must
        list every topic (a regular expression is subscribed)."""
        names = set(req.subscribed_topic_names or ())
        regex = bool(req.subscribed_topic_regex)
        group = self.groups.get(req.group_id)
        if group is not None:
            names |= group.all_subscribed_names() | set(group.topics)
            regex = regex or bool(group.regexes())
        return names, regex

    def heartbeat(self, req: MemberRequest, view: TopicView) -> HeartbeatResult:
        """One validated heartbeat (see the module docstring). Synchronous: the group's
        state changes atomically on the event loop."""
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(req)
        group = self.groups.get(req.group_id)
        if group is None:
            if req.member_epoch != 0:
                return HeartbeatResult(
                    ErrorCode.unknown_member_id,
                    f"Group {req.group_id} has no member {req.member_id}.",
                    req.member_id,
                )
            base = self._base_epoch.pop(req.group_id, 0)
            group = ConsumerGroup(req.group_id, group_epoch=base, assignment_epoch=base)
            self.groups[req.group_id] = group
        try:
            old, joined = self._member_for(group, req)
        except _Refused as e:
            self._maybe_forget(group)
            return HeartbeatResult(e.code, e.message, req.member_id)
        updated, resubscribed = self._updated(old, req, joined)
        group.members[updated.member_id] = updated  # same partitions: `owners` still holds
        refreshed = group.refresh_topics(view)  # the regex matches, with this subscription
        updated = group.members[updated.member_id] = with_authorized_regex_topics(
            group, updated, req.describable
        )
        if updated != old:
            group.changed()
        if refreshed or resubscribed or updated.regex_allowed != old.regex_allowed:
            group.bump_epoch()  # once per heartbeat, however many things changed
        group.update_target()
        new = reconcile(group, updated, req.owned, lambda t, p: group.owners.get((t, p)))
        apply(group, updated, new)
        self._arm_session(group, new)
        self._arm_revocation(group, old, new)
        send = req.member_epoch == 0 or req.is_full or new.assigned != old.assigned
        return HeartbeatResult(
            ErrorCode.none,
            None,
            new.member_id,
            new.member_epoch,
            self.heartbeat_interval_ms,
            dict(new.assigned) if send else None,
            group,
        )

    def _member_for(self, group: ConsumerGroup, req: MemberRequest) -> tuple[ConsumerMember, bool]:
        """The member the request is from (created when joining) and whether it is new."""
        if req.member_epoch == 0:
            return self._joining(group, req)
        member = group.members.get(req.member_id)
        if member is None:
            raise _Refused(ErrorCode.unknown_member_id, f"Unknown member {req.member_id}.")
        if req.instance_id is not None and member.instance_id != req.instance_id:
            raise _Refused(
                ErrorCode.fenced_instance_id, f"Member {req.member_id} is not instance {req.instance_id}."
            )
        if req.member_epoch > member.member_epoch or (
            req.member_epoch < member.member_epoch
            and (req.member_epoch != member.previous_member_epoch or not _subset(req.owned, member.assigned))
        ):
            raise _Refused(
                ErrorCode.fenced_member_epoch,
                f"Member epoch {req.member_epoch} is fenced: the member is at {member.member_epoch}.",
            )
        return member, False

    def _joining(self, group: ConsumerGroup, req: MemberRequest) -> tuple[ConsumerMember, bool]:
        member_id = req.member_id or str(uuid.uuid4())  # v0 clients let the coordinator choose
        if req.instance_id is not None:
            holder_id = group.static.get(req.instance_id)
            if holder_id is not None and holder_id != member_id:
                holder = group.members[holder_id]
                if holder.member_epoch != STATIC_LEAVE_EPOCH:
                    raise _Refused(
                        ErrorCode.unreleased_instance_id,
                        f"Static member {holder_id} with instance id {req.instance_id} is still in the group.",
                    )
                return self._replace_static(group, holder, member_id), False
        member = group.members.get(member_id)
        if member is not None:
            return member, False
        if len(group.members) >= self.max_group_size:
            raise _Refused(ErrorCode.group_max_size_reached, f"The group has {self.max_group_size} members.")
        member = ConsumerMember(member_id, instance_id=req.instance_id)
        group.members[member_id] = member
        if req.instance_id is not None:
            group.static[req.instance_id] = member_id
        return member, True

    def _replace_static(self, group: ConsumerGroup, old: ConsumerMember, member_id: str) -> ConsumerMember:
        """A static member came back under a new member id: it takes the old one's target
        (no rebalance for the others); the old one's partitions are free, it is gone."""
        target = group.target.get(old.member_id, {})
        epoch = group.group_epoch
        group.remove_member(old.member_id)
        group.group_epoch = epoch  # same subscription: no new target needed
        new = ConsumerMember(
            member_id,
            instance_id=old.instance_id,
            rack_id=old.rack_id,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            subscribed_topic_names=old.subscribed_topic_names,
            subscribed_topic_regex=old.subscribed_topic_regex,
            server_assignor=old.server_assignor,
        )
        group.members[member_id] = new
        group.target[member_id] = target
        assert new.instance_id is not None
        group.static[new.instance_id] = member_id
        log.info("group %s: static member %s replaced %s", group.group_id, member_id, old.member_id)
        return new

    @staticmethod
    def _updated(member: ConsumerMember, req: MemberRequest, joined: bool) -> tuple[ConsumerMember, bool]:
        """The member with the request's changed fields, and whether the assignment depends
        on the change (a new member, a subscription, the assignor: a new group epoch)."""
        changes: dict[str, Any] = {"client_id": req.client_id, "client_host": req.client_host}
        if req.rack_id is not None:
            changes["rack_id"] = req.rack_id
        if req.rebalance_timeout_ms > 0:
            changes["rebalance_timeout_ms"] = req.rebalance_timeout_ms
        if req.subscribed_topic_names is not None:
            changes["subscribed_topic_names"] = tuple(sorted(set(req.subscribed_topic_names)))
        if req.subscribed_topic_regex is not None:
            changes["subscribed_topic_regex"] = req.subscribed_topic_regex or None
        if req.server_assignor is not None:
            changes["server_assignor"] = req.server_assignor
        new = dataclasses.replace(member, **changes)
        keys = ("subscribed_topic_names", "subscribed_topic_regex", "server_assignor")
        return new, joined or any(getattr(new, k) != getattr(member, k) for k in keys)

    def _leave(self, req: MemberRequest) -> HeartbeatResult:
        group = self.groups.get(req.group_id)
        member_id = req.member_id
        if group is not None and req.instance_id is not None:
            member_id = group.static.get(req.instance_id, "")
            if member_id and req.member_id and member_id != req.member_id:
                return HeartbeatResult(
                    ErrorCode.fenced_instance_id, "Another member holds the instance id.", req.member_id
                )
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return HeartbeatResult(
                ErrorCode.unknown_member_id, f"Unknown member {req.member_id}.", req.member_id
            )
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            log.info("group %s: static member %s left for now", group.group_id, member_id)
            member.member_epoch = STATIC_LEAVE_EPOCH
            member.revoke_token += 1
            group.changed()
            self._arm_session(group, member)
        else:
            log.info("group %s: member %s left", group.group_id, member_id)
            self._remove(group, member_id)
        return HeartbeatResult(ErrorCode.none, None, req.member_id, req.member_epoch, 0, None, group)

    # ------------------------------------------------------------------ timers

    def _arm_session(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        member.session_token += 1
        key = ("consumer-session", group.group_id, member.member_id)
        self.purgatory.check_and_complete(key)
        timeout_ms = (
            member.classic.session_timeout_ms if member.classic is not None else self.session_timeout_ms
        )
        op = _MemberTimer(self, group, member.member_id, member.session_token, "session", timeout_ms)
        self.purgatory.try_complete_else_watch(op, (key,))

    def _arm_revocation(self, group: ConsumerGroup, old: ConsumerMember, new: ConsumerMember) -> None:
        """A member newly asked to revoke partitions must do so within its rebalance timeout."""
        if new.state == MemberState.UNREVOKED_PARTITIONS and (
            old.state != MemberState.UNREVOKED_PARTITIONS or old.pending_revocation != new.pending_revocation
        ):
            new.revoke_token += 1
            key = ("consumer-revoke", group.group_id, new.member_id)
            self.purgatory.check_and_complete(key)
            op = _MemberTimer(
                self, group, new.member_id, new.revoke_token, "revoke", new.rebalance_timeout_ms
            )
            self.purgatory.try_complete_else_watch(op, (key,))
        elif new.state != MemberState.UNREVOKED_PARTITIONS and old.state == MemberState.UNREVOKED_PARTITIONS:
            new.revoke_token += 1
            self.purgatory.check_and_complete(("consumer-revoke", group.group_id, new.member_id))

    def arm_join(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """A classic member told to rejoin must do so within its rebalance timeout (Kafka's
        join timer); armed once, until its JoinGroup."""
        if not member.join_armed:
            member.join_armed = True
            key = ("consumer-join", group.group_id, member.member_id)
            op = _MemberTimer(
                self, group, member.member_id, member.join_token, "join", member.rebalance_timeout_ms
            )
            self.purgatory.try_complete_else_watch(op, (key,))

    def disarm_join(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        member.join_armed = False
        member.join_token += 1
        self.purgatory.check_and_complete(("consumer-join", group.group_id, member.member_id))

    def _timer_stale(self, op: _MemberTimer) -> bool:
        group = op.group
        member = group.members.get(op.member_id)
        if self.groups.get(group.group_id) is not group or member is None:
            return True
        if op.kind == "revoke":
            return member.revoke_token != op.token or member.state != MemberState.UNREVOKED_PARTITIONS
        if op.kind == "join":
            return member.join_token != op.token
        return member.session_token != op.token

    def _timer_expired(self, op: _MemberTimer) -> None:
        if self._timer_stale(op):
            return
        why = {
            "revoke": "did not revoke its partitions within its rebalance timeout",
            "join": "did not rejoin within its rebalance timeout",
        }.get(op.kind, "missed its session timeout")
        log.info("group %s: member %s %s, removing it", op.group.group_id, op.member_id, why)
        self._remove(op.group, op.member_id)
        if self.groups.get(op.group.group_id) is op.group:
            self.store_later(op.group)  # nobody waits for an answer

    # ------------------------------------------------------------------ removal, forgetting

    def _remove(self, group: ConsumerGroup, member_id: str) -> None:
        group.remove_member(member_id)
        for kind in TIMER_KINDS:
            self.purgatory.check_and_complete((kind, group.group_id, member_id))
        if (
            self.on_only_classic is not None
            and group.only_classic()
            and self.groups.get(group.group_id) is group
        ):
            self.on_only_classic(group)  # the online downgrade (Kafka's convertToClassicGroup)
            return
        self._maybe_forget(group)

    def release(self, group: ConsumerGroup) -> None:
        """The group was converted to the other protocol: forget it here, no lease change."""
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]
        group.dead = True
        for member_id in group.members:
            for kind in TIMER_KINDS:
                self.purgatory.check_and_complete((kind, group.group_id, member_id))

    def _maybe_forget(self, group: ConsumerGroup) -> None:
        """Forget an emptied group (its final state stored, so the group epoch goes on)."""
        if group.members or self.groups.get(group.group_id) is not group:
            return
        del self.groups[group.group_id]
        group.dead = True
        if self.fence is not None:
            self.fence.forgotten(group.group_id, encode_consumer_group(group))
        else:
            self._base_epoch[group.group_id] = group.group_epoch

    def drop(self, group_id: str) -> None:
        """The lease is lost or given up: forget the group; whoever waits gets NOT_COORDINATOR."""
        self._base_epoch.pop(group_id, None)
        group = self.groups.pop(group_id, None)
        if group is None:
            return
        log.info("group %s: dropped (group epoch %d, not the coordinator)", group_id, group.group_epoch)
        group.dead = group.lost = True
        for member_id in group.members:
            for kind in TIMER_KINDS:
                self.purgatory.check_and_complete((kind, group_id, member_id))

    def delete(self, group_id: str) -> bool:
        """DeleteGroups: False if the group has members."""
        group = self.groups.get(group_id)
        if group is not None and group.members:
            return False
        self._base_epoch.pop(group_id, None)
        return True

    def load(self, group_id: str, group_state: str) -> bool:
        """Take over a stored group (a lease was just acquired); False if it does not load."""
        group = decode_consumer_group(group_id, group_state)
        if group is None:
            return False
        if not group.members:
            self._base_epoch[group_id] = group.group_epoch
            return True
        self.groups[group_id] = group
        log.info(
            "group %s: taken over at group epoch %d with %d member(s)",
            group_id,
            group.group_epoch,
            len(group.members),
        )
        for m in group.members.values():
            self._arm_session(group, m)
            if m.state == MemberState.UNREVOKED_PARTITIONS:
                self._arm_revocation(group, ConsumerMember(m.member_id), m)
        return True

    # ------------------------------------------------------------------ storing

    async def flush(self, group: ConsumerGroup) -> bool:
        """Store the group under its lease if it changed since last stored; False if the
        lease is lost (the group is dropped: answer NOT_COORDINATOR)."""
        if self.fence is None:
            group.stored_version = group.version
            return True
        want = group.version
        while group.stored_version < want:
            if group.lost:
                return False
            if group.dead:
                return True  # forgotten when it emptied: its final state is stored with the release
            task = self._storing.get(group.group_id)
            if task is None:
                task = asyncio.get_running_loop().create_task(self._store(group))
                self._storing[group.group_id] = task
            if not await asyncio.shield(task):
                # Forgotten or converted meanwhile (dead, not lost): its state is stored
                # with the release, or as the classic group it became.
                return group.dead and not group.lost
        return not group.lost

    async def _store(self, group: ConsumerGroup) -> bool:
        assert self.fence is not None
        version = group.version
        try:
            ok = await self.fence.confirm(
                group.group_id, encode_consumer_group(group), lambda: self.groups.get(group.group_id) is group
            )
        finally:
            if self._storing.get(group.group_id) is asyncio.current_task():
                del self._storing[group.group_id]
        if ok:
            group.stored_version = max(group.stored_version, version)
        elif self.groups.get(group.group_id) is group:
            self.fence.lose(group.group_id, release=False)
        return ok

    def store_later(self, group: ConsumerGroup) -> None:
        """Store the group in the background (a change nobody waits an answer for)."""
        if self.fence is not None:
            self._spawn(self.flush(group))

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for group_id in list(self.groups):
            self.drop(group_id)
        for task in [*self._tasks, *self._storing.values()]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._storing.values(), return_exceptions=True)

    # ------------------------------------------------------------------ offsets

    def validate_commit(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        *,
        api_version: int,
        transactional: bool,
        partitions: Sequence[tuple[str, int]] = (),
    ) -> ErrorCode | None:
        """None if `group_id` is not a consumer group held here (the classic rules apply);
        else `agent.groups.consumer_offsets.validate_commit`."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        return validate_commit(group, member_id, member_epoch, api_version, transactional, partitions)

    def validate_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode:
        group = self.groups.get(group_id)
        return ErrorCode.none if group is None else validate_fetch(group, member_id, member_epoch)


def _subset(owned: Assignment | None, assigned: Assignment) -> bool:
    if owned is None:
        return False
    return all(ps <= assigned.get(t, frozenset()) for t, ps in owned.items())
