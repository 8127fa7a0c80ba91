"""A pod's writer and its workers' clients (agent.workers), in one process over a real Unix
socket, a real ProduceBuffer, the real metadata service (SQLite) and an in-memory bucket.

What is asserted: two workers' appends become one file (one PUT) with offsets in each
worker's order; every worker hears of the file (chunk rows) before the outcomes of the
appends it holds; a worker's own bytes are kept at their place in the file (a tail fetch
needs no GET); a lost writer answers pending appends with a retriable error and stops the
worker; a worker that sends garbage is cut off without harm to the others.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from skiff.agent.produce_buffer import PendingBatch, ProduceBuffer
from skiff.agent.workers.wire import FileChunk
from skiff.agent.workers.writer_client import PodWriterClient
from skiff.agent.workers.writer_server import PodWriter
from skiff.fileformat.objectstore import open_async_store
from skiff.fileformat.record_build import build_batch
from skiff.metadata.errors import KAFKA_STORAGE_ERROR
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService


def batch(value: bytes) -> PendingBatch:
    """A real one-record RecordBatch (metadata refuses anything shorter than a batch header)."""
    data = build_batch([(0, 1_700_000_000_000, None, value, ())])
    return PendingBatch(
        data, offset_count=1, record_count=1, min_timestamp=1_700_000_000_000, max_timestamp=1_700_000_000_000
    )


async def until(cond: Callable[[], bool]) -> None:
    """Turn the loop (its sockets polled each turn) until `cond` holds."""
    for _ in range(1_000_000):
        if cond():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


@dataclass
class Worker:
    client: PodWriterClient
    learnt: list[FileChunk] = field(default_factory=list)
    kept: dict[tuple[str, int], bytes] = field(default_factory=dict)
    lost: asyncio.Event = field(default_factory=asyncio.Event)
    # appends whose futures were already resolved when the file's news arrived (must be none)
    resolved_before_news: int = 0


@dataclass
class Pod:
    writer: PodWriter
    buffer: ProduceBuffer
    store: object
    service: MetadataService
    socket_path: str
    workers: list[Worker]
    topic_id: uuid.UUID

    async def worker(self) -> Worker:
        w: Worker

        def learn(chunk: FileChunk) -> None:
            w.learnt.append(chunk)

        def keep(key: str, start: int, data: bytes) -> None:
            w.kept[(key, start)] = bytes(data)

        w = Worker(
            PodWriterClient(
                self.socket_path,
                learn=learn,
                keep=keep,
                max_buffered_bytes=1 << 20,
                on_lost=lambda: w.lost.set(),
            )
        )
        await w.client.start()
        self.workers.append(w)
        return w


@pytest.fixture
async def pod(tmp_path: Path) -> AsyncIterator[Pod]:
    service = MetadataService.from_url("sqlite://", bucket_url="memory://pod", verify_objects=False)
    topic = service.create_topic("t", 4, {})
    metadata = LocalMetadataClient(service)
    store = open_async_store("memory://pod")
    writer: PodWriter | None = None
    buffer = ProduceBuffer(
        store=store,
        metadata=metadata,
        agent_id="pod",
        flush_interval_ms=60_000,  # sealed by the tests' flushes only
        on_committed=lambda c: writer.on_committed(c) if writer is not None else None,
    )
    writer = PodWriter(buffer, lambda: {os.getpid()})
    path = str(tmp_path / "writer.sock")
    await writer.start(path)
    p = Pod(writer, buffer, store, service, path, [], topic.topic_id)
    yield p
    for w in p.workers:
        await w.client.close()
    await writer.close()
    await metadata.close()
    service.close()


async def test_two_workers_appends_make_one_file_with_offsets_in_order(pod: Pod) -> None:
    a, b = await pod.worker(), await pod.worker()
    fa = a.client.append_now(pod.topic_id, 0, [batch(b"a0"), batch(b"a1")])
    fb = b.client.append_now(pod.topic_id, 1, [batch(b"b0")])
    fa2 = await a.client.append_nowait(pod.topic_id, 0, [batch(b"a2")])
    assert a.client.is_committing((pod.topic_id, 0)) and not a.client.is_committing((pod.topic_id, 1))
    await until(lambda: pod.writer.appends == 3)  # both workers' appends are in the open file
    await a.client.flush()  # seals it
    results = [await f for f in [*fa, *fa2, *fb]]
    assert [r.error_code for r in results] == [0, 0, 0, 0], results[0].error_message
    assert [r.base_offset for r in results] == [0, 1, 2, 0]  # a's order kept; b's own partition
    assert pod.buffer.files_flushed == 1
    assert a.client.files_flushed == b.client.files_flushed == 1
    assert not a.client.is_committing((pod.topic_id, 0))
    assert a.client.buffered_bytes == b.client.buffered_bytes == 0


async def test_workers_learn_the_file_before_its_acks_and_keep_their_own_bytes(pod: Pod) -> None:
    a, b = await pod.worker(), await pod.worker()
    futures = a.client.append_now(pod.topic_id, 2, [batch(b"first"), batch(b"second")])

    def check(chunk: FileChunk) -> None:
        a.resolved_before_news += sum(f.done() for f in futures)

    a.client._learn = lambda chunk: (check(chunk), a.learnt.append(chunk))  # type: ignore[assignment]
    b.client.append_now(pod.topic_id, 3, [batch(b"other")])
    await until(lambda: pod.writer.appends == 2)
    await b.client.flush()
    await asyncio.gather(*futures)
    assert a.resolved_before_news == 0
    # both workers hear of both partitions' chunk rows (a fetch on either worker is answered)
    for w in (a, b):
        assert {(c.partition, c.locations[0].base_offset, c.locations[0].last_offset) for c in w.learnt} == {
            (2, 0, 1),
            (3, 0, 0),
        }
    # each worker kept its own chunk rows whole (one span each: a fetch reads a row whole),
    # exactly the stored file's bytes there
    (key,) = {loc.object_key for c in a.learnt for loc in c.locations}
    stored = await pod.store.get(key)  # type: ignore[attr-defined]
    rows = {c.partition: c.locations[0] for c in a.learnt}
    assert a.kept == {
        (key, rows[2].byte_position): stored[
            rows[2].byte_position : rows[2].byte_position + rows[2].byte_length
        ]
    }
    assert a.kept[(key, rows[2].byte_position)] == batch(b"first").data + batch(b"second").data
    assert b.kept == {(key, rows[3].byte_position): batch(b"other").data}


async def test_back_pressure_parks_appends_until_answers_free_room(pod: Pod) -> None:
    w = await pod.worker()
    one = len(batch(b"x").data)
    w.client._budget.max_bytes = one + 1  # the bound is by bytes of unanswered appends
    first = w.client.append_now(pod.topic_id, 0, [batch(b"x")])
    assert not w.client.has_room(one)
    parked = asyncio.ensure_future(w.client.append_nowait(pod.topic_id, 0, [batch(b"y")]))
    await asyncio.sleep(0)
    assert not parked.done()
    await w.client.flush()
    assert (await first[0]).error_code == 0
    second = await parked
    await w.client.flush()
    assert (await second[0]).base_offset == 1


async def test_a_lost_writer_answers_pending_appends_retriably_and_stops_the_worker(pod: Pod) -> None:
    w = await pod.worker()
    pending = w.client.append_now(pod.topic_id, 0, [batch(b"lost")])
    await until(lambda: pod.writer.appends == 1)  # the writer holds it, unanswered
    for link in list(pod.writer._links):
        link.writer.transport.abort()
    await asyncio.wait_for(w.lost.wait(), 30)
    assert (await pending[0]).error_code == KAFKA_STORAGE_ERROR
    later = w.client.append_now(pod.topic_id, 0, [batch(b"after")])
    assert (await later[0]).error_code == KAFKA_STORAGE_ERROR
    assert not w.client.has_room(1)


async def test_a_worker_sending_garbage_is_cut_off_and_the_others_go_on(pod: Pod) -> None:
    good = await pod.worker()
    reader, writer = await asyncio.open_unix_connection(pod.socket_path)
    writer.write(b"\x00\x00\x00\x05\x63junk")  # a frame of an unknown kind
    await writer.drain()
    assert await reader.read() == b""  # the writer closed it
    writer.close()
    futures = good.client.append_now(pod.topic_id, 0, [batch(b"fine")])
    await good.client.flush()
    assert (await futures[0]).error_code == 0


async def test_only_the_pods_workers_may_connect(pod: Pod) -> None:
    own = ProduceBuffer(store=pod.store, metadata=pod.buffer._metadata, agent_id="strict")  # type: ignore[arg-type]
    strict = PodWriter(own, lambda: {os.getpid() + 1})  # not this process
    path = "\0skiff-test-" + uuid.uuid4().hex
    await strict.start(path)
    lost = asyncio.Event()
    client = PodWriterClient(
        path, learn=lambda c: None, keep=lambda k, s, d: None, max_buffered_bytes=1 << 20, on_lost=lost.set
    )
    try:
        try:
            await client.start()
        except OSError:  # refused before the hello left
            lost.set()
        await asyncio.wait_for(lost.wait(), 30)  # or refused after it: the writer closed the connection
        assert strict.workers_connected == 0
    finally:
        await client.close()
        await strict.close()
