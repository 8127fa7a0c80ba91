"""How often a new consumer group's coordinator sits outside its client's zone, before zones
(rendezvous hashing over every ready agent) and now (over the ready agents of the client's
zone, agent.groups.placement), for 10,000 group ids; pure routing, no process.

    python bench/coordinator_zones.py

A group's coordinator carries its joins, heartbeats and commits (tests/e2e/test_zones.py
counts them on each agent), so this share is the share of that traffic that crossed zones.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from skiff.agent.agent_registry import LiveAgents  # noqa: E402
from skiff.metadata.types import AgentInfo  # noqa: E402

GROUPS = 10_000
LAYOUTS = {
    "3 agents, 2 zones": {"a0": "A", "a1": "A", "a2": "B"},
    "6 agents, 3 zones": {f"a{i}": "ABC"[i % 3] for i in range(6)},
}


def view(zones: dict[str, str]) -> LiveAgents:
    infos = [
        AgentInfo(a, "127.0.0.1", 9092 + i, z, last_heartbeat_ms=1, ready=True)
        for i, (a, z) in enumerate(zones.items())
    ]
    v = LiveAgents(infos[0], ttl_ms=2**40, wall_ms=lambda: 1)
    v.update(infos[1:])
    return v


def cross_share(v: LiveAgents, client_zone: str, *, in_zone: bool) -> float:
    crossed = 0
    for i in range(GROUPS):
        b = v.coordinator_for_group(f"g{i}", client_zone if in_zone else None)
        assert b is not None
        crossed += b.rack != client_zone
    return crossed / GROUPS


def main() -> None:
    print("| agents | client zone | coordinators in another zone, before | now |")
    print("|---|---|---|---|")
    for name, zones in LAYOUTS.items():
        v = view(zones)
        for zone in sorted(set(zones.values())):
            before = cross_share(v, zone, in_zone=False)
            now = cross_share(v, zone, in_zone=True)
            print(f"| {name} | {zone} | {before:.3f} | {now:.3f} |")


if __name__ == "__main__":
    main()
