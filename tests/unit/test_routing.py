"""Rendezvous routing and broker ids (agent.routing), the LiveAgents view built on them, and the
TopicCache that resolves the topics being routed."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st
from skiff.agent import routing
from skiff.agent.agent_registry import LiveAgents
from skiff.agent.topic_cache import TopicCache
from skiff.metadata.types import AgentInfo, Topic

AGENTS = ["agent-a", "agent-b", "agent-c"]
TOPIC = uuid.UUID("8d3c4a2e-0f5b-4c1e-9a77-1e2f3a4b5c6d")

agent_ids = st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=8, unique=True)
keys = st.binary(min_size=0, max_size=24)


def test_no_candidates_means_no_owner():
    assert routing.rendezvous_owner(b"k", []) is None
    assert routing.partition_owner(TOPIC, 0, []) is None


def test_owner_is_deterministic_and_order_independent():
    for p in range(50):
        assert routing.partition_owner(TOPIC, p, AGENTS) == routing.partition_owner(TOPIC, p, sorted(AGENTS))


def test_partitions_spread_evenly():
    counts = Counter(routing.partition_owner(TOPIC, p, AGENTS) for p in range(3000))
    assert set(counts) == set(AGENTS)
    for n in counts.values():
        assert 850 <= n <= 1150, counts


def test_losing_an_agent_moves_only_its_partitions():
    before = {p: routing.partition_owner(TOPIC, p, AGENTS) for p in range(1000)}
    survivors = ["agent-a", "agent-c"]
    after = {p: routing.partition_owner(TOPIC, p, survivors) for p in range(1000)}
    for p in range(1000):
        if before[p] != "agent-b":
            assert after[p] == before[p]
        else:
            assert after[p] in survivors


def test_a_new_agent_takes_about_its_share_and_nothing_else_moves():
    before = {p: routing.partition_owner(TOPIC, p, AGENTS) for p in range(3000)}
    grown = [*AGENTS, "agent-d"]
    after = {p: routing.partition_owner(TOPIC, p, grown) for p in range(3000)}
    moved = [p for p in range(3000) if after[p] != before[p]]
    assert all(after[p] == "agent-d" for p in moved)
    assert 600 <= len(moved) <= 900  # about 1/4


def test_partition_key_distinguishes_topics_and_partitions():
    other = uuid.UUID(int=TOPIC.int ^ 1)
    assert routing.partition_key(TOPIC, 1) != routing.partition_key(TOPIC, 2)
    assert routing.partition_key(TOPIC, 1) != routing.partition_key(other, 1)
    assert len(routing.partition_key(TOPIC, 7)) == 20


def test_groups_and_controller_are_routed_too():
    counts = Counter(routing.group_owner(f"group-{i}", AGENTS) for i in range(900))
    assert set(counts) == set(AGENTS)
    assert routing.controller_owner(AGENTS) == routing.controller_owner(list(reversed(AGENTS)))
    assert routing.group_key("g") != routing.partition_key(TOPIC, 0)


@given(agent_ids, keys)
def test_order_starts_with_the_owner(ids, key):
    order = routing.rendezvous_order(key, ids)
    assert sorted(order) == sorted(ids)
    assert order[0] == routing.rendezvous_owner(key, ids)


@given(agent_ids, keys, st.data())
def test_removing_a_non_owner_never_changes_the_owner(ids, key, data):
    owner = routing.rendezvous_owner(key, ids)
    others = [a for a in ids if a != owner]
    if not others:
        return
    gone = data.draw(st.sampled_from(others))
    assert routing.rendezvous_owner(key, [a for a in ids if a != gone]) == owner


def test_node_id_of_a_decimal_agent_id_is_itself():
    assert routing.node_id_for_agent("0") == 0
    assert routing.node_id_for_agent("17") == 17
    assert routing.node_id_for_agent(str(2**31 - 1)) == 2**31 - 1


@given(st.text(min_size=1, max_size=40))
def test_node_ids_are_stable_non_negative_int32(agent_id):
    n = routing.node_id_for_agent(agent_id)
    assert 0 <= n <= 2**31 - 1
    assert routing.node_id_for_agent(agent_id) == n


def test_out_of_range_or_non_ascii_digits_are_hashed():
    assert routing.node_id_for_agent(str(2**31)) != 2**31
    assert routing.node_id_for_agent("٣") == routing.node_id_for_agent("٣")  # arabic-indic digit: hashed
    assert 0 <= routing.node_id_for_agent("٣") < 2**31


def test_assign_node_ids_resolves_collisions_deterministically():
    ids = routing.assign_node_ids(["5", "05", "6", "x"])
    assert ids["05"] == 5  # "05" < "5" in id order, so it keeps the preferred id
    assert ids["5"] != 5
    assert len(set(ids.values())) == 4
    assert routing.assign_node_ids(["x", "6", "05", "5"]) == ids


@settings(max_examples=50)
@given(agent_ids)
def test_assigned_node_ids_are_unique(ids):
    assigned = routing.assign_node_ids(ids)
    assert set(assigned) == set(ids)
    assert len(set(assigned.values())) == len(ids)


# --- LiveAgents ---------------------------------------------------------------------------


def _view(now: list[int]) -> LiveAgents:
    return LiveAgents(AgentInfo("agent-a", "10.0.0.1", 9092, "az1"), ttl_ms=10_000, wall_ms=lambda: now[0])


def test_live_agents_always_contains_itself():
    view = _view([1_000_000])
    assert [b.agent_id for b in view.brokers()] == ["agent-a"]
    assert view.controller_id == view.self_node_id
    assert view.leaders_for_topic(TOPIC, 3) == (view.self_node_id,) * 3
    assert view.coordinator_for_group("g").agent_id == "agent-a"
    view.update([])  # metadata does not list us yet
    assert [b.agent_id for b in view.brokers()] == ["agent-a"]


def test_live_agents_routes_over_the_live_set_and_drops_stale_agents():
    now = [1_000_000]
    view = _view(now)
    view.update(
        [
            AgentInfo("agent-b", "10.0.0.2", 9092, "az2", last_heartbeat_ms=now[0] - 1000),
            AgentInfo("agent-c", "10.0.0.3", 9092, None, last_heartbeat_ms=now[0] - 60_000),  # stale
            AgentInfo("agent-a", "stale-address", 1, None, last_heartbeat_ms=now[0]),  # ourselves: ignored
        ]
    )
    brokers = {b.agent_id: b for b in view.brokers()}
    assert set(brokers) == {"agent-a", "agent-b"}
    assert brokers["agent-a"].host == "10.0.0.1" and brokers["agent-b"].rack == "az2"
    leaders = view.leaders_for_topic(TOPIC, 200)
    by_agent = {b.node_id: b.agent_id for b in view.brokers()}
    expected = [routing.partition_owner(TOPIC, p, ["agent-a", "agent-b"]) for p in range(200)]
    assert [by_agent[n] for n in leaders] == expected
    assert set(expected) == {"agent-a", "agent-b"}


def test_live_agents_version_changes_only_with_membership():
    now = [5_000]
    view = _view(now)
    b = AgentInfo("agent-b", "h", 1, None, last_heartbeat_ms=now[0])
    view.update([b])
    v = view.version
    view.update([AgentInfo("agent-b", "h", 1, None, last_heartbeat_ms=now[0] + 100)])
    assert view.version == v
    view.update([])
    assert view.version == v + 1
    view.set_self_address("10.9.9.9", 19092)
    assert view.brokers()[0].host == "10.9.9.9" and view.self_info.port == 19092


# --- TopicCache (name/id lookups in front of metadata) ----------------------------------------------------


class _CountingMetadata:
    def __init__(self) -> None:
        self.topics: dict[str, Topic] = {}
        self.calls: Counter[str] = Counter()

    async def describe_topics(self, names):
        self.calls["describe_topics"] += 1
        return {n: self.topics[n] for n in names if n in self.topics}

    async def topics_by_id(self, ids):
        self.calls["topics_by_id"] += 1
        return {t.topic_id: t for t in self.topics.values() if t.topic_id in ids}

    async def list_topics(self):
        self.calls["list_topics"] += 1
        await asyncio.sleep(0.01)
        return list(self.topics.values())


def test_topic_cache_hits_misses_and_ttl():
    md = _CountingMetadata()
    now = [0.0]
    cache = TopicCache(md, ttl_ms=1000, monotonic=lambda: now[0])  # type: ignore[arg-type]
    a = Topic("a", uuid.uuid4(), 2)
    md.topics["a"] = a

    async def go() -> None:
        assert await cache.get_by_name(["a", "b"]) == {"a": a}
        assert await cache.get("a") == a and await cache.get_by_id([a.topic_id]) == {a.topic_id: a}
        assert md.calls == Counter(describe_topics=1)  # "a" cached by name and id; "b" looked up once
        assert await cache.get("b") is None  # misses are never cached: a topic made elsewhere shows up
        assert md.calls["describe_topics"] == 2
        now[0] = 2.0  # expired
        del md.topics["a"]
        assert await cache.get("a") is None
        assert cache.cached("a") is None  # metadata said it is gone

    asyncio.run(go())


def test_topic_cache_lookups_are_single_flight_per_key():
    """Many requests missing one expired topic at once cause one metadata lookup, not one each."""
    md = _CountingMetadata()
    now = [0.0]
    cache = TopicCache(md, ttl_ms=1000, monotonic=lambda: now[0])  # type: ignore[arg-type]
    a, b = Topic("a", uuid.uuid4(), 2), Topic("b", uuid.uuid4(), 1)
    md.topics = {"a": a, "b": b}
    gate = asyncio.Event()
    describe = md.describe_topics
    by_id = md.topics_by_id

    async def gated_describe(names):
        await gate.wait()
        return await describe(names)

    async def gated_by_id(ids):
        await gate.wait()
        return await by_id(ids)

    md.describe_topics = gated_describe  # type: ignore[method-assign]
    md.topics_by_id = gated_by_id  # type: ignore[method-assign]

    async def go() -> None:
        waiters = [asyncio.ensure_future(cache.get("a")) for _ in range(50)]
        both = asyncio.ensure_future(cache.get_by_name(["a", "b", "gone"]))  # joins "a", loads "b", "gone"
        ids = [asyncio.ensure_future(cache.get_by_id([b.topic_id])) for _ in range(20)]
        await asyncio.sleep(0)
        gate.set()
        assert await asyncio.gather(*waiters) == [a] * 50
        assert await both == {"a": a, "b": b}
        assert await asyncio.gather(*ids) == [{b.topic_id: b}] * 20
        assert md.calls == Counter(describe_topics=2, topics_by_id=1)
        now[0] = 2.0  # expired: the next burst loads once more
        assert await asyncio.gather(*(cache.get("a") for _ in range(10))) == [a] * 10
        assert md.calls["describe_topics"] == 3

    asyncio.run(go())


def test_topic_cache_put_invalidate_and_single_flight_listing():
    md = _CountingMetadata()
    cache = TopicCache(md, ttl_ms=60_000)  # type: ignore[arg-type]
    t1, t2 = Topic("x", uuid.uuid4(), 1), Topic("y", uuid.uuid4(), 1)
    md.topics = {"x": t1, "y": t2}

    async def go() -> None:
        lists = await asyncio.gather(*(cache.all_topics() for _ in range(5)))
        assert all(lst == [t1, t2] for lst in lists)
        assert md.calls["list_topics"] == 1
        assert await cache.get("y") == t2 and md.calls["describe_topics"] == 0  # filled by the listing
        grown = Topic("x", t1.topic_id, 4)
        cache.put(grown)
        assert await cache.get("x") == grown
        assert await cache.all_topics() == [t1, t2] and md.calls["list_topics"] == 2  # list was dropped
        cache.invalidate(names=["y"])
        assert cache.cached("y") is None and cache.cached("x") is not None
        cache.invalidate()
        assert cache.cached("x") is None

    asyncio.run(go())
