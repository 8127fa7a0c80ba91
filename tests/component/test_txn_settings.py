"""The transaction coordinator's timing settings (`transaction_scan_interval_ms`,
`transaction_redrive_after_ms`, `transaction_redrive_max_backoff_ms`): validated at
start-up, carried into the agent's coordinator, and the backoff cap bounds the delay
between failed re-drives (injected clock, real metadata, a bucket whose PUTs fail)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from skiff.agent.agent_registry import LiveAgents
from skiff.agent.config import AgentConfig
from skiff.agent.runtime import build_agent_context
from skiff.agent.transactions.coordinator import TxnCoordinator
from skiff.fileformat.objectstore import open_async_store
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService
from skiff.metadata.types import AgentInfo

from tests.component.test_txn_coordinator import Clock

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class FailingStore:
    """An object store whose PUTs fail (the bucket unreachable), counting attempts."""

    def __init__(self) -> None:
        self.puts = 0

    async def put(self, key: str, data: bytes) -> None:
        self.puts += 1
        raise OSError("bucket unreachable (test)")


@pytest.fixture
async def md(db_url: str) -> AsyncIterator[tuple[LocalMetadataClient, Clock]]:
    clock = Clock()
    svc = MetadataService.from_url(db_url, clock=clock)
    svc.create_topic("t", 1, {})
    client = LocalMetadataClient(svc, owns_service=True)
    yield client, clock
    await client.close()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"transaction_scan_interval_ms": 0}, "transaction_scan_interval_ms"),
        ({"transaction_redrive_after_ms": -1}, "transaction_redrive_after_ms"),
        ({"transaction_max_partitions": 0}, "transaction_max_partitions"),
        ({"transaction_max_offsets": 2_000_000}, "transaction_max_offsets"),
        (
            {"transaction_redrive_after_ms": 10_000, "transaction_redrive_max_backoff_ms": 5_000},
            "transaction_redrive_max_backoff_ms",
        ),
    ],
)
def test_invalid_settings_are_refused(settings: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AgentConfig(agent_id="a", **settings)  # type: ignore[arg-type]


async def test_the_agent_coordinator_gets_the_settings(md: tuple[LocalMetadataClient, Clock]) -> None:
    config = AgentConfig(
        agent_id="a",
        transaction_scan_interval_ms=250,
        transaction_redrive_after_ms=700,
        transaction_redrive_max_backoff_ms=9_000,
    )
    ctx = build_agent_context(config, md[0], open_async_store("memory://txn-settings-test"))
    coordinator = ctx.parts.transactions
    assert (coordinator.scan_interval_ms, coordinator.redrive_after_ms, coordinator.max_retry_delay_ms) == (
        250,
        700,
        9_000,
    )


async def _attempts(md: LocalMetadataClient, clock: Clock, max_retry_delay_ms: int, txn: str) -> list[int]:
    """Milliseconds (after the failed EndTxn) of each re-drive, over 8 s scanned every 500 ms."""
    store = FailingStore()
    coordinator = TxnCoordinator(
        metadata=md,
        store=store,  # type: ignore[arg-type]
        agents=LiveAgents(AgentInfo("a", "127.0.0.1", 9092), wall_ms=clock),
        agent_id="a",
        wall_ms=clock,
        redrive_after_ms=1_000,
        max_retry_delay_ms=max_retry_delay_ms,
    )
    topic = (await md.describe_topics(["t"]))["t"]
    pid = (await md.init_txn_producer_id(txn, 60_000)).producer_id
    await md.add_partitions_to_txn(txn, pid, 0, [(str(topic.topic_id), 0)])
    end = await md.end_txn(txn, pid, 0, True)
    assert end.record is not None and not await coordinator.finish(end.record)
    start, seen, times = clock.now, store.puts, []
    for _ in range(16):
        clock.now += 500
        await coordinator.scan_once()
        if store.puts > seen:
            seen = store.puts
            times.append(clock.now - start)
    return times


@pytest.mark.parametrize(
    ("max_retry_delay_ms", "expected_ms"),
    [
        (60_000, [1_000, 2_000, 4_000, 8_000]),  # doubling from 1 s: 1, 2, 4, 8 s after the failure
        (2_000, [1_000, 2_000, 4_000, 6_000, 8_000]),  # capped at 2 s: every 2 s from then on
    ],
)
async def test_the_backoff_cap_bounds_the_delay_between_redrives(
    md: tuple[LocalMetadataClient, Clock], max_retry_delay_ms: int, expected_ms: list[int]
) -> None:
    client, clock = md
    assert await _attempts(client, clock, max_retry_delay_ms, "tx") == expected_ms
