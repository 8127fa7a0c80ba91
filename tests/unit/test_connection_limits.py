"""The protocol server's bounds: byte budgets, connection caps, which requests run alone."""

from __future__ import annotations

import asyncio
import datetime

import pytest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.types import TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64
from skiff.agent.config import AgentConfig
from skiff.agent.handlers import default_registry
from skiff.agent.network.limits import (
    CONCURRENT_API_KEYS,
    ByteBudget,
    ConnectionLimiter,
    response_reserve_bytes,
    runs_alone,
)

# Every API the agent serves that changes state, or reads state another request may change.
STATE_APIS = {
    "OffsetCommit": 8,
    "OffsetFetch": 9,
    "JoinGroup": 11,
    "Heartbeat": 12,
    "LeaveGroup": 13,
    "SyncGroup": 14,
    "DescribeGroups": 15,
    "ListGroups": 16,
    "CreateTopics": 19,
    "DeleteTopics": 20,
    "InitProducerId": 22,
    "DescribeConfigs": 32,
    "AlterConfigs": 33,
    "CreatePartitions": 37,
    "DeleteGroups": 42,
    "IncrementalAlterConfigs": 44,
    "OffsetDelete": 47,
}


def test_state_changing_apis_run_alone_and_the_data_path_runs_concurrently() -> None:
    served = {spec.api_key for spec in default_registry().specs()}
    for name, key in STATE_APIS.items():
        assert key in served, name
        assert runs_alone(key), name
    for key in (0, 1, 2, 3, 10, 18, 60):  # Produce, Fetch, ListOffsets, Metadata, FindCoordinator, ...
        assert key in CONCURRENT_API_KEYS and not runs_alone(key)
        assert runs_alone(key, exclusive=True)
    # an API added later runs alone until someone decides otherwise
    assert runs_alone(max(served) + 1)


def _fetch(max_bytes: int, partition_limits: list[int]) -> FetchRequest:
    return FetchRequest(
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=500)),
        min_bytes=i32(1),
        max_bytes=i32(max_bytes),
        isolation_level=i8(0),
        topics=(
            FetchTopic(
                topic=TopicName("t"),
                partitions=tuple(
                    FetchPartition(partition=i32(i), fetch_offset=i64(0), partition_max_bytes=i32(n))
                    for i, n in enumerate(partition_limits)
                ),
            ),
        ),
        forgotten_topics_data=(),
    )


def test_a_fetch_reserves_what_it_asks_for_within_its_partition_limits() -> None:
    assert response_reserve_bytes(1, _fetch(2**30, [1 << 20, 1 << 20])) == 2 << 20
    assert response_reserve_bytes(1, _fetch(1000, [1 << 20, 1 << 20])) == 1000
    assert response_reserve_bytes(1, _fetch(0, [5, 7])) == 12  # no request-level limit
    assert response_reserve_bytes(3, object()) == 0  # other APIs: charged once answered


async def test_a_byte_budget_admits_one_oversize_charge_alone_and_wakes_waiters() -> None:
    budget = ByteBudget(100)
    assert budget.fits(500)  # nothing held: even more than the limit
    budget.take(500)
    assert not budget.fits(1)
    assert budget.fits(1, own=500)  # all of it is the asker's own
    waiter = asyncio.ensure_future(budget.wait_room(60))
    await asyncio.sleep(0)
    budget.give(460)  # 40 held: 40 + 60 fits
    await asyncio.wait_for(waiter, 1)
    budget.give(40)
    assert budget.used == 0
    with pytest.raises(ValueError):
        ByteBudget(0)


def test_connection_caps_count_refusals_by_reason() -> None:
    limiter = ConnectionLimiter(max_connections=3, max_per_ip=2)
    assert limiter.admit("10.0.0.1") and limiter.admit("10.0.0.1")
    assert not limiter.admit("10.0.0.1")  # third from one address
    assert limiter.admit("10.0.0.2")
    assert not limiter.admit("10.0.0.3")  # fourth in total
    assert limiter.refused == {"max_connections_per_ip": 1, "max_connections": 1}
    limiter.release("10.0.0.1")
    assert limiter.admit("10.0.0.3") and limiter.total == 3
    assert ConnectionLimiter(None, None).admit("x")


def test_max_connections_defaults_below_the_open_file_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    import resource

    monkeypatch.setattr(resource, "getrlimit", lambda _: (1024, 4096))
    assert AgentConfig.from_env({}).resolved_max_connections() == 768
    assert AgentConfig.from_env({}, max_connections=5).resolved_max_connections() == 5
    with pytest.raises(ValueError, match="max_connections_per_ip"):
        AgentConfig.from_env({}, max_connections_per_ip=0)
