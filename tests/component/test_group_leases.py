"""Group coordinator leases and agent registration in metadata (`metadata.groups.leases`),
on SQLite and PostgreSQL, with an injected clock; plus two metadata replicas over one
PostgreSQL racing for one lease, and the HTTP API round trip."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest
from skiff.metadata.errors import DUPLICATE_BROKER_REGISTRATION, NOT_COORDINATOR, MetadataError
from skiff.metadata.groups.lease_types import LeaseToken
from skiff.metadata.server.app import create_app
from skiff.metadata.service import MetadataService
from skiff.metadata.types import AgentInfo, GroupOffset
from skiff.metadata.wire.http_client import HttpMetadataClient

TTL = 10_000


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def svc(db_url: str, clock: Clock) -> Iterator[MetadataService]:
    s = MetadataService.from_url(db_url, clock=clock, agent_ttl_ms=15_000)
    s.create_topic("t", 2, {})
    yield s
    s.close()


def test_first_acquire_grants_epoch_1_and_others_are_refused_until_expiry(
    svc: MetadataService, clock: Clock
) -> None:
    a = svc.acquire_group_lease("g", "A", TTL)
    assert (a.granted, a.holder, a.epoch, a.expires_ms, a.group_state) == (
        True,
        "A",
        1,
        clock.now + TTL,
        None,
    )
    b = svc.acquire_group_lease("g", "B", TTL)
    assert (b.granted, b.holder, b.epoch) == (False, "A", 1)
    clock.now += TTL  # expires_ms == now: still held
    assert not svc.acquire_group_lease("g", "B", TTL).granted
    clock.now += 1
    b = svc.acquire_group_lease("g", "B", TTL)
    assert (b.granted, b.holder, b.epoch) == (True, "B", 2)


def test_reacquire_by_the_holder_bumps_the_epoch(svc: MetadataService) -> None:
    assert svc.acquire_group_lease("g", "A", TTL).epoch == 1
    assert svc.acquire_group_lease("g", "A", TTL).epoch == 2
    # the old grant is fenced off
    with pytest.raises(MetadataError) as e:
        svc.commit_offsets("g", [GroupOffset("t", 0, 5, None, -1)], LeaseToken("A", 1))
    assert e.value.error_code == NOT_COORDINATOR
    svc.commit_offsets("g", [GroupOffset("t", 0, 5, None, -1)], LeaseToken("A", 2))
    assert [o.offset for o in svc.fetch_offsets("g", None)] == [5]


def test_renew_extends_only_current_unexpired_leases_in_one_call(svc: MetadataService, clock: Clock) -> None:
    for g in ("g1", "g2", "g3"):
        svc.acquire_group_lease(g, "A", TTL)
    svc.acquire_group_lease("g3", "A", TTL)  # epoch 2 now
    clock.now += TTL - 1
    renewed = svc.renew_group_leases("A", [("g1", 1), ("g2", 1), ("g3", 1), ("nope", 1)], TTL)
    assert renewed == ["g1", "g2"]  # g3 was asked at a stale epoch, "nope" has no lease
    clock.now += 2  # g3 lapsed; g1, g2 did not
    assert not svc.acquire_group_lease("g1", "B", TTL).granted
    assert svc.acquire_group_lease("g3", "B", TTL).granted
    assert svc.renew_group_leases("A", [("g3", 2)], TTL) == []  # B holds it now
    clock.now += TTL  # g1, g2 lapsed: a lapsed lease is re-acquired, not renewed
    assert svc.renew_group_leases("A", [("g1", 1), ("g2", 1)], TTL) == []


def test_release_lets_the_next_holder_in_at_once_and_keeps_the_state(svc: MetadataService) -> None:
    svc.acquire_group_lease("g", "A", TTL)
    svc.confirm_group_generation("g", LeaseToken("A", 1), TTL, '{"generation": 3}')
    svc.release_group_leases("B", [("g", 1)])  # not the holder: no effect
    assert not svc.acquire_group_lease("g", "B", TTL).granted
    svc.release_group_leases("A", [("g", 1)])
    b = svc.acquire_group_lease("g", "B", TTL)
    assert (b.granted, b.epoch, b.group_state) == (True, 2, '{"generation": 3}')


def test_confirm_renews_and_stores_or_refuses(svc: MetadataService, clock: Clock) -> None:
    svc.acquire_group_lease("g", "A", TTL)
    clock.now += TTL - 1
    svc.confirm_group_generation("g", LeaseToken("A", 1), TTL, "s1")
    clock.now += TTL - 1  # within the renewed lease
    assert not svc.acquire_group_lease("g", "B", TTL).granted
    with pytest.raises(MetadataError) as e:
        svc.confirm_group_generation("g", LeaseToken("B", 1), TTL, "s2")
    assert e.value.error_code == NOT_COORDINATOR
    clock.now += 2
    with pytest.raises(MetadataError) as e:  # lapsed
        svc.confirm_group_generation("g", LeaseToken("A", 1), TTL, "s2")
    assert e.value.error_code == NOT_COORDINATOR
    assert svc.acquire_group_lease("g", "B", TTL).group_state == "s1"


def test_offset_commit_with_a_lease_is_checked_in_its_transaction(svc: MetadataService, clock: Clock) -> None:
    off = [GroupOffset("t", 1, 7, "m", -1)]
    with pytest.raises(MetadataError) as e:  # no lease at all
        svc.commit_offsets("g", off, LeaseToken("A", 1))
    assert e.value.error_code == NOT_COORDINATOR
    svc.acquire_group_lease("g", "A", TTL)
    svc.commit_offsets("g", off, LeaseToken("A", 1))
    clock.now += TTL + 1
    with pytest.raises(MetadataError) as e:  # expired
        svc.commit_offsets("g", [GroupOffset("t", 1, 9, "m", -1)], LeaseToken("A", 1))
    assert e.value.error_code == NOT_COORDINATOR
    svc.acquire_group_lease("g", "B", TTL)
    with pytest.raises(MetadataError):
        svc.commit_offsets("g", [GroupOffset("t", 1, 9, "m", -1)], LeaseToken("A", 1))
    assert [o.offset for o in svc.fetch_offsets("g", None)] == [7]
    svc.commit_offsets("g", [GroupOffset("t", 1, 9, "m", -1)])  # without a lease: unchecked (tools)
    assert [o.offset for o in svc.fetch_offsets("g", None)] == [9]


def test_holders_names_only_unexpired_unreleased_leases(svc: MetadataService, clock: Clock) -> None:
    """FindCoordinator's read (agent.groups.placement): who holds each group's lease now."""
    svc.acquire_group_lease("g1", "A", TTL)
    svc.acquire_group_lease("g2", "B", TTL)
    g3 = svc.acquire_group_lease("g3", "A", TTL)
    svc.release_group_leases("A", [("g3", g3.epoch)])
    assert svc.group_lease_holders(["g1", "g2", "g3", "never"]) == {"g1": "A", "g2": "B"}
    many = [f"x{i}" for i in range(1_000)]  # more than one statement's worth of keys
    assert svc.group_lease_holders([*many, "g2"]) == {"g2": "B"}
    clock.now += TTL + 1
    assert svc.group_lease_holders(["g1", "g2"]) == {}


def test_bad_ttl_is_invalid_request(svc: MetadataService) -> None:
    with pytest.raises(MetadataError) as e:
        svc.acquire_group_lease("g", "A", 0)
    assert e.value.error_code == 42


def test_a_live_agent_id_from_another_address_is_refused(svc: MetadataService, clock: Clock) -> None:
    svc.heartbeat_agent(AgentInfo("a", "10.0.0.1", 9092, None, 0))
    svc.heartbeat_agent(AgentInfo("a", "10.0.0.1", 9092, "z1", 0))  # same address: a refresh
    for other in (AgentInfo("a", "10.0.0.2", 9092, None, 0), AgentInfo("a", "10.0.0.1", 9093, None, 0)):
        with pytest.raises(MetadataError) as e:
            svc.heartbeat_agent(other)
        assert e.value.error_code == DUPLICATE_BROKER_REGISTRATION
        assert "10.0.0.1:9092" in e.value.message and "--agent-id" in e.value.message
    assert [(a.host, a.port, a.zone) for a in svc.live_agents()] == [("10.0.0.1", 9092, "z1")]
    clock.now += 15_001  # the old registration expired: a restarted agent may take the id
    svc.heartbeat_agent(AgentInfo("a", "10.0.0.2", 9092, None, 0))
    assert [(a.host, a.port) for a in svc.live_agents()] == [("10.0.0.2", 9092)]


@pytest.mark.postgres
def test_two_replicas_over_one_postgresql_never_both_grant(pg_url: str) -> None:
    """Many rounds: a lease lapses, then two metadata replicas (own engines) and several
    threads each try to take it at once; exactly one wins each round."""
    clock = Clock()
    replicas = [MetadataService.from_url(pg_url, clock=clock) for _ in range(2)]
    try:
        lock = threading.Lock()
        for round_ in range(30):
            clock.now += TTL + 1  # whoever held it has lapsed
            barrier = threading.Barrier(6)
            results: list[tuple[str, bool, int]] = []

            def grab(i: int, barrier: threading.Barrier, results: list[tuple[str, bool, int]]) -> None:
                barrier.wait()
                r = replicas[i % 2].acquire_group_lease("g", f"agent-{i}", TTL)
                with lock:
                    results.append((f"agent-{i}", r.granted, r.epoch))

            threads = [threading.Thread(target=grab, args=(i, barrier, results)) for i in range(6)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            winners = [r for r in results if r[1]]
            assert len(winners) == 1, (round_, results)
            # every loser was told the winner's epoch
            assert {e for _, g, e in results if not g} <= {winners[0][2]}
    finally:
        for r in replicas:
            r.close()


async def test_http_api_round_trip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    clock = Clock()
    svc = MetadataService.from_url(f"sqlite:///{tmp_path}/m.db", clock=clock)
    svc.create_topic("t", 1, {})
    client = HttpMetadataClient("http://m", transport=httpx.ASGITransport(app=create_app(svc)))
    try:
        a = await client.acquire_group_lease("g", "A", TTL)
        assert (a.granted, a.epoch) == (True, 1)
        assert not (await client.acquire_group_lease("g", "B", TTL)).granted
        assert await client.renew_group_leases("A", [("g", 1)], TTL) == ["g"]
        await client.confirm_group_generation("g", a.token, TTL, "state")
        await client.commit_offsets("g", [GroupOffset("t", 0, 3, None, -1)], a.token)
        with pytest.raises(MetadataError) as e:
            await client.commit_offsets("g", [GroupOffset("t", 0, 4, None, -1)], LeaseToken("B", 1))
        assert e.value.error_code == NOT_COORDINATOR
        await client.release_group_leases("A", [("g", 1)])
        b = await client.acquire_group_lease("g", "B", TTL)
        assert (b.granted, b.epoch, b.group_state) == (True, 2, "state")
        assert await client.group_lease_holders(["g", "other"]) == {"g": "B"}
        await client.heartbeat_agent(AgentInfo("x", "h", 1, None, 0))
        with pytest.raises(MetadataError) as e:
            await client.heartbeat_agent(AgentInfo("x", "h", 2, None, 0))
        assert e.value.error_code == DUPLICATE_BROKER_REGISTRATION
    finally:
        await client.close()
        svc.close()
