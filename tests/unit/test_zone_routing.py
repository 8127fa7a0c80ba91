"""Zone-aware routing (agent.zones, agent.agent_registry): the client.id rule, a connection's
zone (client.id, then a Fetch's rack_id for good), leaders by rendezvous hashing within the
client's zone, the fallback to every ready agent, the replicas listed when agents span zones,
vacant groups' coordinators hashed within the zone, and the cross-zone byte classes."""

from __future__ import annotations

import uuid

import pytest
from skiff.agent import routing
from skiff.agent.agent_registry import LiveAgents
from skiff.agent.config import AgentConfig
from skiff.agent.zones import ClientZone, ZoneTraffic, classify, zone_from_client_id
from skiff.metadata.types import AgentInfo

TOPIC = uuid.UUID("5b7f9c1e-2d3a-4e5f-8a9b-0c1d2e3f4a5b")
NOW = 1_000_000
PARTITIONS = 300


@pytest.mark.parametrize(
    ("client_id", "zone"),
    [
        ("myapp,ws_az=us-east-1a", "us-east-1a"),
        ("az=eu-west-1b", "eu-west-1b"),
        ("svc, zone = use1-az1 ,x=y", "use1-az1"),
        ("AZ=europe-west1-b", "europe-west1-b"),  # keys compare case-insensitively
        ("a=b,az=,zone=z2", "z2"),  # an empty value is no zone: the next part is looked at
        ("az=z1,zone=z2", "z1"),  # the first valid part wins
        ("myapp", None),
        ("zone=", None),
        ("myapp,az=a b", None),  # blanks inside: not a zone name
        ("myapp,region=us-east-1", None),
        ("rack=z1", None),
        ("az=" + "x" * 65, None),  # longer than MAX_ZONE_CHARS
        ("", None),
        (None, None),
    ],
)
def test_the_client_id_rule(client_id: str | None, zone: str | None) -> None:
    assert zone_from_client_id(client_id) == zone


def test_a_connections_zone_follows_its_client_id_until_a_fetch_names_a_rack() -> None:
    state = ClientZone()
    state.saw_client_id("app,az=a")
    assert state.zone == "a"
    state.saw_client_id("app")  # a client.id without a zone: none
    assert state.zone is None
    state.saw_rack_id("")  # an empty rack_id (client.rack unset) changes nothing
    state.saw_client_id("app,zone=b")
    assert state.zone == "b" and not state.from_rack
    state.saw_rack_id("c")
    assert state.zone == "c" and state.from_rack
    state.saw_client_id("app,zone=d")  # the rack_id is the client's own setting: it stays
    assert state.zone == "c"


def _view(zones: dict[str, str | None], ready: set[str] | None = None) -> LiveAgents:
    """A routing view seen from the first agent of `zones` (agent id -> zone)."""
    ready = set(zones) if ready is None else ready
    infos = [
        AgentInfo(a, "127.0.0.1", 9092 + i, z, last_heartbeat_ms=NOW, ready=a in ready)
        for i, (a, z) in enumerate(zones.items())
    ]
    view = LiveAgents(infos[0], ttl_ms=10_000, wall_ms=lambda: NOW)
    view.update(infos[1:])
    return view


THREE_IN_TWO = {"agent-0": "zone-a", "agent-1": "zone-a", "agent-2": "zone-b"}


def _leaders(view: LiveAgents, zone: str | None) -> list[str]:
    by_node = {b.node_id: b.agent_id for b in view.brokers()}
    return [by_node[n] for n in view.leaders_for_topic(TOPIC, PARTITIONS, zone)]


def test_clients_of_a_zone_are_given_leaders_of_that_zone_by_rendezvous_within_it() -> None:
    view = _view(THREE_IN_TWO)
    assert view.zones() == ("zone-a", "zone-b")
    in_a = _leaders(view, "zone-a")
    assert in_a == [routing.partition_owner(TOPIC, p, ["agent-0", "agent-1"]) for p in range(PARTITIONS)]
    assert set(in_a) == {"agent-0", "agent-1"}  # both of zone A's agents lead a share
    assert _leaders(view, "zone-b") == ["agent-2"] * PARTITIONS


def test_clients_without_a_zone_see_todays_answer() -> None:
    view = _view(THREE_IN_TWO)
    everyone = ["agent-0", "agent-1", "agent-2"]
    expected = [routing.partition_owner(TOPIC, p, everyone) for p in range(PARTITIONS)]
    assert _leaders(view, None) == expected
    # a zone no agent is in is routed like no zone
    assert _leaders(view, "zone-c") == expected


def test_a_zone_without_ready_agents_falls_back_to_every_ready_agent() -> None:
    view = _view(THREE_IN_TWO, ready={"agent-0", "agent-1"})
    assert view.routed_zone("zone-b") is None
    assert set(_leaders(view, "zone-b")) == {"agent-0", "agent-1"}
    # and back when zone B's agent is ready again
    view.update([AgentInfo("agent-2", "127.0.0.1", 9094, "zone-b", last_heartbeat_ms=NOW, ready=True)])
    assert _leaders(view, "zone-b") == ["agent-2"] * PARTITIONS


def test_agents_without_a_zone_lead_only_for_clients_routed_over_everyone() -> None:
    view = _view({"agent-0": None, "agent-1": "zone-a"})
    assert _leaders(view, "zone-a") == ["agent-1"] * PARTITIONS
    assert set(_leaders(view, None)) == {"agent-0", "agent-1"}


def test_replicas_name_the_leader_then_every_other_zones_leader() -> None:
    view = _view(THREE_IN_TWO)
    by_node = {b.node_id: b.agent_id for b in view.brokers()}
    in_a, in_b = _leaders(view, "zone-a"), _leaders(view, "zone-b")
    replicas = view.replicas_for_topic(TOPIC, PARTITIONS, "zone-b")
    assert replicas is not None
    assert [[by_node[n] for n in r] for r in replicas] == [[in_b[p], in_a[p]] for p in range(PARTITIONS)]
    for_none = view.replicas_for_topic(TOPIC, PARTITIONS, None)
    assert for_none is not None
    for p, r in enumerate(for_none):
        names = [by_node[n] for n in r]
        assert names[0] == _leaders(view, None)[p] and set(names) >= {in_a[p], in_b[p]}
        assert len(names) == len(set(names))
    # one zone (or none): the leader alone, as before zones
    assert _view({"agent-0": "zone-a", "agent-1": "zone-a"}).replicas_for_topic(TOPIC, 3) is None
    assert _view({"agent-0": None, "agent-1": None}).replicas_for_topic(TOPIC, 3) is None


def test_a_vacant_groups_coordinator_is_hashed_within_the_clients_zone() -> None:
    """The choice for a group nobody coordinates yet (agent.groups.placement keeps a leased
    group with its holder): rendezvous within the client's zone; every ready agent for a
    client of no zone (as before zones) or of a zone without ready agents."""
    view = _view(THREE_IN_TWO)
    everyone = ["agent-0", "agent-1", "agent-2"]
    for i in range(50):
        g = f"g{i}"
        assert view.coordinator_for_group(g).agent_id == routing.group_owner(g, everyone)  # type: ignore[union-attr]
        assert view.coordinator_for_group(g, "zone-unknown").agent_id == routing.group_owner(g, everyone)  # type: ignore[union-attr]
        assert view.coordinator_for_group(g, "zone-b").agent_id == "agent-2"  # type: ignore[union-attr]
        a = view.coordinator_for_group(g, "zone-a")
        assert a is not None and a.agent_id == routing.group_owner(g, ["agent-0", "agent-1"])
    assert view.ready_agent("agent-2") is not None and view.ready_agent("agent-9") is None
    not_ready = _view(THREE_IN_TWO, ready={"agent-0", "agent-1"})
    assert not_ready.ready_agent("agent-2") is None
    assert not_ready.coordinator_for_group("g", "zone-b").agent_id in {"agent-0", "agent-1"}  # type: ignore[union-attr]


def test_bytes_are_classified_by_the_clients_zone_against_the_agents() -> None:
    assert classify("a", "a") == "same"
    assert classify("a", "b") == "other"
    assert classify("a", None) == classify(None, "a") == classify(None, None) == "unknown"
    traffic = ZoneTraffic("a")
    traffic.count("in", "a", 10)
    traffic.count("in", "b", 7)
    traffic.count("out", None, 5)
    assert traffic.bytes == {
        ("in", "same"): 10,
        ("in", "other"): 7,
        ("in", "unknown"): 0,
        ("out", "same"): 0,
        ("out", "other"): 0,
        ("out", "unknown"): 5,
    }


def test_the_agents_zone_is_checked_at_start_up() -> None:
    assert AgentConfig.from_env({"SKIFF_ZONE": "us-east-1a"}).zone == "us-east-1a"
    with pytest.raises(ValueError, match="zone must be"):
        AgentConfig.from_env({"SKIFF_ZONE": "us east"})


def test_a_transactional_ids_coordinator_is_hashed_within_the_clients_zone() -> None:
    """FindCoordinator for a transactional id: in the client's zone (its state is in metadata,
    so any agent may serve it); re-drives stay with the zone-free choice, one agent per id."""
    from skiff.agent.transactions.coordinator import TxnCoordinator, txn_key

    view = _view(THREE_IN_TWO)
    txn = TxnCoordinator(metadata=None, store=None, agents=view, agent_id="agent-0", wall_ms=lambda: NOW)  # type: ignore[arg-type]
    everyone = ["agent-0", "agent-1", "agent-2"]
    for i in range(50):
        tid = f"tx{i}"
        assert txn.coordinator_for(tid, "zone-b").agent_id == "agent-2"  # type: ignore[union-attr]
        in_a = routing.rendezvous_owner(txn_key(tid), ["agent-0", "agent-1"])
        assert txn.coordinator_for(tid, "zone-a").agent_id == in_a  # type: ignore[union-attr]
        global_owner = routing.rendezvous_owner(txn_key(tid), everyone)
        assert txn.coordinator_for(tid).agent_id == global_owner  # type: ignore[union-attr]
        assert txn.coordinates(tid) == (global_owner == "agent-0")
