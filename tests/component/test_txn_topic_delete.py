"""Deleting a topic with transactions on it (SQLite and PostgreSQL, injected clocks): the
topic's `txn_open` (its LSO), `txn_aborted` and staged `txn_offsets` rows go in the same
database transaction, the other topics' stay; a transaction that included the deleted
topic still completes (its markers for the deleted partitions are refused, the others
are stored), over the in-process and the HTTP client; a topic re-created with the same name starts with none of them."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from skiff.agent.agent_registry import LiveAgents
from skiff.metadata.schema import txn_aborted, txn_offsets, txn_open
from skiff.metadata.server.app import create_app
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService
from skiff.metadata.transactions.state import TxnState
from skiff.metadata.types import AgentInfo, GroupOffset, Topic
from skiff.metadata.wire.http_client import HttpMetadataClient
from sqlalchemy import select

from tests.component.test_txn_coordinator import Clock, Env

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["local", "http"])
async def env(request: pytest.FixtureRequest, db_url: str) -> AsyncIterator[tuple[Env, MetadataService]]:
    """The coordinator's test environment (two topics) over the in-process client, then
    over HTTP (the real app, ASGI)."""
    clock = Clock()
    svc = MetadataService.from_url(db_url, clock=clock)
    svc.create_topic("t", 2, {})
    svc.create_topic("u", 2, {})
    md: LocalMetadataClient | HttpMetadataClient
    if request.param == "local":
        md = LocalMetadataClient(svc)
    else:
        md = HttpMetadataClient("http://metadata.test", transport=httpx.ASGITransport(app=create_app(svc)))
    agents = LiveAgents(AgentInfo("a", "127.0.0.1", 9092), wall_ms=clock)
    try:
        yield Env(md, clock, agents), svc  # type: ignore[arg-type]
    finally:
        await md.close()
        svc.close()


def _rows(svc: MetadataService) -> dict[str, set[tuple[object, ...]]]:
    with svc._db.engine.connect() as conn:
        return {
            "open": {(r.topic_id, r.partition) for r in conn.execute(select(txn_open))},
            "aborted": {(r.topic_id, r.partition) for r in conn.execute(select(txn_aborted))},
            "offsets": {(r.topic, r.partition) for r in conn.execute(select(txn_offsets))},
        }


async def _topics(env: Env) -> tuple[Topic, Topic]:
    found = await env.md.describe_topics(["t", "u"])
    return found["t"], found["u"]


@pytest.mark.parametrize("prepared", [False, True], ids=["ongoing", "prepared"])
@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
async def test_delete_topic_drops_its_txn_rows_and_the_transaction_completes(
    env: tuple[Env, MetadataService], commit: bool, prepared: bool
) -> None:
    e, svc = env
    md = e.md
    t, u = await _topics(e)
    # an earlier aborted transaction in t/0 and u/1 leaves txn_aborted rows in both
    # (Env.produce names its object by producer, sequence and partition number: no two alike)
    old = (await md.init_txn_producer_id("old", 60_000)).producer_id
    parts_old = [(str(t.topic_id), 0), (str(u.topic_id), 1)]
    assert set((await md.add_partitions_to_txn("old", old, 0, parts_old)).values()) == {0}
    await e.produce(t, 0, old, 0, 0, txn="old")
    await e.produce(u, 1, old, 0, 0, txn="old")
    end = await md.end_txn("old", old, 0, False)
    assert end.record is not None and await e.coordinator.finish(end.record)
    # the ongoing transaction: data in t/0 and u/1, t/1 added too, offsets staged for t and u
    pid = (await md.init_txn_producer_id("tx", 60_000)).producer_id
    parts = [(str(t.topic_id), 0), (str(t.topic_id), 1), (str(u.topic_id), 1)]
    assert set((await md.add_partitions_to_txn("tx", pid, 0, parts)).values()) == {0}
    await e.produce(t, 0, pid, 0, 0)
    await e.produce(u, 1, pid, 0, 0)
    assert await md.add_offsets_to_txn("tx", pid, 0, "g") == 0
    staged = await md.txn_offset_commit(
        "tx", pid, 0, "g", [GroupOffset("t", 0, 5, None, -1), GroupOffset("u", 0, 7, None, -1)]
    )
    assert [r.error_code for r in staged] == [0, 0]
    before = _rows(svc)
    assert before["open"] == {(t.topic_id, 0), (u.topic_id, 1)}
    assert before["aborted"] == {(t.topic_id, 0), (u.topic_id, 1)}
    assert before["offsets"] == {("t", 0), ("u", 0)}

    if prepared:  # EndTxn before the deletion: the transaction is prepared while it happens
        end = await md.end_txn("tx", pid, 0, commit)
        assert end.ok and end.record is not None
    await md.delete_topic("t")
    after = _rows(svc)
    assert after == {"open": {(u.topic_id, 1)}, "aborted": {(u.topic_id, 1)}, "offsets": {("u", 0)}}

    # the transaction still completes: its marker for u/1 is stored, t's are refused
    if not prepared:
        end = await md.end_txn("tx", pid, 0, commit)
        assert end.ok and end.record is not None
    assert await e.coordinator.finish(end.record)
    markers = e.committed[-1]
    codes = {
        (c.topic_id, c.partition): r.error_code for c, r in zip(markers.chunks, markers.results, strict=True)
    }
    assert codes == {(t.topic_id, 0): 3, (t.topic_id, 1): 3, (u.topic_id, 1): 0}
    done = (await md.describe_txns(["tx"]))["tx"]
    assert done is not None
    assert done.state is (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT)
    aborted_u = ((old, 0), (pid, 2)) if not commit else ((old, 0),)
    assert await e.committed_view(u, 1) == (4, 4, aborted_u)
    assert await md.preparing_txns() == []
    offsets = {(o.topic, o.partition): o.offset for o in await md.fetch_offsets("g", None)}
    assert offsets == ({("u", 0): 7} if commit else {})


async def test_a_recreated_topic_inherits_no_transaction_rows(env: tuple[Env, MetadataService]) -> None:
    e, svc = env
    md = e.md
    t, _ = await _topics(e)
    pid = (await md.init_txn_producer_id("tx", 60_000)).producer_id
    assert set((await md.add_partitions_to_txn("tx", pid, 0, [(str(t.topic_id), 0)])).values()) == {0}
    await e.produce(t, 0, pid, 0, 0)
    assert await e.committed_view(t, 0) == (1, 0, ())  # the open transaction holds the LSO
    await md.delete_topic("t")
    await md.create_topic("t", 2, {})
    again, _ = await _topics(e)
    assert again.topic_id != t.topic_id
    assert await e.committed_view(again, 0) == (0, 0, ())
    # the old transaction (naming the old topic id) still aborts; nothing reaches the new topic
    end = await md.end_txn("tx", pid, 0, False)
    assert end.record is not None and await e.coordinator.finish(end.record)
    done = (await md.describe_txns(["tx"]))["tx"]
    assert done is not None and done.state is TxnState.COMPLETE_ABORT
    assert await e.committed_view(again, 0) == (0, 0, ())
    assert _rows(svc) == {"open": set(), "aborted": set(), "offsets": set()}
