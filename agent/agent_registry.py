"""Agent membership: heartbeating this agent into metadata and keeping the live-agent view.

`AgentRegistry` is a background task: every `heartbeat_interval_ms` it calls
`metadata.heartbeat_agent(self)` (the first call registers the agent) and then
`metadata.live_agents()`, and hands the list to the `LiveAgents` view. When metadata is
unreachable it logs, keeps the last view and tries again at the next tick: routing is
advice (any agent serves any partition), so a stale view is harmless.

Identity: metadata refuses a live agent id heartbeated from another address
(DUPLICATE_BROKER_REGISTRATION), and an id the agent's token is not bound to
(CLUSTER_AUTHORIZATION_FAILED). Refused at the first heartbeat, `start()` raises
`AgentIdInUse` and the agent does not start; refused later (this agent was silent past the
TTL and another took its id), the refusal is logged at every beat.

`LiveAgents` is what handlers read: the brokers to list in Metadata/DescribeCluster,
each partition's leader and each group's coordinator (rendezvous hashing, see
`agent.routing`), and the controller id. It always contains this agent, with the address
it actually listens on, even before the first heartbeat is answered; agents whose last
heartbeat is older than `ttl_ms` (by this agent's clock) are left out, on top of
whatever liveness rule metadata applies. Leaders are memoized per (topic id, partition
count) and recomputed whenever the membership changes.

Readiness (agent.health): every heartbeat carries this agent's `ready` flag, and metadata
lists live agents with theirs. Node ids are assigned over every live agent (so an agent's
id does not change when it turns ready or not), but partitions, group and transaction
coordinators and the controller are hashed over the ready agents only, and the broker
list names the ready agents plus this one (a client of a not-ready agent is answered and
pointed at the ready ones). This agent's own flag changes its view at once
(`set_self_ready`) and is sent at once (`AgentRegistry.wake`), so every agent routes away
from it within one of its heartbeats. With no ready agent at all there is no leader
(`NO_LEADER`: Metadata answers LEADER_NOT_AVAILABLE, which clients retry) and no
coordinator (FindCoordinator answers COORDINATOR_NOT_AVAILABLE); the controller is then
this agent (admin requests only need metadata).

Zones (agent.zones): agents report their zone. Leaders for a client of zone Z are hashed
over the ready agents of Z (`leaders_for_topic(..., zone)`), over all ready agents when Z
has none or the client states no zone. `replicas_for_topic` lists, when ready agents span
two or more zones, each partition's leader and every other zone's leader (Metadata's
replicas; see agent.handlers.kafka_metadata). A group or transactional id not yet coordinated
anywhere gets, for a client of zone Z, the coordinator hashed over the ready agents of Z
(`coordinator_for_group(..., zone)`; agent.groups.placement keeps a leased group with its
lease holder). The controller stays hashed over all ready agents.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from skiff.agent import routing
from skiff.metadata.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    DUPLICATE_BROKER_REGISTRATION,
    MetadataError,
    MetadataUnavailable,
)
from skiff.metadata.types import AgentInfo
from skiff.metadata.wire.operations import AgentClient

log = logging.getLogger(__name__)

_MAX_MEMOIZED_TOPICS = 100_000
NO_LEADER = -1  # a partition's leader when no agent is ready (Kafka's "no leader")


def _wall_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class Broker:
    """An agent as Kafka clients see it."""

    node_id: int
    agent_id: str
    host: str
    port: int
    rack: str | None = None
    # (listener name, host, port) of every advertised listener; empty for agents from
    # before listeners, whose one address is (host, port).
    endpoints: tuple[tuple[str, str, int], ...] = ()

    def address(self, listener: str) -> tuple[str, int]:
        """The address on `listener` (the one the client connected through, as Kafka
        answers). An agent without that listener name (an older agent, or a fleet whose
        listeners differ) is given by its primary address."""
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return self.host, self.port


class LiveAgents:
    def __init__(
        self,
        self_info: AgentInfo,
        ttl_ms: int = 15_000,
        wall_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        self._self = self_info
        self._ttl_ms = ttl_ms
        self._wall_ms = wall_ms
        self._others: tuple[AgentInfo, ...] = ()
        self.version = 0  # bumped whenever the membership or an address changes
        self.updated_ms = 0  # wall time of the last successful refresh, 0 = never
        self._rebuild()

    # --- updates ------------------------------------------------------------------------

    @property
    def self_info(self) -> AgentInfo:
        return self._self

    def set_self_address(
        self, host: str, port: int, listeners: tuple[tuple[str, str, int], ...] | None = None
    ) -> None:
        """Called once the listeners know the ports they are bound to: the primary address
        and every listener's (default: just PLAINTEXT at the primary address)."""
        self._self = replace(
            self._self,
            host=host,
            port=port,
            listeners=listeners if listeners is not None else (("PLAINTEXT", host, port),),
        )
        self._rebuild()

    def set_self_ready(self, ready: bool) -> None:
        """This agent's readiness (agent.health): not ready, it leads nothing here at once;
        the next heartbeat tells the other agents."""
        if ready != self._self.ready:
            self._self = replace(self._self, ready=ready)
            self._rebuild()

    def update(self, agents: Sequence[AgentInfo]) -> None:
        """Replace the view with metadata's live-agent list."""
        now = self._wall_ms()
        others: dict[str, AgentInfo] = {}
        for a in agents:
            if a.agent_id == self._self.agent_id:
                continue
            if a.last_heartbeat_ms > 0 and now - a.last_heartbeat_ms > self._ttl_ms:
                continue
            others[a.agent_id] = a
        new = tuple(sorted(others.values(), key=lambda a: a.agent_id))
        self.updated_ms = now
        if [(a.agent_id, a.host, a.port, a.zone, a.listeners, a.ready) for a in new] != [
            (a.agent_id, a.host, a.port, a.zone, a.listeners, a.ready) for a in self._others
        ]:
            self._others = new
            self._rebuild()
        else:
            self._others = new

    def _rebuild(self) -> None:
        everyone = (self._self, *self._others)
        ids = routing.assign_node_ids([a.agent_id for a in everyone])  # over all: stable ids
        self._agent_ids = tuple(sorted(a.agent_id for a in everyone if a.ready))
        self._ready_set = frozenset(self._agent_ids)
        zones: dict[str, list[str]] = {}
        for a in everyone:
            if a.ready and a.zone:
                zones.setdefault(a.zone, []).append(a.agent_id)
        self._zone_ids = {z: tuple(sorted(members)) for z, members in sorted(zones.items())}
        self._brokers = {
            ids[a.agent_id]: Broker(ids[a.agent_id], a.agent_id, a.host, a.port, a.zone, a.listeners)
            for a in everyone
            if a.ready or a is self._self
        }
        self._by_agent = {b.agent_id: b for b in self._brokers.values()}
        self._self_node_id = ids[self._self.agent_id]
        controller = routing.controller_owner(self._agent_ids)
        self._controller_id = ids[controller] if controller is not None else self._self_node_id
        self._leaders: dict[tuple[uuid.UUID, int, str | None], tuple[int, ...]] = {}
        self._replicas: dict[tuple[uuid.UUID, int, str | None], tuple[tuple[int, ...], ...]] = {}
        self.version += 1

    # --- reads --------------------------------------------------------------------------

    @property
    def self_node_id(self) -> int:
        return self._self_node_id

    @property
    def controller_id(self) -> int:
        return self._controller_id

    def brokers(self) -> list[Broker]:
        """Every live agent, this one included, by node id."""
        return [self._brokers[n] for n in sorted(self._brokers)]

    def broker(self, node_id: int) -> Broker | None:
        return self._brokers.get(node_id)

    @property
    def self_ready(self) -> bool:
        return self._self.ready

    def agent_ids(self) -> tuple[str, ...]:
        """The agents routing hashes over: the ready ones (this one only while ready)."""
        return self._agent_ids

    def zones(self) -> tuple[str, ...]:
        """The zones that have ready agents, sorted."""
        return tuple(self._zone_ids)

    def routed_zone(self, zone: str | None) -> str | None:
        """The zone a client of `zone` is routed within: its own when it has ready agents,
        else None (every ready agent, as for a client that states no zone)."""
        return zone if zone is not None and zone in self._zone_ids else None

    def _candidates(self, zone: str | None) -> tuple[str, ...]:
        return self._zone_ids[zone] if zone is not None else self._agent_ids

    def routed_agent_ids(self, zone: str | None) -> tuple[str, ...]:
        """The ready agents a client of `zone` is routed among (its zone's, else all)."""
        return self._candidates(self.routed_zone(zone))

    def leader_for(self, topic_id: uuid.UUID, partition: int, zone: str | None = None) -> int:
        """The partition's leader node id for a client of `zone` (agent.zones), NO_LEADER when
        no agent is ready."""
        owner = routing.partition_owner(topic_id, partition, self._candidates(self.routed_zone(zone)))
        return self._by_agent[owner].node_id if owner is not None else NO_LEADER

    def leaders_for_topic(
        self, topic_id: uuid.UUID, partition_count: int, zone: str | None = None
    ) -> tuple[int, ...]:
        """Leader node id of partitions 0..partition_count-1 for a client of `zone`: rendezvous
        hashing within the zone's ready agents, or all of them when it has none or is None
        (memoized until membership changes)."""
        routed = self.routed_zone(zone)
        key = (topic_id, partition_count, routed)
        leaders = self._leaders.get(key)
        if leaders is None:
            if len(self._leaders) >= _MAX_MEMOIZED_TOPICS:
                self._leaders.clear()
            candidates = self._candidates(routed)
            if len(candidates) == 1:
                leaders = (self._by_agent[candidates[0]].node_id,) * partition_count
            else:
                leaders = tuple(self.leader_for(topic_id, p, routed) for p in range(partition_count))
            self._leaders[key] = leaders
        return leaders

    def replicas_for_topic(
        self, topic_id: uuid.UUID, partition_count: int, zone: str | None = None
    ) -> tuple[tuple[int, ...], ...] | None:
        """Per partition, the agents a client may be sent to: the leader for a client of `zone`
        first, then the in-zone leader of every other zone (a Fetch from another zone's client
        names its zone's one as preferred read replica, KIP-392, and the Java client follows
        only a replica listed in Metadata). None while fewer than two zones have ready agents:
        the leader alone is the replica (memoized until membership changes)."""
        if len(self._zone_ids) < 2:
            return None
        routed = self.routed_zone(zone)
        key = (topic_id, partition_count, routed)
        replicas = self._replicas.get(key)
        if replicas is None:
            if len(self._replicas) >= _MAX_MEMOIZED_TOPICS:
                self._replicas.clear()
            per_zone = [self.leaders_for_topic(topic_id, partition_count, z) for z in self._zone_ids]
            leaders = self.leaders_for_topic(topic_id, partition_count, routed)
            replicas = tuple(
                (leader, *dict.fromkeys(z[p] for z in per_zone if z[p] != leader))
                for p, leader in enumerate(leaders)
            )
            self._replicas[key] = replicas
        return replicas

    def coordinator_for_group(self, group_id: str, zone: str | None = None) -> Broker | None:
        """The rendezvous choice of coordinator for a group not yet coordinated anywhere, for
        a client of `zone`: hashed over the ready agents of the zone, over all ready agents
        when it has none or is None; None when no agent is ready. A group whose lease an
        agent holds stays there (agent.groups.placement)."""
        owner = routing.group_owner(group_id, self._candidates(self.routed_zone(zone)))
        return self._by_agent[owner] if owner is not None else None

    def coordinates_group(self, group_id: str, zone: str | None = None) -> bool:
        b = self.coordinator_for_group(group_id, zone)
        return b is not None and b.node_id == self._self_node_id

    def ready_agent(self, agent_id: str) -> Broker | None:
        """The broker of a ready agent by its agent id (None: not live, or not ready)."""
        b = self._by_agent.get(agent_id)
        return b if b is not None and agent_id in self._ready_set else None


class AgentIdInUse(Exception):
    """Metadata refused this agent's registration: its id belongs to another live agent."""


class AgentRegistry:
    """Background heartbeat + live-agent refresh."""

    def __init__(
        self,
        metadata: AgentClient,
        view: LiveAgents,
        interval_ms: int = 3_000,
        wall_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        self._metadata = metadata
        self._view = view
        self._interval_s = interval_ms / 1000.0
        self._wall_ms = wall_ms
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self.beats = 0
        self.failures = 0
        self.refused: str | None = None  # metadata's message when it refused our agent id

    async def beat_once(self) -> bool:
        """One heartbeat and refresh; False (logged) if metadata could not be reached."""
        info = replace(self._view.self_info, last_heartbeat_ms=self._wall_ms())  # with `ready`
        try:
            await self._metadata.heartbeat_agent(info)
            agents = await self._metadata.live_agents()
        except MetadataError as e:
            if e.error_code not in (DUPLICATE_BROKER_REGISTRATION, CLUSTER_AUTHORIZATION_FAILED):
                self.failures += 1
                log.warning("agent heartbeat failed (keeping the last agent list): %s", e)
                return False
            self.failures += 1
            self.refused = e.message
            log.error("agent registration refused: %s", e.message)
            return False
        except (MetadataUnavailable, OSError) as e:
            self.failures += 1
            log.warning("agent heartbeat failed (keeping the last agent list): %s", e)
            return False
        self._view.update(agents)
        self.refused = None
        self.beats += 1
        return True

    async def start(self) -> None:
        """Beat once now (so the agent is listed before it serves), then keep beating.
        Raises `AgentIdInUse` if metadata refuses this agent's id."""
        if self._task is not None:
            return
        self._wake.clear()  # this beat carries whatever a wake before start() asked to send
        if not await self.beat_once() and self.refused is not None:
            raise AgentIdInUse(self.refused)
        self._task = asyncio.create_task(self._run(), name="skiff-agent-heartbeat")

    def wake(self) -> None:
        """Beat now rather than at the next tick (this agent's readiness changed)."""
        self._wake.set()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._interval_s)
            self._wake.clear()
            try:
                await self.beat_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # boundary: the heartbeat task must not die
                # a bug must not stop membership forever
                self.failures += 1
                log.exception("unexpected error in the agent heartbeat loop")

    async def close(self, *, deregister: bool = True) -> None:
        """Stop beating and, if this agent was registered, leave the registry at once (a
        restart at another address is then not refused while the old entry's TTL runs)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if deregister and self.beats:
            try:
                await asyncio.wait_for(self._metadata.deregister_agent(self._view.self_info), timeout=5)
            except (
                MetadataError,
                MetadataUnavailable,
                TimeoutError,
            ) as e:  # best effort: the entry expires after its TTL anyway
                log.warning("could not deregister agent %s: %s", self._view.self_info.agent_id, e)
