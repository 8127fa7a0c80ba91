"""skiff.cli.agents: the rows `skiff agents list` prints, from the live agents metadata lists."""

from __future__ import annotations

from skiff.agent import routing
from skiff.cli.agents import agent_rows
from skiff.metadata.types import AgentInfo


def test_rows_carry_node_ids_readiness_zone_version_and_heartbeat_age() -> None:
    live = [
        AgentInfo("b", "h2", 9093, "zone-b", 9_000, (("SASL_SSL", "b.example", 9094),), ready=False),
        AgentInfo("a", "h1", 9092, None, 10_000, version="1.2.3"),
    ]
    rows = agent_rows(live, now_ms=10_500)
    ids = routing.assign_node_ids(["b", "a"])
    assert rows == [
        {
            "agent_id": "a",
            "node_id": ids["a"],
            "ready": True,
            "zone": None,
            "version": "1.2.3",
            "host": "h1",
            "port": 9092,
            "listeners": [],
            "last_heartbeat_ms": 10_000,
            "heartbeat_age_s": 0.5,
        },
        {
            "agent_id": "b",
            "node_id": ids["b"],
            "ready": False,
            "zone": "zone-b",
            "version": None,  # an agent from before versions
            "host": "h2",
            "port": 9093,
            "listeners": [{"name": "SASL_SSL", "host": "b.example", "port": 9094}],
            "last_heartbeat_ms": 9_000,
            "heartbeat_age_s": 1.5,
        },
    ]


def test_a_heartbeat_ahead_of_this_clock_is_zero_seconds_old() -> None:
    (row,) = agent_rows([AgentInfo("a", "h", 1, last_heartbeat_ms=5_000)], now_ms=4_000)
    assert row["heartbeat_age_s"] == 0.0
