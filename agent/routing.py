"""Routing across agents: rendezvous hashing of partitions and groups, and broker ids. Pure.

Any agent accepts any partition, so routing is only advice to clients: it decides which
agent a Metadata response names as the leader of each partition (and which agent is
the coordinator of each group), so that each client talks to few agents and caches stay
warm, and so that losing an agent moves only its own share.

Rendezvous (highest-random-weight) hashing: for a key K and candidate agents A1..An,
every agent gets the score `H(agent_id || 0x00 || K)` (64-bit BLAKE2b) and the highest
score wins; ties, which need a 64-bit collision, go to the smaller agent id. Every agent
computes the same owner from the same live set with no coordination. When an agent
leaves, only the keys it owned move (each to its runner-up); when one joins, it takes
about 1/n of the keys, from every other agent evenly.

Keys:
- partition: the 16 bytes of the topic UUID + the partition as a big-endian int32, so a
  topic re-created under the same name is routed afresh;
- group: `b"group:" + utf-8 group id`;
- controller: the fixed key `b"controller"` (admin clients send some requests to "the
  controller"; any agent can serve them, the choice only needs to be stable).

Broker ids: Kafka clients need an int32 node id per broker. An agent id that is a
decimal integer in [0, 2^31) is used as is; any other id is hashed to 31 bits. Hash
collisions between live agents (about n^2 / 2^32) are resolved deterministically by
probing upward in agent-id order (`assign_node_ids`), so all agents that see the same
live set agree.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Sequence

INT32_MAX = 2**31 - 1
CONTROLLER_KEY = b"controller"


def _score(candidate: str, key: bytes) -> int:
    h = hashlib.blake2b(candidate.encode("utf-8") + b"\x00" + key, digest_size=8)
    return int.from_bytes(h.digest(), "big")


def rendezvous_owner(key: bytes, candidates: Iterable[str]) -> str | None:
    """The candidate with the highest score for `key`, or None when there are none."""
    best: str | None = None
    best_score = -1
    for cand in candidates:
        s = _score(cand, key)
        if s > best_score or (s == best_score and best is not None and cand < best):
            best, best_score = cand, s
    return best


def rendezvous_order(key: bytes, candidates: Iterable[str]) -> list[str]:
    """All candidates, best first (the owner, then who takes over if it goes away, ...)."""
    return sorted(candidates, key=lambda c: (-_score(c, key), c))


def partition_key(topic_id: uuid.UUID, partition: int) -> bytes:
    return topic_id.bytes + partition.to_bytes(4, "big", signed=True)


def group_key(group_id: str) -> bytes:
    return b"group:" + group_id.encode("utf-8")


def partition_owner(topic_id: uuid.UUID, partition: int, agent_ids: Iterable[str]) -> str | None:
    return rendezvous_owner(partition_key(topic_id, partition), agent_ids)


def group_owner(group_id: str, agent_ids: Iterable[str]) -> str | None:
    return rendezvous_owner(group_key(group_id), agent_ids)


def controller_owner(agent_ids: Iterable[str]) -> str | None:
    return rendezvous_owner(CONTROLLER_KEY, agent_ids)


def node_id_for_agent(agent_id: str) -> int:
    """The preferred Kafka broker id of an agent: itself if decimal and in range, else a hash."""
    if agent_id.isascii() and agent_id.isdigit() and len(agent_id) <= 10:
        n = int(agent_id)
        if n <= INT32_MAX:
            return n
    h = hashlib.blake2b(agent_id.encode("utf-8"), digest_size=4).digest()
    return int.from_bytes(h, "big") & INT32_MAX


def assign_node_ids(agent_ids: Sequence[str]) -> dict[str, int]:
    """Unique broker ids for a set of agents, agreed by everyone who sees the same set.

    Agents are taken in id order; each gets its preferred id, or if that is taken the
    next free one upward (wrapping inside [0, 2^31)).
    """
    taken: set[int] = set()
    out: dict[str, int] = {}
    for agent_id in sorted(set(agent_ids)):
        n = node_id_for_agent(agent_id)
        while n in taken:
            n = (n + 1) & INT32_MAX
        taken.add(n)
        out[agent_id] = n
    return out
