"""The transaction coordinator's metadata calls through both clients (in-process and HTTP,
the latter over the real FastAPI app): every call round-trips its answer, a refused
transition is an answer with a Kafka code, and malformed input is INVALID_REQUEST."""

from __future__ import annotations

import httpx
import pytest
from skiff.metadata.errors import INVALID_REQUEST, MetadataError
from skiff.metadata.server.app import create_app
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService
from skiff.metadata.transactions.state import (
    CONCURRENT_TRANSACTIONS,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_TXN_STATE,
    PRODUCER_FENCED,
    TxnState,
)
from skiff.metadata.types import GroupOffset

from tests.support.metadata_fixtures import FakeClock

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def metadata_service(metadata_service: MetadataService) -> MetadataService:
    """The shared service with topic `t` (2 partitions)."""
    metadata_service.create_topic("t", 2, {})
    return metadata_service


async def test_a_transaction_through_the_client(md: LocalMetadataClient, clock: FakeClock) -> None:
    topic = (await md.describe_topics(["t"]))["t"]
    parts = [(str(topic.topic_id), 0), (str(topic.topic_id), 1)]
    init = await md.init_txn_producer_id("tx", 60_000)
    assert init.ok and init.producer_epoch == 0 and init.record is not None
    pid = init.producer_id
    assert await md.add_partitions_to_txn("tx", pid, 0, parts) == dict.fromkeys(parts, 0)
    assert await md.verify_txn_partitions("tx", pid, 0, parts[:1]) == 0
    assert await md.add_offsets_to_txn("tx", pid, 0, "g") == 0
    listed = await md.list_txns(states=[TxnState.ONGOING.value])
    assert [r.transactional_id for r in listed] == ["tx"]
    assert set(listed[0].partitions) == set(parts) and listed[0].groups == {"g"}
    end = await md.end_txn("tx", pid, 0, True)
    assert end.ok and end.write_markers and end.record is not None
    assert end.record.state is TxnState.PREPARE_COMMIT and end.groups == {"g"}
    assert [r.transactional_id for r in await md.preparing_txns()] == ["tx"]
    # a second EndTxn while the markers are written: retriable
    assert (await md.end_txn("tx", pid, 0, True)).error == CONCURRENT_TRANSACTIONS
    done = await md.complete_txn("tx", pid, 0)
    assert done is not None and done.state is TxnState.COMPLETE_COMMIT
    assert await md.complete_txn("tx", pid, 0) is None  # already complete
    assert (await md.end_txn("tx", pid, 0, False)).error == INVALID_TXN_STATE
    described = await md.describe_txns(["tx", "nope"])
    assert described["nope"] is None and described["tx"] is not None
    assert described["tx"].state is TxnState.COMPLETE_COMMIT


async def test_offsets_in_a_transaction_appear_on_commit_only(md: LocalMetadataClient) -> None:
    offs = [GroupOffset("t", 0, 5, "m"), GroupOffset("t", 1, 7)]
    init = await md.init_txn_producer_id("tx", 60_000)
    pid = init.producer_id
    # the group must join the transaction first
    assert [r.error_code for r in await md.txn_offset_commit("tx", pid, 0, "g", offs)] == [
        INVALID_TXN_STATE
    ] * 2
    assert await md.add_offsets_to_txn("tx", pid, 0, "g") == 0
    results = await md.txn_offset_commit("tx", pid, 0, "g", [*offs, GroupOffset("t", 9, 1)])
    assert [r.error_code for r in results] == [0, 0, 3]  # no partition 9
    assert await md.fetch_offsets("g", None) == []  # staged, not visible
    end = await md.end_txn("tx", pid, 0, True)
    assert end.groups == {"g"} and end.record is not None
    await md.complete_txn("tx", pid, 0)  # no partitions: no markers
    got = {(o.topic, o.partition): (o.offset, o.metadata) for o in await md.fetch_offsets("g", None)}
    assert got == {("t", 0): (5, "m"), ("t", 1): (7, None)}
    # an aborted transaction's offsets vanish
    assert await md.add_offsets_to_txn("tx", pid, 0, "g") == 0
    assert [
        r.error_code for r in await md.txn_offset_commit("tx", pid, 0, "g", [GroupOffset("t", 0, 99)])
    ] == [0]
    assert (await md.end_txn("tx", pid, 0, False)).ok
    await md.complete_txn("tx", pid, 0)
    got = {(o.topic, o.partition): o.offset for o in await md.fetch_offsets("g", None)}
    assert got == {("t", 0): 5, ("t", 1): 7}
    # a fenced producer stages nothing
    assert (await md.init_txn_producer_id("tx", 60_000)).producer_epoch == 1
    fenced = await md.txn_offset_commit("tx", pid, 0, "g", [GroupOffset("t", 0, 100)])
    assert [r.error_code for r in fenced] == [PRODUCER_FENCED]


async def test_fencing_and_expiry_through_the_client(md: LocalMetadataClient, clock: FakeClock) -> None:
    topic = (await md.describe_topics(["t"]))["t"]
    part = [(str(topic.topic_id), 0)]
    first = await md.init_txn_producer_id("tx", 1_000)
    assert (await md.add_partitions_to_txn("tx", first.producer_id, 0, part)) == {part[0]: 0}
    # a new instance: the open transaction is aborted first (retriable), then epoch 2
    again = await md.init_txn_producer_id("tx", 1_000)
    assert again.error == CONCURRENT_TRANSACTIONS and again.write_markers
    assert again.record is not None and again.record.state is TxnState.PREPARE_ABORT
    assert await md.complete_txn("tx", first.producer_id, again.record.producer_epoch) is not None
    second = await md.init_txn_producer_id("tx", 1_000)
    assert second.ok and second.producer_epoch == 2
    assert await md.add_offsets_to_txn("tx", first.producer_id, 0, "g") == PRODUCER_FENCED
    assert await md.add_offsets_to_txn("tx", 999_999, 2, "g") == INVALID_PRODUCER_ID_MAPPING
    assert await md.add_partitions_to_txn("tx", second.producer_id, 2, part) == {part[0]: 0}
    assert await md.expire_txns() == []
    clock.now += 1_001
    expired = await md.expire_txns()
    assert len(expired) == 1 and expired[0].write_markers and expired[0].record is not None
    assert expired[0].record.state is TxnState.PREPARE_ABORT and expired[0].record.producer_epoch == 3


async def test_unknown_partition_and_bad_input(md: LocalMetadataClient) -> None:
    init = await md.init_txn_producer_id("tx", 60_000)
    topic = (await md.describe_topics(["t"]))["t"]
    good, bad = (str(topic.topic_id), 0), (str(topic.topic_id), 7)
    errors = await md.add_partitions_to_txn("tx", init.producer_id, 0, [good, bad])
    assert errors == {good: 55, bad: 3}  # OPERATION_NOT_ATTEMPTED, UNKNOWN_TOPIC_OR_PARTITION
    with pytest.raises(MetadataError) as e:
        await md.add_partitions_to_txn("tx", init.producer_id, 0, [("not-a-uuid", 0)])
    assert e.value.error_code == INVALID_REQUEST


async def test_malformed_txn_bodies_are_422_not_500(metadata_service: MetadataService) -> None:
    transport = httpx.ASGITransport(app=create_app(metadata_service))
    async with httpx.AsyncClient(transport=transport, base_url="http://m") as http:
        for path, body in [
            ("/v1/txn/init-producer-id", {"transactional_id": "", "timeout_ms": 1}),
            (
                "/v1/txn/end",
                {"transactional_id": "x", "producer_id": 1, "epoch": 2**40, "commit": True},
            ),
            ("/v1/txn/list", {"states": ["x"] * 100}),
            ("/v1/txn/add-partitions", {"transactional_id": "x", "producer_id": 1, "producer_epoch": 0}),
        ]:
            resp = await http.post(path, json=body)
            assert resp.status_code == 422, (path, resp.text)
            assert resp.json()["error_code"] == INVALID_REQUEST
