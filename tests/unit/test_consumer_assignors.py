"""The consumer group protocol's server-side assignors (`agent.groups.assignors`): every
partition of a subscribed topic goes to exactly one subscriber, `uniform` balances and
sticks, `range` deals contiguous, co-partitioned ranges."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st
from skiff.agent.groups.assignors import ASSIGNORS, MemberSpec, range_assignor, uniform

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
T3 = uuid.UUID(int=3)


def counts_of(result: dict[str, dict[uuid.UUID, frozenset[int]]]) -> dict[str, int]:
    return {m: sum(len(ps) for ps in a.values()) for m, a in result.items()}


def owners(result: dict[str, dict[uuid.UUID, frozenset[int]]]) -> dict[tuple[uuid.UUID, int], str]:
    out: dict[tuple[uuid.UUID, int], str] = {}
    for m, a in result.items():
        for t, ps in a.items():
            for p in ps:
                assert (t, p) not in out, f"{(t, p)} given to {out.get((t, p))} and {m}"
                out[(t, p)] = m
    return out


def test_uniform_homogeneous_is_balanced() -> None:
    members = {f"m{i}": MemberSpec(frozenset({T1})) for i in range(10)}
    result = uniform(members, {T1: 100})
    assert set(counts_of(result).values()) == {10}
    assert len(owners(result)) == 100


def test_uniform_sticks_when_a_member_joins() -> None:
    members = {f"m{i}": MemberSpec(frozenset({T1, T2})) for i in range(3)}
    first = uniform(members, {T1: 10, T2: 10})
    members = {m: MemberSpec(frozenset({T1, T2}), first[m]) for m in first}
    members["m3"] = MemberSpec(frozenset({T1, T2}))
    second = uniform(members, {T1: 10, T2: 10})
    assert sorted(counts_of(second).values()) == [5, 5, 5, 5]
    before, after = owners(first), owners(second)
    moved = [tp for tp, m in after.items() if before[tp] != m]
    assert len(moved) == 5  # only what the new member needs
    assert all(after[tp] == "m3" for tp in moved)


def test_uniform_drops_partitions_of_unsubscribed_and_missing_topics() -> None:
    members = {
        "a": MemberSpec(frozenset({T1}), {T1: frozenset({0, 1}), T2: frozenset({0})}),
        "b": MemberSpec(frozenset({T1}), {T1: frozenset({7})}),
    }
    result = uniform(members, {T1: 4})  # T1 shrank to 4 partitions, nobody subscribes to T2
    assert owners(result).keys() == {(T1, p) for p in range(4)}
    assert result["a"][T1] >= {0, 1}


def test_uniform_heterogeneous_respects_subscriptions() -> None:
    members = {
        "a": MemberSpec(frozenset({T1})),
        "b": MemberSpec(frozenset({T1, T2})),
        "c": MemberSpec(frozenset({T2, T3})),
    }
    result = uniform(members, {T1: 6, T2: 6, T3: 6})
    own = owners(result)
    assert len(own) == 18
    for (t, _), m in own.items():
        assert t in members[m].topics
    assert sorted(counts_of(result).values()) == [6, 6, 6]


def test_range_is_contiguous_and_co_partitioned() -> None:
    members = {m: MemberSpec(frozenset({T1, T2})) for m in ("b", "a", "c")}
    result = range_assignor(members, {T1: 7, T2: 7})
    assert result["a"] == {T1: frozenset({0, 1, 2}), T2: frozenset({0, 1, 2})}
    assert result["b"] == {T1: frozenset({3, 4}), T2: frozenset({3, 4})}
    assert result["c"] == {T1: frozenset({5, 6}), T2: frozenset({5, 6})}


def test_range_more_members_than_partitions() -> None:
    members = {f"m{i}": MemberSpec(frozenset({T1})) for i in range(4)}
    result = range_assignor(members, {T1: 2})
    assert counts_of(result) == {"m0": 1, "m1": 1, "m2": 0, "m3": 0}


specs = st.dictionaries(
    st.sampled_from([f"m{i}" for i in range(8)]),
    st.frozensets(st.sampled_from([T1, T2, T3]), min_size=1),
    min_size=1,
)


@settings(max_examples=200, deadline=None)
@given(specs, st.integers(0, 20), st.integers(0, 20), st.sampled_from(sorted(ASSIGNORS)))
def test_every_partition_to_exactly_one_subscriber(
    subscriptions: dict[str, frozenset[uuid.UUID]], n1: int, n2: int, name: str
) -> None:
    counts = {T1: n1, T2: n2}  # T3 does not exist
    members = {m: MemberSpec(topics) for m, topics in subscriptions.items()}
    result = ASSIGNORS[name](members, counts)
    own = owners(result)
    wanted = {(t, p) for t in counts if any(t in s for s in subscriptions.values()) for p in range(counts[t])}
    assert own.keys() == wanted
    for (t, _), m in own.items():
        assert t in subscriptions[m]
    assert ASSIGNORS[name](members, counts) == result  # deterministic
    if name == "uniform" and len(set(subscriptions.values())) == 1:
        assert max(counts_of(result).values()) - min(counts_of(result).values()) <= 1
