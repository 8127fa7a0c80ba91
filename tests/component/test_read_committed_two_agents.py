"""A read_committed fetch parked at an open transaction on one agent while the transaction
writes through another (one process, real metadata over SQLite, one memory bucket; raw
Kafka requests). Each commit of more transactional data wakes the fetch (the high
watermark moved) and the metadata long poll's answer says the LSO did not, so it parks
again without asking metadata where records are; the commit of the markers moves the LSO
and the fetch answers the committed records, after one call."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import uuid
from pathlib import Path
from typing import Any

from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v5.request import InitProducerIdRequest
from kio.schema.types import ProducerId, TransactionalId
from kio.static.primitive import i8, i16, i32Timedelta
from skiff.agent.config import AgentConfig
from skiff.agent.runtime import start_agent
from skiff.fileformat.batch_header import iter_batches
from skiff.fileformat.objectstore import open_async_store
from skiff.fileformat.record_build import build_batch
from skiff.fileformat.record_decode import Record, iter_records
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService

from tests.component.fake_metadata import FlakyMetadataClient, request_once
from tests.component.test_txn_handlers import _add_v3
from tests.support.kafka_wire import fetch_request, produce_request
from tests.support.spies import parked_fetches

MINUTE = i32Timedelta.parse(datetime.timedelta(minutes=1))


def _fetch(bootstrap: str, topic: str, offset: int, wait_ms: int) -> Any:
    req = dataclasses.replace(
        fetch_request(topic, [(0, offset, 1 << 20)], max_wait_ms=wait_ms), isolation_level=i8(1)
    )
    p = request_once(bootstrap, req).responses[0].partitions[0]
    assert int(p.error_code) == 0, p
    return p


def _values(records: bytes) -> list[bytes]:
    out = []
    for pos, header in iter_batches(records):
        if not header.attributes & 0x20:  # not a transaction marker
            out.extend(
                bytes(r.value) for r in iter_records(records, pos, header=header) if r.value is not None
            )
    return out


async def test_open_transaction_writing_through_another_agent_parks_the_fetch_again(tmp_path: Path) -> None:
    service = MetadataService.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    md = FlakyMetadataClient(LocalMetadataClient(service, owns_service=True))
    bucket = f"memory://rc-two-{uuid.uuid4().hex}"
    agents = []
    for name in ("a", "b"):
        cfg = AgentConfig.from_env({}, agent_id=name, host="127.0.0.1", port=0, flush_interval_ms=5)
        agents.append(await start_agent(cfg, md, open_async_store(bucket)))  # type: ignore[arg-type]
    a, b = (f"127.0.0.1:{x.port}" for x in agents)
    try:
        topic = "rc-two"
        topic_id = (await md.create_topic(topic, 1, {})).topic_id
        plain = build_batch([Record(0, 1_000, None, b"plain", ())])
        assert (await asyncio.to_thread(request_once, b, produce_request(topic, {0: plain}))).responses[
            0
        ].partition_responses[0].error_code == ErrorCode.none
        txn_id = f"tx-{uuid.uuid4()}"
        init = await asyncio.to_thread(
            request_once,
            b,
            InitProducerIdRequest(transactional_id=TransactionalId(txn_id), transaction_timeout=MINUTE),
        )
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        await asyncio.to_thread(request_once, b, _add_v3(txn_id, pid, epoch, {topic: [0]}))

        async def txn_produce(seq: int) -> None:
            batch = build_batch(
                [Record(0, 1_000, None, f"z{seq}".encode(), ())],
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=seq,
                is_transactional=True,
            )
            req = dataclasses.replace(
                produce_request(topic, {0: batch}), transactional_id=TransactionalId(txn_id)
            )
            (p,) = (await asyncio.to_thread(request_once, b, req)).responses[0].partition_responses
            assert p.error_code == ErrorCode.none

        await txn_produce(0)
        held = await asyncio.to_thread(_fetch, a, topic, 0, 0)
        assert _values(bytes(held.records)) == [b"plain"] and int(held.last_stable_offset) == 1
        watch = agents[0].context.parts.commit_watch
        cache = agents[0].context.parts.chunk_locations
        with parked_fetches(watch) as parkings:
            parked = asyncio.ensure_future(asyncio.to_thread(_fetch, a, topic, 1, 8_000))
            await asyncio.to_thread(parkings.wait_for, 1)
            before = md.calls.count("find_chunks")
            for seq in range(1, 4):
                await txn_produce(seq)
                # the long poll's news woke the fetch, which read again and parked again ...
                await asyncio.to_thread(parkings.wait_for, 1 + seq)
                # ... having seen the LSO the news carried (the chunk cache learns it before
                # waiters wake): at watermark 2 + seq it is still 1
                assert cache.lso_at((topic_id, 0), 2 + seq) == 1
                assert watch.waiting == 1
        assert not parked.done()
        assert md.calls.count("find_chunks") == before
        end = EndTxnRequest(
            transactional_id=TransactionalId(txn_id),
            producer_id=ProducerId(pid),
            producer_epoch=i16(epoch),
            committed=True,
        )
        assert (await asyncio.to_thread(request_once, b, end)).error_code == ErrorCode.none
        answer = await asyncio.wait_for(parked, 30)
        assert _values(bytes(answer.records)) == [b"z0", b"z1", b"z2", b"z3"]
        assert int(answer.last_stable_offset) == 6  # 1 + 4 + the marker
        assert md.calls.count("find_chunks") == before + 1
    finally:
        for x in agents:
            await x.close()
