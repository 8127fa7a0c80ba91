"""Server-side partition assignors of the consumer group protocol (KIP-848): `uniform` (the
default) and `range`, as Kafka's group coordinator names them. Pure functions.

Input: the members (each with the topic ids it subscribes to and its current target
assignment, for stickiness) and the partition count of every subscribed topic. Output: a
target assignment per member, `{topic id: frozenset(partitions)}`. Every partition of a
subscribed topic goes to exactly one member subscribed to it; a topic nobody subscribes to
is not assigned. Ties are broken by member id, so the result is deterministic.

- `uniform` (Kafka's UniformAssignor): balanced and sticky. With homogeneous
  subscriptions (every member subscribes to the same topics, the usual case) each member
  gets `N // M` or `N // M + 1` of the N partitions; members keep as many of their current
  partitions as their quota allows (members already holding more get the `+ 1` quotas
  first), then the rest are dealt to those below quota in member-id order. With
  heterogeneous subscriptions: current partitions that are still valid stay, the others go
  one by one (topics with the fewest subscribers first) to the least loaded eligible member,
  then partitions move along chains of eligible members from the most loaded to one
  holding at least two fewer, while there is such a chain (each lowers the sum of squared
  loads, so it ends; bounded by the partition count).
- `range` (Kafka's RangeAssignor, server side): per topic, its subscribers sorted by member
  id get contiguous ranges, the first `N % M` one partition more. Topics with the same
  partition count and subscribers are co-partitioned (a member gets the same partition
  numbers of each), which is what joins of co-partitioned topics need.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

Assignment = dict[uuid.UUID, frozenset[int]]
TopicPartition = tuple[uuid.UUID, int]


@dataclass(frozen=True)
class MemberSpec:
    """What an assignor knows of a member."""

    topics: frozenset[uuid.UUID]  # subscribed topic ids (those that exist)
    current: Mapping[uuid.UUID, frozenset[int]] = field(default_factory=dict)  # its current target


Assignor = Callable[[Mapping[str, MemberSpec], Mapping[uuid.UUID, int]], dict[str, Assignment]]


def _as_assignment(parts: list[TopicPartition]) -> Assignment:
    out: dict[uuid.UUID, set[int]] = {}
    for topic, p in parts:
        out.setdefault(topic, set()).add(p)
    return {t: frozenset(ps) for t, ps in out.items()}


def _valid_current(
    members: Mapping[str, MemberSpec], counts: Mapping[uuid.UUID, int]
) -> dict[str, list[TopicPartition]]:
    """Each member's current partitions that still exist and that it still subscribes to,
    sorted; a partition claimed by two members (cannot happen from a valid target) stays
    with the first by member id."""
    seen: set[TopicPartition] = set()
    out: dict[str, list[TopicPartition]] = {}
    for mid in sorted(members):
        spec = members[mid]
        kept: list[TopicPartition] = []
        for topic in sorted(spec.current, key=str):
            if topic not in spec.topics or topic not in counts:
                continue
            for p in sorted(spec.current[topic]):
                if p < counts[topic] and (topic, p) not in seen:
                    seen.add((topic, p))
                    kept.append((topic, p))
        out[mid] = kept
    return out


def uniform(members: Mapping[str, MemberSpec], counts: Mapping[uuid.UUID, int]) -> dict[str, Assignment]:
    if not members:
        return {}
    subscriptions = {spec.topics for spec in members.values()}
    if len(subscriptions) == 1:
        return _uniform_homogeneous(members, counts)
    return _uniform_heterogeneous(members, counts)


def _all_partitions(topics: frozenset[uuid.UUID], counts: Mapping[uuid.UUID, int]) -> list[TopicPartition]:
    return [(t, p) for t in sorted(topics, key=str) if t in counts for p in range(counts[t])]


def _uniform_homogeneous(
    members: Mapping[str, MemberSpec], counts: Mapping[uuid.UUID, int]
) -> dict[str, Assignment]:
    topics = next(iter(members.values())).topics
    everything = _all_partitions(topics, counts)
    order = sorted(members)
    base, extra = divmod(len(everything), len(order))
    kept = _valid_current(members, counts)
    quota = dict.fromkeys(order, base)
    # The `+ 1` quotas go first to members that already hold more than `base` (stickiness).
    for mid in sorted(order, key=lambda m: (-len(kept[m]), m)):
        if extra and len(kept[mid]) > base:
            quota[mid] += 1
            extra -= 1
    for mid in order:
        if extra and quota[mid] == base:
            quota[mid] += 1
            extra -= 1
    taken: set[TopicPartition] = set()
    for mid in order:
        kept[mid] = kept[mid][: quota[mid]]
        taken.update(kept[mid])
    free = iter(tp for tp in everything if tp not in taken)
    for mid in order:
        while len(kept[mid]) < quota[mid]:
            kept[mid].append(next(free))
    return {mid: _as_assignment(kept[mid]) for mid in order}


def _uniform_heterogeneous(
    members: Mapping[str, MemberSpec], counts: Mapping[uuid.UUID, int]
) -> dict[str, Assignment]:
    order = sorted(members)
    subscribers: dict[uuid.UUID, list[str]] = {}
    for mid in order:
        for topic in members[mid].topics:
            if topic in counts:
                subscribers.setdefault(topic, []).append(mid)
    kept = _valid_current(members, counts)
    owned = {mid: set(kept[mid]) for mid in order}
    taken = {tp for parts in kept.values() for tp in parts}
    # Deal the rest: topics with the fewest subscribers first (they have the fewest choices).
    for topic in sorted(subscribers, key=lambda t: (len(subscribers[t]), str(t))):
        for p in range(counts[topic]):
            if (topic, p) not in taken:
                target = min(subscribers[topic], key=lambda m: (len(owned[m]), m))
                owned[target].add((topic, p))
    _rebalance(owned, subscribers)
    return {mid: _as_assignment(sorted(owned[mid], key=lambda tp: (str(tp[0]), tp[1]))) for mid in order}


def _rebalance(owned: dict[str, set[TopicPartition]], subscribers: Mapping[uuid.UUID, list[str]]) -> None:
    """Move partitions along chains (giver -> ... -> taker, each link a partition the next
    member may take) while a member holds two more than one it can reach: every chain lowers
    the sum of squared loads, so this ends (and is bounded by the partition count)."""
    total = sum(len(ps) for ps in owned.values())
    for _ in range(total + 1):
        chain = _find_chain(owned, subscribers)
        if chain is None:
            return
        for giver, tp, taker in chain:
            owned[giver].discard(tp)
            owned[taker].add(tp)


def _find_chain(
    owned: dict[str, set[TopicPartition]], subscribers: Mapping[uuid.UUID, list[str]]
) -> list[tuple[str, TopicPartition, str]] | None:
    """A shortest chain of moves from a most loaded member to one holding at least two fewer."""
    for giver in sorted(owned, key=lambda m: (-len(owned[m]), m)):
        parent: dict[str, tuple[str, TopicPartition]] = {}
        queue = [giver]
        for member in queue:  # breadth first: the queue grows while it is walked
            for tp in sorted(owned[member], key=lambda tp: (str(tp[0]), tp[1])):
                for taker in subscribers[tp[0]]:
                    if taker == giver or taker in parent:
                        continue
                    parent[taker] = (member, tp)
                    if len(owned[taker]) + 1 < len(owned[giver]):
                        chain: list[tuple[str, TopicPartition, str]] = []
                        node = taker
                        while node != giver:
                            prev, moved = parent[node]
                            chain.append((prev, moved, node))
                            node = prev
                        return chain
                    queue.append(taker)
    return None


def range_assignor(
    members: Mapping[str, MemberSpec], counts: Mapping[uuid.UUID, int]
) -> dict[str, Assignment]:
    parts: dict[str, list[TopicPartition]] = {mid: [] for mid in members}
    topics = sorted({t for spec in members.values() for t in spec.topics if t in counts}, key=str)
    for topic in topics:
        subs = sorted(mid for mid, spec in members.items() if topic in spec.topics)
        base, extra = divmod(counts[topic], len(subs))
        start = 0
        for i, mid in enumerate(subs):
            size = base + (1 if i < extra else 0)
            parts[mid].extend((topic, p) for p in range(start, start + size))
            start += size
    return {mid: _as_assignment(ps) for mid, ps in parts.items()}


UNIFORM = "uniform"
RANGE = "range"
ASSIGNORS: dict[str, Assignor] = {UNIFORM: uniform, RANGE: range_assignor}
DEFAULT_ASSIGNOR = UNIFORM
