"""Where a consumer group is coordinated: with its lease holder, else in the client's zone.

The rule, for a group and a client of zone Z (agent.zones; None when it states none). Both
FindCoordinator's answer and the check of every group request (`accepts`, through
agent.groups.fencing) apply it, so an agent accepts exactly the groups it is named for:

1. an agent holds the group's unexpired coordinator lease (agent.groups.fencing) and is
   ready: that agent, whatever its zone and Z. A coordinated group stays where it is, so the
   members of a group spread over several zones all reach one coordinator, and the group's
   state (in memory, under the lease) never splits;
2. else the rendezvous choice among the ready agents of Z, among all ready agents when Z has
   none or is None (`LiveAgents.coordinator_for_group`): a new group, or one whose
   coordinator let it go or died, is taken in its members' zone. A client of no zone sees
   exactly the choice it saw before zones.

Two clients of different zones asking at once for a vacant group are each sent to their
zone's choice; both agents try to take the lease, metadata grants it to one, the other
answers NOT_COORDINATOR and learns the holder from the refusal (`note`), and the client asks
again. The lease decides who coordinates; this module only advises, so a stale view costs
a retry, never two coordinators.

Lease holders come from metadata (`group_lease_holders`, one read for many groups) and are
cached per group: a holder for `holder_ttl_ms` (3 s), "vacant" for `vacant_ttl_ms` (1 s,
shorter: a vacant group is about to be taken), at most `max_groups` entries (the oldest
dropped first). This agent's own acquisitions, refusals and releases update its entries at
once. Metadata out of reach: the last known holder if any, else vacant (not cached).

Counters: FindCoordinator answers by the named agent's zone against the client's
(`count_answer`: same, other, unknown), exported as
`skiff_find_coordinator_answers_total{client_zone}`.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, Metric
from skiff.agent.zones import CLASSES, classify
from skiff.metadata.errors import MetadataError, MetadataUnavailable
from skiff.metadata.wire.bounds import MAX_ITEMS

if TYPE_CHECKING:
    from skiff.agent.agent_registry import Broker, LiveAgents
    from skiff.metadata.wire.operations import AgentClient

log = logging.getLogger(__name__)

DEFAULT_HOLDER_TTL_MS = 3_000
DEFAULT_VACANT_TTL_MS = 1_000
DEFAULT_MAX_GROUPS = 10_000


def _monotonic_ms() -> float:
    return time.monotonic() * 1000.0


class GroupPlacement:
    """Which agent coordinates a group for a client of a zone. Loop-confined."""

    def __init__(
        self,
        metadata: AgentClient,
        agents: LiveAgents,
        *,
        holder_ttl_ms: int = DEFAULT_HOLDER_TTL_MS,
        vacant_ttl_ms: int = DEFAULT_VACANT_TTL_MS,
        max_groups: int = DEFAULT_MAX_GROUPS,
        monotonic_ms: Callable[[], float] = _monotonic_ms,
    ) -> None:
        assert max_groups > 0 and 0 < vacant_ttl_ms <= holder_ttl_ms
        self._metadata = metadata
        self.agents = agents
        self.holder_ttl_ms = holder_ttl_ms
        self.vacant_ttl_ms = vacant_ttl_ms
        self.max_groups = max_groups
        self._now = monotonic_ms
        # group -> (holder agent id or None for vacant, monotonic ms it is trusted until)
        self._cache: OrderedDict[str, tuple[str | None, float]] = OrderedDict()
        self.lookups = 0  # metadata reads, for tests and the docs' numbers
        self.answers: dict[str, int] = dict.fromkeys(CLASSES, 0)

    # ------------------------------------------------------------------ the cache

    def note(self, group_id: str, holder: str | None) -> None:
        """What this agent learnt first-hand: it took the lease (`holder` itself), was
        refused by `holder`, or released it (None)."""
        ttl = self.holder_ttl_ms if holder is not None else self.vacant_ttl_ms
        self._cache[group_id] = (holder, self._now() + ttl)
        self._cache.move_to_end(group_id)
        while len(self._cache) > self.max_groups:
            self._cache.popitem(last=False)

    def cached(self, group_id: str) -> tuple[bool, str | None]:
        """(fresh, holder): whether the entry is still trusted, and its holder."""
        entry = self._cache.get(group_id)
        if entry is None:
            return False, None
        return self._now() < entry[1], entry[0]

    async def holders(self, group_ids: Sequence[str]) -> dict[str, str | None]:
        """The lease holder (None: vacant) of each group, from the cache or one metadata read
        for the groups it lacks."""
        found: dict[str, str | None] = {}
        missing: list[str] = []
        for g in dict.fromkeys(group_ids):
            fresh, holder = self.cached(g)
            if fresh:
                found[g] = holder
            else:
                missing.append(g)
        for i in range(0, len(missing), MAX_ITEMS):
            batch = missing[i : i + MAX_ITEMS]
            try:
                self.lookups += 1
                held = await self._metadata.group_lease_holders(batch)
            except (MetadataUnavailable, MetadataError, OSError) as e:
                log.warning("group lease holders not read (routing on what is known): %s", e)
                found.update((g, self.cached(g)[1]) for g in batch)
                continue
            for g in batch:
                found[g] = held.get(g)
                self.note(g, found[g])
        return found

    # ------------------------------------------------------------------ the rule

    def _choice(self, group_id: str, holder: str | None, zone: str | None) -> Broker | None:
        if holder is not None:
            b = self.agents.ready_agent(holder)
            if b is not None:
                return b
            # a holder that is gone or not ready: its lease lapses or is released, and the
            # group is taken in the client's zone (the acquisition waits for the lapse)
        return self.agents.coordinator_for_group(group_id, zone)

    async def choose(self, group_id: str, zone: str | None) -> Broker | None:
        """The group's coordinator for a client of `zone` (the module docstring's rule);
        None when no agent is ready."""
        holder = (await self.holders([group_id]))[group_id]
        return self._choice(group_id, holder, zone)

    async def choose_many(self, group_ids: Sequence[str], zone: str | None) -> dict[str, Broker | None]:
        held = await self.holders(group_ids)
        return {g: self._choice(g, held[g], zone) for g in held}

    async def accepts(self, group_id: str, zone: str | None) -> bool:
        """Whether this agent may take (or keep) the group for a client of `zone`."""
        b = await self.choose(group_id, zone)
        return b is not None and b.node_id == self.agents.self_node_id

    # ------------------------------------------------------------------ counters

    def count_answer(self, client_zone: str | None, coordinator: Broker) -> None:
        """One FindCoordinator answer naming `coordinator` to a client of `client_zone`."""
        self.answers[classify(coordinator.rack, client_zone)] += 1


def placement_families(placements: Iterable[GroupPlacement]) -> Iterator[Metric]:
    """`skiff_find_coordinator_answers_total{client_zone}` and the lease-holder lookups."""
    answers = CounterMetricFamily(
        "skiff_find_coordinator_answers",
        "FindCoordinator answers (groups and transactional ids), by the named agent's zone "
        "against the client's: same, other, unknown (either states no zone)",
        labels=["client_zone"],
    )
    totals = dict.fromkeys(CLASSES, 0)
    lookups = 0
    for p in placements:
        lookups += p.lookups
        for cls, n in p.answers.items():
            totals[cls] += n
    for cls, n in totals.items():
        answers.add_metric([cls], n)
    yield answers
    yield CounterMetricFamily(
        "skiff_group_lease_holder_lookups",
        "Reads of group lease holders from metadata (FindCoordinator and group requests on a cache miss)",
        value=lookups,
    )
