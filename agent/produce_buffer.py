"""The produce buffer: many producers' batches -> one multi-partition file per flush.

Algorithm:
- Batches (already validated by the Produce handler) are appended to the *open file*, a
  map (topic_id, partition) -> [batch, ...] in arrival order. The first batch of an open
  file starts its timer; the file is sealed when `flush_interval_ms` less a lead has
  passed since then (`flush_interval_ms` is an ack target: the lead is the recent seal ->
  commit time plus the time the batch spent in its client, capped by `seal_lead_max_ms`;
  see `agent.seal_deadline`), but never sooner than `flush_interval_ms` after the
  previous seal (the PUT budget: time seals at most once per interval, so the lead
  shortens only a file that opened after a pause), or as soon as it holds
  `flush_max_bytes` or `flush_max_batches` batches, whichever comes first. The batch
  count bounds the work one file's commit and acks take (the commit writes a row per
  partition, not per batch, and plans each batch in a few microseconds; each append is a
  handler to resume and a response to encode); it is set above what a flush interval of
  16 MiB/s of keyed records holds, so that it bounds a commit's cost without multiplying
  PUTs at ordinary rates (see docs/benchmarks.md).
- A sealed file is built (chunks sorted by (topic_id, partition), see
  `fileformat.segment`), PUT to the bucket, then committed to metadata, which assigns
  offsets. Only then are the appends resolved with their offsets (invariant 1: nothing
  is acked before its file is stored and committed), oldest first and a chunk per event
  loop iteration, so that the loop keeps reading and firing timers while thousands of
  acks go out and the appends that waited longest are answered first.
- PUTs of consecutive files may overlap (at most `max_inflight_flushes`), but commits
  happen strictly in seal order, so a producer's batches get offsets in the order it
  sent them even when they straddle two files.
- Memory is bounded: appends wait while `max_buffered_bytes` are held by open and
  in-flight files (back-pressure reaches the producer as a slower ack, never an
  out-of-memory crash). A batch larger than the bound is still accepted alone.
- A failed PUT resolves that file's appends with a retriable error
  (`KAFKA_STORAGE_ERROR`); producers retry. A commit whose answer never came (metadata
  unreachable, a timeout) may or may not have happened: it is retried, the same file with
  the same batches, for up to `commit_retry_ms` (metadata answers a repeated commit of a
  file with what it recorded the first time), and later files wait behind it. Failing it
  at once instead would let a producer's later batches commit while the fate of earlier
  ones is unknown, and an idempotent producer that then resets its epoch re-sends records
  that may already be stored: duplicates. Only past the deadline do its producers get
  `REQUEST_TIMED_OUT`.

Time: seal deadlines and stage times are read from `monotonic_s` (seconds; by default
the running event loop's clock), the wall clock (`wall_clock_ms`) gives file names and
client waits. The seal timer is always the loop's: it is armed for the deadline's distance
by that clock and, when it fires, seals the file only if the clock says the deadline has
passed (else it re-arms for what is left). A test that injects a fake clock advances it
and calls `seal_due()` instead of sleeping.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from skiff.agent.byte_budget import ByteBudget
from skiff.agent.metrics import observe_append, observe_file
from skiff.agent.seal_deadline import SealDeadline, waited_s
from skiff.fileformat.segment import ChunkInput, ChunkPlacement, build_segment
from skiff.metadata.errors import (
    KAFKA_STORAGE_ERROR,
    REQUEST_TIMED_OUT,
    UNKNOWN_SERVER_ERROR,
    MetadataError,
    MetadataUnavailable,
)
from skiff.metadata.types import BatchResult, ChunkResult, ChunkSpec, FileSpec, produced_batch_spec
from skiff.metadata.wire.operations import AgentClient

log = logging.getLogger(__name__)

# Kafka error codes used here (kio.schema.errors.ErrorCode values).

_STAGES = ("open", "queued", "put", "ordered", "commit", "resolve")
_RESOLVE_CHUNK = 64  # appends resolved per event-loop iteration after a commit (see _resolve)


class PendingBatch(NamedTuple):
    """One validated RecordBatch and what metadata needs to know about it (a NamedTuple:
    one is built per produced batch, ~5x cheaper than a frozen dataclass)."""

    data: bytes
    offset_count: int  # last_offset_delta + 1
    record_count: int
    min_timestamp: int
    max_timestamp: int
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    timestamp_type: int = 0
    is_transactional: bool = False
    # A transactional batch's Produce request's transactional id: the commit checks the
    # batch against that id's transaction (metadata.transactions.state.check_produce).
    transactional_id: str | None = None


class BatchWaiter(Protocol):
    """Where one appended batch's outcome goes: an `asyncio.Future`, or an object of the
    caller's that acts on the outcome at once when it is set (the Produce handler's
    synchronous path: no future, done callback and loop turn per batch). `set_result`
    is called once, from the event loop, and must not raise."""

    def done(self) -> bool: ...
    def set_result(self, result: BatchResult, /) -> None: ...


@dataclass(frozen=True)
class CommittedFile:
    """What observers (fetch cache, long-poll waiters, metrics) learn after a commit."""

    object_key: str
    data: bytes
    placements: tuple[ChunkPlacement, ...]
    results: tuple[ChunkResult, ...]
    chunks: tuple[ChunkSpec, ...]


@dataclass
class _OpenFile:
    seq: int
    entries: dict[tuple[uuid.UUID, int], list[tuple[PendingBatch, BatchWaiter]]] = field(default_factory=dict)
    # every append's waiters in arrival order: acks go out oldest first (see _resolve)
    arrivals: list[BatchWaiter] = field(default_factory=list)
    size_bytes: int = 0
    timer: asyncio.TimerHandle | None = None  # the loop's wakeup for `deadline_s`
    opened_s: float = 0.0  # clock time of the first append
    deadline_s: float = 0.0  # clock time at which it is sealed (only ever moved earlier)
    lead_saturated: bool = False  # sealed by the largest lead: no append can move it earlier
    anchor_ms: int = 0  # wall time its seal counts from: its oldest batch's creation, or arrival
    floor_s: float = 0.0  # earliest seal: the previous file's seal + flush interval (PUT budget)
    sealed_s: float = 0.0


def _oldest_ms(batches: Sequence[PendingBatch]) -> int:
    """The smallest record timestamp of one partition's batches (nearly always one batch)."""
    return batches[0].min_timestamp if len(batches) == 1 else min(b.min_timestamp for b in batches)


class ObjectPutter(Protocol):
    """What the buffer needs of an async object store."""

    async def put(self, key: str, data: bytes) -> None: ...


class ProduceBuffer:
    def __init__(
        self,
        *,
        store: ObjectPutter,
        metadata: AgentClient,
        agent_id: str,
        flush_interval_ms: int = 250,
        seal_lead_max_ms: int = 0,
        flush_max_bytes: int = 8 * 1024 * 1024,
        flush_max_batches: int = 8_192,
        max_inflight_flushes: int = 4,
        max_buffered_bytes: int = 64 * 1024 * 1024,
        commit_retry_ms: int = 30_000,
        key_prefix: str = "segments/",
        wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        monotonic_s: Callable[[], float] | None = None,
        on_committed: Callable[[CommittedFile], Awaitable[None] | None] | None = None,
    ) -> None:
        if min(flush_interval_ms, flush_max_bytes, flush_max_batches, max_inflight_flushes) <= 0:
            raise ValueError(
                "flush interval, flush size, flush batches and in-flight flushes must be positive"
            )
        if max_buffered_bytes < flush_max_bytes:
            raise ValueError("max_buffered_bytes must be at least flush_max_bytes")
        self._store = store
        self._metadata = metadata
        self._agent_id = agent_id
        self._flush_interval_s = flush_interval_ms / 1000.0
        self._deadline = SealDeadline(flush_interval_ms=flush_interval_ms, seal_lead_max_ms=seal_lead_max_ms)
        self._flush_max_bytes = flush_max_bytes
        self._flush_max_batches = flush_max_batches
        self._commit_retry_s = max(commit_retry_ms, 0) / 1000.0
        self._key_prefix = key_prefix
        self._wall_clock_ms = wall_clock_ms
        self._monotonic_s = monotonic_s  # None: the running loop's clock (see _now_s)
        self._on_committed = on_committed
        self._inflight = asyncio.Semaphore(max_inflight_flushes)
        self._committing: dict[tuple[uuid.UUID, int], int] = {}  # partition -> commits in flight
        self._open: _OpenFile | None = None
        self._last_seal_s: float | None = None  # clock time of the previous seal (see _add)
        self._next_seq = 0
        self._budget = ByteBudget(max_buffered_bytes)  # open and in-flight files' bytes
        self._last_commit_done: asyncio.Future[None] | None = None  # the last sealed file's commit
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self._draining = False  # shutting down: see drain()
        # counters for metrics and tests
        self.files_flushed = 0
        self.bytes_flushed = 0
        self.flush_failures = 0
        self.commit_retries = 0
        # Where a file's time goes (loop seconds, summed over files, and the largest):
        # open (first append to seal), queued (seal to PUT start: in-flight flushes),
        # put, ordered (waiting for the previous file's commit), commit, resolve (commit
        # done to the last append resolved). See `stage_seconds`.
        self.stage_seconds: dict[str, float] = dict.fromkeys(_STAGES, 0.0)
        self.stage_max_seconds: dict[str, float] = dict.fromkeys(_STAGES, 0.0)

    @property
    def buffered_bytes(self) -> int:
        return self._budget.held_bytes

    @property
    def post_seal_estimate_s(self) -> float:
        """The learned part of the seal lead: p95 of recent files' seal -> commit times."""
        return self._deadline.post_seal_estimate_s

    def is_committing(self, key: tuple[uuid.UUID, int]) -> bool:
        """True while a commit of a file holding data for `key` awaits metadata's answer."""
        return key in self._committing

    async def append(
        self, topic_id: uuid.UUID, partition: int, batches: Sequence[PendingBatch]
    ) -> list[BatchResult]:
        """Add one partition's batches; resolves once they are committed (or failed)."""
        futures = await self.append_nowait(topic_id, partition, batches)
        return list(await asyncio.gather(*futures))

    async def append_nowait(
        self, topic_id: uuid.UUID, partition: int, batches: Sequence[PendingBatch]
    ) -> list[asyncio.Future[BatchResult]]:
        """Add batches, waiting only for buffer space; returns futures of their results."""
        if self._closed:
            raise RuntimeError("produce buffer is closed")
        size = sum(len(b.data) for b in batches)
        await self._budget.take(size)
        return self._add(topic_id, partition, batches, size)

    def has_room(self, size: int) -> bool:
        """True when `size` more bytes can be appended now without waiting (and the buffer
        is open): the Produce handler's synchronous path then calls `append_now`."""
        return not self._closed and self._budget.has_room(size)

    def append_now(
        self,
        topic_id: uuid.UUID,
        partition: int,
        batches: Sequence[PendingBatch],
        waiters: Sequence[BatchWaiter] | None = None,
    ) -> Sequence[BatchWaiter]:
        """`append_nowait` without the wait: the caller has checked `has_room` for these
        batches (and, in the same synchronous step, for everything it appends with them).
        `waiters` (one per batch) receive the outcomes instead of new futures."""
        size = sum(len(b.data) for b in batches)
        self._budget.take_now(size)
        if waiters is None:
            return self._add(topic_id, partition, batches, size)
        return self._add_waiters(topic_id, partition, batches, size, waiters)

    def _add(
        self, topic_id: uuid.UUID, partition: int, batches: Sequence[PendingBatch], size: int
    ) -> list[asyncio.Future[BatchResult]]:
        """Put batches (their bytes already counted as buffered) into the open file."""
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[BatchResult]] = [loop.create_future() for _ in batches]
        self._add_waiters(topic_id, partition, batches, size, futures)
        return futures

    def _add_waiters(
        self,
        topic_id: uuid.UUID,
        partition: int,
        batches: Sequence[PendingBatch],
        size: int,
        waiters: Sequence[BatchWaiter],
    ) -> Sequence[BatchWaiter]:
        open_file = self._open
        if open_file is None:
            now_s = self._now_s()
            open_file = self._open = _OpenFile(seq=self._next_seq, opened_s=now_s)
            self._next_seq += 1
            if self._draining:  # no batching wait: sealed once this loop iteration's appends are in
                deadline_s = now_s
            else:
                # The PUT budget: a file is never sealed by time sooner than one interval
                # after the previous seal, so time seals stay at 1/interval whatever the
                # lead. The lead then only shortens a file that opened after a pause (the
                # low-rate case it is for); under steady load files run back to back and
                # each gets the whole interval.
                if self._last_seal_s is not None:
                    open_file.floor_s = self._last_seal_s + self._flush_interval_s
                lead_s = self._deadline.lead_s(self._waited_s(open_file, _oldest_ms(batches)))
                deadline_s = max(now_s + self._flush_interval_s - lead_s, open_file.floor_s)
                open_file.lead_saturated = (
                    lead_s >= self._deadline.lead_max_s
                    or open_file.floor_s >= now_s + self._flush_interval_s - self._deadline.lead_max_s
                )
            self._arm(open_file, deadline_s, now_s)
        elif not open_file.lead_saturated and not self._draining:
            # A batch created (by its client's clock) before the file's anchor may move the
            # seal earlier, never later: one int comparison on the hot path, the clock and
            # the deadline only for such a batch.
            first_ms = _oldest_ms(batches)
            if 0 < first_ms < open_file.anchor_ms and open_file.timer is not None:
                now_s = self._now_s()
                deadline_s = self._deadline.deadline_s(now_s, self._waited_s(open_file, first_ms))
                deadline_s = max(deadline_s, open_file.floor_s)
                if deadline_s < open_file.deadline_s - 0.001:  # re-arm only for a real move
                    self._arm(open_file, deadline_s, now_s)
        entry = open_file.entries.setdefault((topic_id, partition), [])
        if len(batches) == 1:
            entry.append((batches[0], waiters[0]))
        else:
            entry += zip(batches, waiters, strict=True)
        open_file.arrivals += waiters
        open_file.size_bytes += size
        if (
            open_file.size_bytes >= self._flush_max_bytes
            or len(open_file.arrivals) >= self._flush_max_batches
        ):
            self._seal()
        return waiters

    def _waited_s(self, open_file: _OpenFile, first_ms: int) -> float:
        """How long before now a batch whose oldest record is stamped `first_ms` was created,
        by its client's clock; moves the file's anchor (the wall time its seal counts from)
        to that creation, or to now for a batch with no usable timestamp."""
        if not self._deadline.lead_max_s:
            return 0.0
        now_ms = self._wall_clock_ms()
        waited = waited_s(now_ms, first_ms)
        anchor_ms = first_ms if waited else now_ms
        if not open_file.anchor_ms or anchor_ms < open_file.anchor_ms:
            open_file.anchor_ms = anchor_ms
        return waited

    def _now_s(self) -> float:
        """Now by the buffer's clock: the injected one, or the running loop's."""
        if self._monotonic_s is not None:
            return self._monotonic_s()
        return asyncio.get_running_loop().time()

    def _arm(self, open_file: _OpenFile, deadline_s: float, now_s: float) -> None:
        """Set the open file's seal deadline and the loop's wakeup for it."""
        open_file.deadline_s = deadline_s
        if open_file.timer is not None:
            open_file.timer.cancel()
        delay_s = max(deadline_s - now_s, 0.0)
        open_file.timer = asyncio.get_running_loop().call_later(delay_s, self._on_timer, open_file.seq)

    def _on_timer(self, seq: int) -> None:
        open_file = self._open
        if open_file is None or open_file.seq != seq:
            return  # sealed meanwhile (by size or count, or a flush)
        now_s = self._now_s()
        if now_s >= open_file.deadline_s:
            self._seal()
        else:  # an injected clock behind the loop's: wait for what is left by it
            self._arm(open_file, open_file.deadline_s, now_s)

    def seal_due(self) -> bool:
        """Seal the open file now if its deadline has passed by the buffer's clock; True if
        it did. The loop's timer does this by itself; a test that advances an injected
        clock calls it to deliver the wakeup at once."""
        open_file = self._open
        if open_file is None or self._now_s() < open_file.deadline_s:
            return False
        self._seal()
        return True

    def _seal(self) -> None:
        open_file = self._open
        if open_file is None:
            return
        self._open = None
        if open_file.timer is not None:
            open_file.timer.cancel()
        loop = asyncio.get_running_loop()
        open_file.sealed_s = self._last_seal_s = self._now_s()
        self._stage("open", open_file.sealed_s - open_file.opened_s)
        previous = self._last_commit_done
        done: asyncio.Future[None] = loop.create_future()
        self._last_commit_done = done
        task = loop.create_task(self._flush(open_file, previous, done))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def flush(self) -> None:
        """Seal the open file now and wait until everything sealed so far is resolved."""
        self._seal()
        if self._tasks:  # a flush task ends once its file's appends are all resolved
            await asyncio.wait(list(self._tasks))

    async def drain(self) -> None:
        """Graceful shutdown: from now on appends are sealed without waiting for
        flush_interval_ms (a request read before the listener stopped is answered at
        once), and what is open is sealed now; resolves once everything sealed so far
        is committed or failed."""
        self._draining = True
        await self.flush()

    async def close(self) -> None:
        self._closed = True
        await self.flush()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _stage(self, stage: str, seconds: float) -> None:
        self.stage_seconds[stage] += seconds
        if seconds > self.stage_max_seconds[stage]:
            self.stage_max_seconds[stage] = seconds

    def _object_key(self) -> str:
        return f"{self._key_prefix}{self._wall_clock_ms():013d}-{self._agent_id}-{uuid.uuid4().hex[:16]}.seg"

    async def _flush(
        self, open_file: _OpenFile, previous: asyncio.Future[None] | None, done: asyncio.Future[None]
    ) -> None:
        """`previous` / `done`: the previous file's commit outcome and this one's (commit order)."""
        try:
            async with self._inflight:
                await self._put_and_commit(open_file, previous, done)
        except Exception:  # boundary: never leave a producer hanging
            log.exception("flush %d failed unexpectedly", open_file.seq)
            self._fail_all(open_file, UNKNOWN_SERVER_ERROR, "internal error while flushing")
        finally:
            if not done.done():
                done.set_result(None)
            await self._budget.release(open_file.size_bytes)

    async def _put_and_commit(
        self, open_file: _OpenFile, previous: asyncio.Future[None] | None, commit_done: asyncio.Future[None]
    ) -> None:
        """PUT and commit one file, then resolve its appends. `commit_done` is set once the commit
        has an outcome (the next file's commit waits for it, not for this file's acks)."""
        keys = sorted(open_file.entries, key=lambda k: (k[0].bytes, k[1]))
        inputs = []
        for topic_id, partition in keys:
            entry = open_file.entries[(topic_id, partition)]
            if len(entry) == 1:  # keyed produce: most partitions get one batch per file
                b = entry[0][0]
                parts, records, min_ts, max_ts = [b.data], b.record_count, b.min_timestamp, b.max_timestamp
            else:
                batches = [b for b, _ in entry]
                parts = [b.data for b in batches]
                records = sum(b.record_count for b in batches)
                min_ts = min(b.min_timestamp for b in batches)
                max_ts = max(b.max_timestamp for b in batches)
            inputs.append(ChunkInput(topic_id, partition, parts, len(entry), records, min_ts, max_ts))
        data, placements = build_segment(inputs)
        key = self._object_key()
        t0 = self._now_s()
        self._stage("queued", t0 - open_file.sealed_s)
        try:
            await self._store.put(key, data)
        except Exception as exc:  # boundary: any store failure fails this file's producers (retriable)
            self.flush_failures += 1
            log.warning("PUT %s (%d bytes) failed: %s", key, len(data), exc)
            # Commit order must still be kept for the files after this one.
            if previous is not None:
                await asyncio.shield(previous)
            self._fail_all(open_file, KAFKA_STORAGE_ERROR, f"object store write failed: {exc}")
            return
        chunk_specs = []
        for (topic_id, partition), placement in zip(keys, placements, strict=True):
            entry = open_file.entries[(topic_id, partition)]
            chunk_specs.append(
                ChunkSpec(
                    topic_id=topic_id,
                    partition=partition,
                    batches=tuple(
                        [
                            produced_batch_spec(
                                pos,
                                len(b.data),
                                b.offset_count,
                                b.record_count,
                                b.max_timestamp,
                                b.producer_id,
                                b.producer_epoch,
                                b.base_sequence,
                                b.timestamp_type,
                                b.is_transactional,
                                b.transactional_id,
                                b.min_timestamp,
                            )
                            for (b, _), pos in zip(entry, placement.batch_positions, strict=True)
                        ]
                    ),
                )
            )
        t1 = self._now_s()
        self._stage("put", t1 - t0)
        if previous is not None:
            await asyncio.shield(previous)  # commit strictly in seal order
        t2 = self._now_s()
        self._stage("ordered", t2 - t1)
        file_spec = FileSpec(object_key=key, size_bytes=len(data), level=0, writer=self._agent_id)
        for k in keys:
            self._committing[k] = self._committing.get(k, 0) + 1
        try:
            results = await self._commit_with_retry(file_spec, chunk_specs)
        except MetadataUnavailable as exc:
            self.flush_failures += 1
            log.warning("commit of %s failed, metadata unavailable: %s", key, exc)
            # Ambiguous: the commit may or may not have happened. Retriable for the client;
            # idempotent producers are de-duplicated by sequence number on retry.
            self._fail_all(open_file, REQUEST_TIMED_OUT, f"metadata unavailable: {exc}")
            return
        except MetadataError as exc:
            self.flush_failures += 1
            self._fail_all(open_file, exc.error_code, exc.message)
            return
        finally:
            for k in keys:
                left = self._committing[k] - 1
                if left:
                    self._committing[k] = left
                else:
                    del self._committing[k]
            commit_done.set_result(None)
        t3 = self._now_s()
        self._stage("commit", t3 - t2)
        if len(results) != len(chunk_specs):
            raise RuntimeError("metadata returned a result count that does not match the chunks")
        self.files_flushed += 1
        self.bytes_flushed += len(data)
        observe_file(len(data), sum(i.record_count for i in inputs))
        outcomes: dict[BatchWaiter, BatchResult] = {}
        append_ms: list[int] = []  # CreateTime batches committed: their oldest timestamps
        for (topic_id, partition), result in zip(keys, results, strict=True):
            pending = open_file.entries[(topic_id, partition)]
            if not result.error_code:
                append_ms.extend(b.min_timestamp for b, _ in pending if b.timestamp_type == 0)
            for i, (_, fut) in enumerate(pending):
                if result.error_code and not result.batches:
                    outcomes[fut] = BatchResult(
                        error_code=result.error_code, error_message=result.error_message
                    )
                else:
                    outcomes[fut] = result.batches[i]
        observe_append(self._wall_clock_ms(), append_ms)
        if self._on_committed is not None:  # before the acks: a fetch after an ack finds the new chunks
            committed = CommittedFile(key, data, tuple(placements), tuple(results), tuple(chunk_specs))
            try:
                maybe = self._on_committed(committed)
                if maybe is not None:
                    await maybe
            except Exception:  # boundary: an observer's failure must not stop the commit path
                log.exception("on_committed observer failed")
        # The seal -> first ack time this file took: what the next files' seal lead learns.
        self._deadline.record_post_seal(self._now_s() - open_file.sealed_s)
        await self._resolve(open_file.arrivals, outcomes)
        self._stage("resolve", self._now_s() - t3)

    async def _resolve(
        self,
        arrivals: list[BatchWaiter],
        outcomes: dict[BatchWaiter, BatchResult],
    ) -> None:
        """Resolve a committed file's appends oldest first, `_RESOLVE_CHUNK` per loop iteration.

        A file answers thousands of small requests at once. Resolving all their futures in
        one go makes the loop resume every waiting handler, and encode every response, in a
        single iteration (~25 us each: 50-70 ms for 2,300) during which nothing is read,
        no timer fires and the commit thread waits for the GIL. In chunks, the oldest
        appends (the ones closest to their deadline: they waited the whole flush interval)
        are answered first and the loop keeps turning between chunks.
        """
        for n, fut in enumerate(arrivals, 1):
            if not fut.done():
                fut.set_result(outcomes[fut])
            if n % _RESOLVE_CHUNK == 0 and n < len(arrivals):
                await asyncio.sleep(0)

    async def _commit_with_retry(
        self, file_spec: FileSpec, chunk_specs: list[ChunkSpec]
    ) -> list[ChunkResult]:
        """commit_file, repeated while metadata cannot be reached and `commit_retry_ms` has
        not passed (see the module docstring: an unanswered commit is ambiguous)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._commit_retry_s
        backoff_s = 0.05
        while True:
            try:
                return await self._metadata.commit_file(file_spec, chunk_specs)
            except MetadataUnavailable as exc:
                left = deadline - loop.time()
                if left <= 0 or self._closed:  # shutting down: answer the producers now
                    raise
                self.commit_retries += 1
                log.warning("commit of %s: metadata unavailable (%s); retrying", file_spec.object_key, exc)
                await asyncio.sleep(min(backoff_s, left))
                backoff_s = min(backoff_s * 2, 1.0)

    @staticmethod
    def _fail_all(open_file: _OpenFile, error_code: int, message: str) -> None:
        for pending in open_file.entries.values():
            for _, fut in pending:
                if not fut.done():
                    fut.set_result(BatchResult(error_code=error_code, error_message=message))
