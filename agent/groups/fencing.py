"""Group coordinator fencing: the agent's side of the leases in `metadata.groups.leases`.

Agents choose a vacant group's coordinator by rendezvous hashing over the agents each
believes alive (agent.groups.placement); those views differ for up to a heartbeat interval
whenever an agent starts or stops, and clients of two zones are sent to two agents. So
coordinating a group also takes a lease in metadata, held with an epoch:

- Before serving a group request (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
  OffsetCommit, DeleteGroups, OffsetDelete) the handler calls `ensure_coordinator`: not
  `owns` (the agent's: this agent is ready) -> NOT_COORDINATOR (and any state and lease
  this agent had for the group are let go); a valid lease -> go on; no lease here and the
  group placed elsewhere for this client (agent.groups.placement: leased by another agent,
  or another agent's choice in the client's zone) -> NOT_COORDINATOR; else acquire it
  (one request per group however many clients ask at once). Refused (another agent holds
  it) -> NOT_COORDINATOR, metadata out of reach -> COORDINATOR_NOT_AVAILABLE; clients find
  the coordinator again and retry. An acquisition loads the group's last stored state
  (`GroupPersistence.load_group`, agent.groups.persistence: the takeover, as Kafka's).
- Every group state a member can learn is stored in metadata first, with the lease renewed
  and checked (holder, epoch) in the same conditional UPDATE (`confirm`); see
  agent.groups.persistence. Offset commits carry the lease (`token`), checked in the
  commit's transaction.
- Leases are renewed every `renew_interval_ms`, all groups in one request. The agent
  trusts a lease until `sent + ttl_ms - ttl_ms / 4` (by its monotonic clock, counted from
  when the acquiring or renewing request was sent): metadata grants until its own
  `now + ttl_ms`, later than that, and the quarter of the TTL absorbs differences between
  the clocks of several metadata replicas. A lease lost or not confirmed in time: the
  group's state is dropped (waiters answered NOT_COORDINATOR) and the next request
  acquires again, with a new epoch.
- A group that leaves this agent (the agent turned not ready, it was forgotten when empty,
  the agent stops) has its lease released, so the next coordinator need not wait for the TTL. An
  acquisition here waits for a release of the same group still in flight (however that
  release ends), so it loads the final state that release stores, never the one before it.
- Stores of one group run one at a time, in order. A store whose turn comes after the
  lease was lost and taken again (it queued behind a slow one) is dropped, not written
  under the new lease: the state it carries is the dropped group's, and a next
  coordinator loading it would bring back members that left (`confirm`'s `current`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode
from skiff.metadata.errors import MetadataError, MetadataUnavailable
from skiff.metadata.groups.lease_types import LeaseToken
from skiff.metadata.wire.operations import AgentClient

if TYPE_CHECKING:
    from skiff.agent.groups.persistence import GroupPersistence
    from skiff.agent.groups.placement import GroupPlacement

log = logging.getLogger(__name__)


def _monotonic_ms() -> float:
    return time.monotonic() * 1000.0


@dataclass
class _Held:
    epoch: int
    deadline_ms: float  # monotonic: trusted until then
    used_ms: float  # monotonic: last request that needed it


class GroupFence:
    """The leases this agent holds. Loop-confined, like the coordinator it serves."""

    def __init__(
        self,
        metadata: AgentClient,
        agent_id: str,
        *,
        ttl_ms: int = 10_000,
        renew_interval_ms: int = 2_000,
        owns: Callable[[str], bool] = lambda _g: True,
        monotonic_ms: Callable[[], float] = _monotonic_ms,
        placement: GroupPlacement | None = None,
    ) -> None:
        self.metadata = metadata
        self.agent_id = agent_id
        self.ttl_ms = ttl_ms
        self.trust_ms = ttl_ms - ttl_ms // 4
        self.renew_interval_ms = renew_interval_ms
        self.owns = owns
        self.placement = placement
        self._now = monotonic_ms
        self.held: dict[str, _Held] = {}
        self._acquiring: dict[str, asyncio.Task[ErrorCode]] = {}
        self._locks: dict[str, asyncio.Lock] = {}  # one confirm/release at a time per group, in order
        self._background: set[asyncio.Task[None]] = set()
        self._releasing: dict[str, asyncio.Task[None]] = {}  # the release in flight per group
        self._task: asyncio.Task[None] | None = None
        self.coordinator: GroupPersistence | None = None  # set by the coordinator
        self.renewals = 0
        self.lost = 0

    # ------------------------------------------------------------------ queries

    def valid(self, group_id: str) -> bool:
        h = self.held.get(group_id)
        return h is not None and self._now() < h.deadline_ms

    def token(self, group_id: str) -> LeaseToken | None:
        h = self.held.get(group_id)
        return LeaseToken(self.agent_id, h.epoch) if h is not None and self._now() < h.deadline_ms else None

    # ------------------------------------------------------------------ acquisition

    async def ensure(self, group_id: str, zone: str | None = None) -> ErrorCode:
        """NONE when this agent coordinates the group (taking its lease if needed) for a
        client of `zone`, else NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE."""
        if not self.owns(group_id):
            if group_id in self.held or (self.coordinator and self.coordinator.holds(group_id)):
                log.info("group %s: no longer coordinated by this agent, letting it go", group_id)
                self.lose(group_id, release=True)
            return ErrorCode.not_coordinator
        h = self.held.get(group_id)
        if h is not None and self._now() < h.deadline_ms:
            h.used_ms = self._now()
            return ErrorCode.none
        if h is None and self.placement is not None and not await self.placement.accepts(group_id, zone):
            return ErrorCode.not_coordinator  # leased elsewhere, or another agent's to take
        task = self._acquiring.get(group_id)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._acquire(group_id))
            self._acquiring[group_id] = task
            task.add_done_callback(lambda _t: self._acquiring.pop(group_id, None))
        return await asyncio.shield(task)

    async def _acquire(self, group_id: str) -> ErrorCode:
        if group_id in self.held:
            log.warning("group %s: lease not confirmed in time, dropping the group's state", group_id)
            self.lose(group_id, release=False)
        releasing = self._releasing.get(group_id)
        if releasing is not None:
            # A release in flight stores the group's final state (a group forgotten when its
            # last member left): acquiring before it lands would load the state before it.
            # Waited for, not awaited: however it ended, the acquisition goes on.
            await asyncio.wait([releasing])
        sent = self._now()
        try:
            grant = await self.metadata.acquire_group_lease(group_id, self.agent_id, self.ttl_ms)
        except (MetadataUnavailable, MetadataError, OSError) as e:
            log.warning("group %s: cannot acquire the coordinator lease: %s", group_id, e)
            return ErrorCode.coordinator_not_available
        if self.placement is not None:
            self.placement.note(group_id, grant.holder)  # whoever got it, this agent or another
        if not grant.granted:
            log.info(
                "group %s: %s holds the coordinator lease (epoch %d), answering NOT_COORDINATOR",
                group_id,
                grant.holder,
                grant.epoch,
            )
            return ErrorCode.not_coordinator
        self.held[group_id] = _Held(grant.epoch, sent + self.trust_ms, self._now())
        if not self.owns(group_id):  # the view changed while we asked
            self.lose(group_id, release=True)
            return ErrorCode.not_coordinator
        log.info("group %s: coordinator lease acquired (epoch %d)", group_id, grant.epoch)
        if self.coordinator is not None:
            self.coordinator.load_group(group_id, grant.group_state)
        return ErrorCode.none

    # ------------------------------------------------------------------ state changes

    async def confirm(
        self, group_id: str, group_state: str, current: Callable[[], bool] = lambda: True
    ) -> bool:
        """Renew the lease and store a new generation; False if the lease is lost or could
        not be confirmed (the caller drops the group), or if `current()` says, once this
        store's turn has come, that the state it stores is no longer the group's: a store
        queued behind another one while the lease was lost and taken again must not write
        the dropped group's state under the new lease (a next coordinator would load it)."""
        async with self._lock(group_id):
            h = self.held.get(group_id)
            if h is None or self._now() >= h.deadline_ms or not current():
                return False
            sent = self._now()
            try:
                await self.metadata.confirm_group_generation(
                    group_id, LeaseToken(self.agent_id, h.epoch), self.ttl_ms, group_state
                )
            except (MetadataUnavailable, MetadataError, OSError) as e:
                log.warning("group %s: new generation not confirmed, dropping the group: %s", group_id, e)
                return False
            if self.held.get(group_id) is h:
                h.deadline_ms = max(h.deadline_ms, sent + self.trust_ms)
            return True

    def lose(self, group_id: str, *, release: bool) -> None:
        """Forget the lease and drop the group's in-memory state; with `release`, also give
        the lease back in metadata (in the background, after any confirm in flight)."""
        h = self.held.pop(group_id, None)
        if self.coordinator is not None:
            self.coordinator.drop_group(group_id)
        if h is not None and release:
            self._releasing[group_id] = self._spawn(self._release(group_id, h.epoch, None))
        elif h is not None:
            self.lost += 1

    def forgotten(self, group_id: str, final_state: str) -> None:
        """The coordinator forgot an empty group: store its last state and release."""
        h = self.held.pop(group_id, None)
        if h is not None:
            self._releasing[group_id] = self._spawn(self._release(group_id, h.epoch, final_state))

    async def _release(self, group_id: str, epoch: int, final_state: str | None) -> None:
        try:
            async with self._lock(group_id):
                try:
                    if final_state is not None:
                        token = LeaseToken(self.agent_id, epoch)
                        await self.metadata.confirm_group_generation(
                            group_id, token, self.ttl_ms, final_state
                        )
                    await self.metadata.release_group_leases(self.agent_id, [(group_id, epoch)])
                except (MetadataUnavailable, MetadataError, OSError) as e:
                    log.info("group %s: lease not released (it will lapse): %s", group_id, e)
        except Exception:  # boundary: a background task; the lease lapses by itself
            log.exception("group %s: unexpected error releasing the coordinator lease", group_id)
        finally:
            # Whatever happened, the release is over: an acquisition waiting for it goes on.
            if self.placement is not None and group_id not in self.held:
                self.placement.note(group_id, None)
            lock = self._locks.get(group_id)
            if group_id not in self.held and lock is not None and not lock.locked():
                del self._locks[group_id]
            if self._releasing.get(group_id) is asyncio.current_task():
                del self._releasing[group_id]

    def _lock(self, group_id: str) -> asyncio.Lock:
        lock = self._locks.get(group_id)
        if lock is None:
            lock = self._locks[group_id] = asyncio.Lock()
        return lock

    def _spawn(self, coro: Any) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    # ------------------------------------------------------------------ renewal

    async def renew_once(self) -> None:
        """Let go of groups routed elsewhere, of idle leases of groups not in memory and of
        leases no longer trusted; renew the rest in one request."""
        now = self._now()
        coordinator = self.coordinator
        for group_id, h in list(self.held.items()):
            if not self.owns(group_id):
                log.info("group %s: not coordinated by this agent any more, letting it go", group_id)
                self.lose(group_id, release=True)
            elif now >= h.deadline_ms:
                log.warning("group %s: coordinator lease not renewed in time, dropping the group", group_id)
                self.lose(group_id, release=False)
            elif (coordinator is None or not coordinator.holds(group_id)) and now - h.used_ms >= self.ttl_ms:
                self.lose(group_id, release=True)
        if not self.held:
            return
        asked = {g: h.epoch for g, h in self.held.items()}
        sent = self._now()
        try:
            renewed = set(
                await self.metadata.renew_group_leases(self.agent_id, list(asked.items()), self.ttl_ms)
            )
        except (MetadataUnavailable, MetadataError, OSError) as e:
            log.warning("renewing %d group lease(s) failed (retrying): %s", len(asked), e)
            return
        self.renewals += 1
        for group_id, epoch in asked.items():
            mine = self.held.get(group_id)
            if mine is None or mine.epoch != epoch:
                continue
            if group_id in renewed:
                mine.deadline_ms = max(mine.deadline_ms, sent + self.trust_ms)
            else:
                log.warning(
                    "group %s: coordinator lease lost (epoch %d), dropping the group", group_id, epoch
                )
                self.lose(group_id, release=False)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="skiff-group-leases")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.renew_interval_ms / 1000.0)
            try:
                await self.renew_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # boundary: the renewal task must not die
                # a bug must not stop renewals for good
                log.exception("unexpected error renewing group leases")

    async def close(self) -> None:
        """Stop renewing and release every lease (the groups were dropped by the caller)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        held = {g: h.epoch for g, h in self.held.items()}
        self.held.clear()
        if held:
            with contextlib.suppress(MetadataUnavailable, MetadataError, OSError):
                await self.metadata.release_group_leases(self.agent_id, list(held.items()))
        await self.drain()

    async def drain(self) -> None:
        """Wait for the releases running in the background."""
        while self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
