"""Metadata's side of offsets in transactions through both clients (in-process, and HTTP
over the real FastAPI app): a group's committed offsets with the partitions that open
transactions have staged offsets for (OffsetFetch require_stable), and the
per-transaction bounds carried by the requests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from skiff.metadata.server.app import create_app
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService
from skiff.metadata.types import GroupOffset
from skiff.metadata.wire.http_client import HttpMetadataClient

pytestmark = pytest.mark.anyio
POLICY_VIOLATION = 44


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def service(db_url: str) -> Iterator[MetadataService]:
    svc = MetadataService.from_url(db_url)
    svc.create_topic("t", 4, {})
    svc.create_topic("u", 1, {})
    yield svc
    svc.close()


@pytest.fixture(params=["local", "http"])
async def md(request: pytest.FixtureRequest, service: MetadataService) -> AsyncIterator[LocalMetadataClient]:
    client: LocalMetadataClient | HttpMetadataClient
    if request.param == "local":
        client = LocalMetadataClient(service)
    else:
        client = HttpMetadataClient(
            "http://metadata.test", transport=httpx.ASGITransport(app=create_app(service))
        )
    yield client  # type: ignore[misc]
    await client.close()


async def test_unstable_offsets_follow_the_transaction(md: LocalMetadataClient) -> None:
    pid = (await md.init_txn_producer_id("tx", 60_000)).producer_id
    assert await md.add_offsets_to_txn("tx", pid, 0, "g") == 0
    staged = [GroupOffset("t", 0, 5), GroupOffset("t", 2, 6), GroupOffset("u", 0, 1)]
    assert [r.error_code for r in await md.txn_offset_commit("tx", pid, 0, "g", staged)] == [0, 0, 0]
    assert await md.commit_offsets("g", [GroupOffset("t", 0, 2, "m")]) is not None
    committed = [GroupOffset("t", 0, 2, "m")]
    assert await md.fetch_stable_offsets("g", None) == (committed, {("t", 0), ("t", 2), ("u", 0)})
    assert await md.fetch_stable_offsets("g", ["u"]) == ([], {("u", 0)})
    assert await md.fetch_stable_offsets("g", []) == ([], set())
    assert await md.fetch_stable_offsets("other", None) == ([], set())
    assert (await md.end_txn("tx", pid, 0, True)).ok
    await md.complete_txn("tx", pid, 0)
    after = [GroupOffset("t", 0, 5), GroupOffset("t", 2, 6), GroupOffset("u", 0, 1)]
    assert await md.fetch_stable_offsets("g", None) == (after, set())


async def test_bounds_travel_with_the_requests(md: LocalMetadataClient) -> None:
    topic_id = str((await md.describe_topics(["t"]))["t"].topic_id)
    pid = (await md.init_txn_producer_id("tx", 60_000)).producer_id
    parts = [(topic_id, p) for p in range(4)]
    assert set((await md.add_partitions_to_txn("tx", pid, 0, parts[:2], max_partitions=2)).values()) == {0}
    refused = await md.add_partitions_to_txn("tx", pid, 0, parts[2:], max_partitions=2)
    assert refused == dict.fromkeys(parts[2:], POLICY_VIOLATION)
    assert set((await md.add_partitions_to_txn("tx", pid, 0, parts[2:])).values()) == {0}  # no bound
    assert await md.add_offsets_to_txn("tx", pid, 0, "g", max_partitions=4) == POLICY_VIOLATION  # 4 + 1
    assert await md.add_offsets_to_txn("tx", pid, 0, "g", max_partitions=5) == 0
    two = [GroupOffset("t", 0, 1), GroupOffset("t", 1, 1)]
    assert [r.error_code for r in await md.txn_offset_commit("tx", pid, 0, "g", two, max_offsets=2)] == [0, 0]
    three = [GroupOffset("t", 1, 2), GroupOffset("t", 2, 2)]
    codes = [r.error_code for r in await md.txn_offset_commit("tx", pid, 0, "g", three, max_offsets=2)]
    assert codes == [POLICY_VIOLATION] * 2
    assert (await md.fetch_stable_offsets("g", None))[1] == {("t", 0), ("t", 1)}  # nothing staged
