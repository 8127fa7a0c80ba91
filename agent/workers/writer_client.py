"""A worker's produce buffer: the pod writer's client (agent.workers).

It has the produce buffer's interface (`agent.context.ProduceSink`: `has_room`, `append_now`,
`append_nowait`, `flush`, `drain`, `close`, `is_committing` and the counters the metrics
read), so the Produce handler cannot tell it from a `ProduceBuffer`. An append:

1. gets an id and a future per batch, and joins the outbox; all the appends of one event-loop
   turn leave in one APPEND frame (agent.workers.wire), in the order they were made, so a
   connection's batches reach the writer in request order;
2. the writer answers with FILE frames (every committed file's chunk rows and the file
   positions of its stored batches) and RESULTS frames (each append's outcomes). A FILE
   frame comes before the outcomes of the appends it holds: `learn` (wired by
   agent.runtime.build_agent_context) tells the chunk-location cache and the commit watch, and the batches'
   own bytes go into the range cache, a span per chunk row (agent.workers.kept_runs), so a
   fetch after the ack finds the chunks and a tail consumer needs no GET, as with one process.

Memory: the bytes of appends not yet answered are bounded by `max_buffered_bytes` (an
append waits for room as on the buffer itself); the writer bounds its own buffer the same
way. The file positions learnt and not yet claimed by an outcome are kept for the last
`_PLACED_FILES` files only.

Losing the writer (its socket closed: the pod is stopping or the writer died) answers every
pending append with KAFKA_STORAGE_ERROR (retriable: producers go to another agent) and
calls `on_lost`, which stops the worker.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
import uuid
from collections.abc import Callable, Sequence
from functools import partial

from skiff.agent.byte_budget import ByteBudget
from skiff.agent.produce_buffer import BatchWaiter, PendingBatch
from skiff.agent.workers.kept_runs import Keep, KeptRuns
from skiff.agent.workers.ring import Region, Ring
from skiff.agent.workers.wire import (
    FILE,
    FLUSH,
    FLUSHED,
    FRAME_HEAD_BYTES,
    RESULTS,
    AppendOut,
    CommittedFileNews,
    FileChunk,
    WireError,
    decode_file,
    decode_id,
    decode_results,
    encode_appends,
    encode_id,
    frame_header,
    hello,
)
from skiff.metadata.errors import KAFKA_STORAGE_ERROR
from skiff.metadata.types import BatchResult

log = logging.getLogger(__name__)

Key = tuple[uuid.UUID, int]
Learn = Callable[[FileChunk], None]

_PLACED_FILES = 16  # files whose batch positions are kept for outcomes still to come
_STREAM_LIMIT = 1024 * 1024


class _Pending:
    __slots__ = ("batches", "futures", "key", "regions", "size")

    def __init__(
        self,
        key: Key,
        batches: Sequence[PendingBatch],
        futures: list[asyncio.Future[BatchResult]],
        size: int,
        regions: list[Region | None],
    ):
        self.key = key
        self.batches = batches
        self.futures = futures
        self.size = size
        self.regions = regions  # where each batch lies in the ring (None: sent inline)


class PodWriterClient:
    def __init__(
        self,
        path: str,
        *,
        learn: Learn,
        keep: Keep,
        max_buffered_bytes: int,
        on_lost: Callable[[], None] = lambda: None,
    ) -> None:
        self._path = path
        self._learn = learn
        self._on_lost = on_lost
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._read_task: asyncio.Task[None] | None = None
        self._next_id = 0
        self._pending: dict[int, _Pending] = {}
        self._per_key: collections.Counter[Key] = collections.Counter()
        self._outbox: list[AppendOut] = []
        self._ring: Ring | None = None
        self._send_scheduled = False
        self._flushes: dict[int, asyncio.Future[None]] = {}
        self._kept = KeptRuns(keep, _PLACED_FILES)
        self._budget = ByteBudget(max_buffered_bytes)  # bytes of appends not yet answered
        self._closed = False
        self._draining = False
        self._lost = False
        self._wake: asyncio.Task[None] | None = None
        # The counters agent.metrics reads from a produce buffer. The stages and commit
        # retries are the writer's (its own /metrics): none here.
        self.files_flushed = 0  # files this worker heard committed
        self.bytes_flushed = 0  # this worker's batch bytes answered as stored
        self.flush_failures = 0  # appends answered with an error
        self.commit_retries = 0
        self.stage_seconds: dict[str, float] = {}
        self.stage_max_seconds: dict[str, float] = {}
        self.post_seal_estimate_s = 0.0

    async def start(self) -> None:
        """Connect to the writer and hand it the ring (its descriptor travels with the hello)."""
        self._ring = Ring(self._budget.max_bytes)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            await asyncio.get_running_loop().run_in_executor(None, sock.connect, self._path)
            socket.send_fds(sock, [hello(self._ring.size_bytes)], [self._ring.fd])
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        self._reader, self._writer = await asyncio.open_unix_connection(sock=sock, limit=_STREAM_LIMIT)
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop(), name="pod-writer-client")

    @property
    def buffered_bytes(self) -> int:
        return self._budget.held_bytes

    def is_committing(self, key: Key) -> bool:
        """True while an append to `key` awaits its outcome (sent, or committing)."""
        return key in self._per_key

    def has_room(self, size: int) -> bool:
        return not self._closed and not self._lost and self._budget.has_room(size)

    async def append_nowait(
        self, topic_id: uuid.UUID, partition: int, batches: Sequence[PendingBatch]
    ) -> list[asyncio.Future[BatchResult]]:
        if self._closed:
            raise RuntimeError("produce buffer is closed")
        size = sum(len(b.data) for b in batches)
        if self._lost or not await self._budget.take(size, give_up=lambda: self._lost):
            return _failed(len(batches))
        return self._add(topic_id, partition, batches, size)

    def append_now(
        self,
        topic_id: uuid.UUID,
        partition: int,
        batches: Sequence[PendingBatch],
        waiters: Sequence[BatchWaiter] | None = None,
    ) -> Sequence[BatchWaiter]:
        if self._lost:
            futures = _failed(len(batches))
        else:
            size = sum(len(b.data) for b in batches)
            self._budget.take_now(size)
            futures = self._add(topic_id, partition, batches, size)
        if waiters is None:
            return futures
        # The caller's waiters get the outcomes through the futures, which flush() waits on.
        for fut, waiter in zip(futures, waiters, strict=True):
            fut.add_done_callback(partial(_forward, waiter))
        return waiters

    def _add(
        self, topic_id: uuid.UUID, partition: int, batches: Sequence[PendingBatch], size: int
    ) -> list[asyncio.Future[BatchResult]]:
        """Send batches whose bytes are already taken from the budget."""
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[BatchResult]] = [loop.create_future() for _ in batches]
        append_id = self._next_id
        self._next_id += 1
        key = (topic_id, partition)
        ring = self._ring
        regions: list[Region | None] = [ring.put(b.data) if ring is not None else None for b in batches]
        self._pending[append_id] = _Pending(key, batches, futures, size, regions)
        self._per_key[key] += 1
        positions = [-1 if r is None else r.start for r in regions]
        self._outbox.append((append_id, topic_id, partition, batches, positions))
        if not self._send_scheduled:
            self._send_scheduled = True
            loop.call_soon(self._send_outbox)
        return futures

    def _send_outbox(self) -> None:
        self._send_scheduled = False
        outbox, self._outbox = self._outbox, []
        if not outbox or self._writer is None or self._lost:
            return
        self._writer.writelines(encode_appends(outbox))
        if self._draining:  # shutting down: no batching wait at the writer
            self._send_flush()

    def _send_flush(self) -> asyncio.Future[None]:
        flush_id = self._next_id
        self._next_id += 1
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._flushes[flush_id] = fut
        if self._writer is None or self._lost:
            fut.set_result(None)
        else:
            self._writer.write(encode_id(FLUSH, flush_id))
        return fut

    async def flush(self) -> None:
        """Ask the writer to seal now; resolves once everything appended before is answered."""
        self._send_outbox()
        waiting = [f for p in self._pending.values() for f in p.futures]
        await self._send_flush()
        if waiting:
            await asyncio.wait(waiting)

    async def drain(self) -> None:
        """Graceful shutdown: every later append is sealed at once; what is sent is flushed."""
        self._draining = True
        await self.flush()

    async def close(self) -> None:
        self._closed = True
        if not self._lost:
            await self.flush()
        if self._read_task is not None:
            self._read_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._read_task
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()
        if self._ring is not None:
            self._ring.close()  # the writer's own mapping stays valid for what it still holds
            self._ring = None

    async def _read_loop(self) -> None:
        assert self._reader is not None
        try:
            while True:
                length, kind = frame_header(await self._reader.readexactly(FRAME_HEAD_BYTES))
                payload = memoryview(await self._reader.readexactly(length))
                if kind == FILE:
                    self._on_file(decode_file(payload))
                elif kind == RESULTS:
                    await self._on_results(decode_results(payload))
                elif kind == FLUSHED:
                    fut = self._flushes.pop(decode_id(payload), None)
                    if fut is not None and not fut.done():
                        fut.set_result(None)
                else:
                    raise WireError(f"unknown frame kind {kind} from the pod writer")
        except (asyncio.IncompleteReadError, ConnectionError, WireError) as e:
            if not self._closed:
                log.error(
                    "lost the pod writer (%s): answering %d appends and stopping", e, len(self._pending)
                )
            self._lose()

    def _on_file(self, news: CommittedFileNews) -> None:
        self.files_flushed += 1
        self.post_seal_estimate_s = news.post_seal_estimate_s
        for chunk in news.chunks:
            self._learn(chunk)
        self._kept.learn(news)

    async def _on_results(self, results: list[tuple[int, list[BatchResult]]]) -> None:
        for append_id, outcomes in results:
            pending = self._pending.pop(append_id, None)
            if pending is None or len(outcomes) != len(pending.futures):
                raise WireError(f"outcome for unknown append {append_id}")
            for batch, fut, outcome in zip(pending.batches, pending.futures, outcomes, strict=True):
                if outcome.error_code:
                    self.flush_failures += 1
                elif not outcome.duplicate:
                    self.bytes_flushed += len(batch.data)
                    self._kept.stored(pending.key[0], pending.key[1], outcome.base_offset, batch.data)
                if not fut.done():
                    fut.set_result(outcome)
            self._settle(pending)
        await self._budget.wake()

    def _settle(self, pending: _Pending) -> None:
        if self._ring is not None:
            for region in pending.regions:
                if region is not None:
                    self._ring.free(region)
        self._budget.release_now(pending.size)
        left = self._per_key[pending.key] - 1
        if left:
            self._per_key[pending.key] = left
        else:
            del self._per_key[pending.key]

    def _lose(self) -> None:
        if self._lost:
            return
        self._lost = True
        for pending in self._pending.values():
            for fut in pending.futures:
                if not fut.done():
                    fut.set_result(_lost_result())
            self._settle(pending)
        self._pending.clear()
        for flushed in self._flushes.values():
            if not flushed.done():
                flushed.set_result(None)
        self._flushes.clear()
        # Appends waiting for room are woken: they now fail at once (see _add).
        self._wake = asyncio.get_running_loop().create_task(self._budget.wake())
        if not self._closed:
            self._on_lost()


def _forward(waiter: BatchWaiter, fut: asyncio.Future[BatchResult]) -> None:
    waiter.set_result(fut.result())


def _failed(count: int) -> list[asyncio.Future[BatchResult]]:
    """Outcomes for appends made once the writer is gone: a retriable error each."""
    loop = asyncio.get_running_loop()
    futures: list[asyncio.Future[BatchResult]] = [loop.create_future() for _ in range(count)]
    for fut in futures:
        fut.set_result(_lost_result())
    return futures


def _lost_result() -> BatchResult:
    return BatchResult(error_code=KAFKA_STORAGE_ERROR, error_message="the pod's writer is gone")
