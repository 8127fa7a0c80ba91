"""The transaction coordinator's side effects: transaction markers, timeouts, re-drives.

The state of every transactional id lives in metadata (`metadata.transactions.store`), changed
one request at a time under a row lock, so any agent may serve a transactional request, and
two agents serving one id at different times (or at once) are as safe as one: the only
state kept here is the retry table of failed re-drives, a cache. FindCoordinator still
names one agent per transactional id and client zone (rendezvous hashing of `b"txn:" + id`
over the ready agents of the client's zone, all ready agents when it has none or states
none) so that one agent normally drives each transaction, in its producer's zone. Re-drives
of stalled transactions are done by the zone-free choice (`coordinates`), one agent per id.

Markers. When a transaction is PREPARE_COMMIT / PREPARE_ABORT (EndTxn, a timeout, or a
new producer instance aborting an old one's transaction), `finish` writes one control
batch per partition of the transaction (Kafka's format: attributes transactional 0x10 +
control 0x20, the producer id and epoch, baseSequence -1, one record whose key is int16
version 0 + int16 type (0 ABORT, 1 COMMIT) and value int16 version 0 + int32 coordinator
epoch 0) into one segment file, PUTs it to the bucket and commits it with
`FileSpec.completes`: the same database transaction stores the markers (closing the
partitions' open transactions, recording aborted ranges) and moves the record to
COMPLETE_*. A transaction with no partitions (only offsets) is completed directly.
Markers bypass the produce buffer: the transaction's data was acked (so committed)
before the client could send EndTxn, so the markers always land after it.

Writing markers twice is harmless: the second file's markers find no open transaction
(so change no state, only add control batches consumers skip) and its completion is
conditional on the record still being prepared with that producer id and epoch.

Background (`run`/`scan_once`, every `scan_interval_ms`, the agent's
`transaction_scan_interval_ms`): `expire_txns()` aborts every
transaction past its `transaction.timeout.ms` (the row lock lets one agent win each) and
this agent writes the markers of those it won; prepared transactions this agent
coordinates that have not moved for `redrive_after_ms` (`transaction_redrive_after_ms`:
their coordinator died, or its PUT failed) are finished again; an attempt that fails is
retried with a doubling delay (up to `max_retry_delay_ms`,
`transaction_redrive_max_backoff_ms`), so a transaction whose markers cannot commit (the
bucket refusing PUTs) costs a file every minute at most, not every second. A topic deleted
meanwhile does not block it: the commit refuses that topic's markers only
(UNKNOWN_TOPIC_OR_PARTITION per chunk) and still completes the transaction.

Where the markers' time goes: `marker_seconds` sums, over the marker files written, the
PUT and the metadata commit (seconds of the injected monotonic clock; a DEBUG line per
file gives both). EndTxn's answer waits for them after its PREPARE write; nothing in it
waits on a timer or on the produce buffer (measured in docs/benchmarks.md, "Transactions:
where a transaction's time goes").

Test hook: `SKIFF_TXN_PAUSE_BEFORE_MARKERS` (agent.transactions.pause_hook, environment only, never
for production) makes `finish` stop before it writes the markers, so a test can kill the
coordinator between EndTxn's durable PREPARE_* and the markers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from skiff.agent import routing
from skiff.agent.produce_buffer import CommittedFile, ObjectPutter
from skiff.agent.transactions.pause_hook import TxnPauseHook
from skiff.fileformat.record_build import build_control_batch
from skiff.fileformat.record_decode import ControlRecordType
from skiff.fileformat.segment import ChunkInput, build_segment
from skiff.metadata.transactions.state import TxnRecord, TxnState
from skiff.metadata.types import BatchSpec, ChunkSpec, FileSpec
from skiff.metadata.wire.operations import AgentClient

if TYPE_CHECKING:
    from skiff.agent.agent_registry import Broker, LiveAgents

log = logging.getLogger(__name__)

DEFAULT_SCAN_INTERVAL_MS = (
    1_000  # Kafka's transaction.abort.timed.out.transaction.cleanup.interval.ms is 10 s
)
DEFAULT_REDRIVE_AFTER_MS = 5_000
DEFAULT_MAX_RETRY_DELAY_MS = 60_000  # between attempts at a transaction whose markers keep failing
_MAX_RETRY_ENTRIES = 10_000  # bound of the retry table
COORDINATOR_EPOCH = 0  # no coordinator epochs: the metadata row lock fences coordinators


def txn_key(transactional_id: str) -> bytes:
    return b"txn:" + transactional_id.encode("utf-8")


def marker_file(record: TxnRecord, *, timestamp_ms: int) -> tuple[bytes, list[ChunkSpec]]:
    """The segment file of a prepared transaction's markers and its chunk specs (pure)."""
    if not record.state.preparing:
        raise ValueError(f"markers of a transaction in state {record.state.value}")
    commit = record.state is TxnState.PREPARE_COMMIT
    batch = build_control_batch(
        ControlRecordType.COMMIT if commit else ControlRecordType.ABORT,
        producer_id=record.producer_id,
        producer_epoch=record.producer_epoch,
        coordinator_epoch=COORDINATOR_EPOCH,
        timestamp=timestamp_ms,
    )
    keys = [(uuid.UUID(t), p) for t, p in record.partitions]
    inputs = [
        ChunkInput(
            topic_id=t,
            partition=p,
            batches=[batch],
            batch_count=1,
            record_count=1,
            min_timestamp=timestamp_ms,
            max_timestamp=timestamp_ms,
        )
        for t, p in keys
    ]
    data, placements = build_segment(inputs)  # placements in the file's chunk order
    specs = [
        ChunkSpec(
            topic_id=pl.topic_id,
            partition=pl.partition,
            batches=(
                BatchSpec(
                    byte_offset=pl.batch_positions[0],
                    byte_length=len(batch),
                    offset_count=1,
                    record_count=1,
                    max_timestamp=timestamp_ms,
                    min_timestamp=timestamp_ms,
                    producer_id=record.producer_id,
                    producer_epoch=record.producer_epoch,
                    base_sequence=-1,
                    is_transactional=True,
                    control_type=int(ControlRecordType.COMMIT if commit else ControlRecordType.ABORT),
                ),
            ),
        )
        for pl in placements
    ]
    return data, specs


class TxnCoordinator:
    def __init__(
        self,
        *,
        metadata: AgentClient,
        store: ObjectPutter,
        agents: LiveAgents,
        agent_id: str,
        wall_ms: Callable[[], int],
        on_committed: Callable[[CommittedFile], None] | None = None,
        scan_interval_ms: int = DEFAULT_SCAN_INTERVAL_MS,
        redrive_after_ms: int = DEFAULT_REDRIVE_AFTER_MS,
        max_retry_delay_ms: int = DEFAULT_MAX_RETRY_DELAY_MS,
        key_prefix: str = "segments/",
        clock_s: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._metadata = metadata
        self._store = store
        self._agents = agents
        self._agent_id = agent_id
        self._wall_ms = wall_ms
        self._on_committed = on_committed
        # the agent's transaction_* settings
        self.scan_interval_ms = scan_interval_ms
        self.redrive_after_ms = redrive_after_ms
        self.max_retry_delay_ms = max_retry_delay_ms
        self._key_prefix = key_prefix
        self._task: asyncio.Task[None] | None = None
        # (id, producer id, epoch) -> (next attempt ms, delay ms): failed re-drives back off,
        # so a transaction whose markers cannot commit does not PUT a file every second.
        self._retry: dict[tuple[str, int, int], tuple[int, int]] = {}
        self.markers_written = 0  # files, for tests and metrics
        self._clock_s = clock_s
        # seconds summed over the marker files written: their PUT, their metadata commit
        self.marker_seconds: dict[str, float] = {"put": 0.0, "commit": 0.0}
        self.pause_hook = TxnPauseHook.from_env()  # a test hook, None in production

    def coordinator_for(self, transactional_id: str, zone: str | None = None) -> Broker | None:
        """The agent FindCoordinator names for a transactional id to a client of `zone`:
        hashed over the ready agents of the zone, over all ready agents when it has none or
        is None (agent.agent_registry); None when none is ready. Any agent serves any
        transactional request (the state is in metadata, under its row lock), so the choice
        need not be shared by clients of different zones."""
        owner = routing.rendezvous_owner(txn_key(transactional_id), self._agents.routed_agent_ids(zone))
        return self._agents.ready_agent(owner) if owner is not None else None

    def coordinates(self, transactional_id: str) -> bool:
        """Whether this agent re-drives the id's prepared transactions: the zone-free choice,
        so exactly one agent does whatever zones its producers are in."""
        b = self.coordinator_for(transactional_id)
        return b is not None and b.agent_id == self._agent_id

    async def finish(self, record: TxnRecord) -> bool:
        """Write the markers of a prepared transaction and complete it. False (logged) if
        that failed: the record stays prepared and the background scan tries again."""
        if self.pause_hook is not None:
            await self.pause_hook.before_markers(record)
        try:
            if not record.partitions:
                await self._metadata.complete_txn(
                    record.transactional_id, record.producer_id, record.producer_epoch
                )
                return True
            now = self._wall_ms()
            data, specs = marker_file(record, timestamp_ms=now)
            key = f"{self._key_prefix}{now:013d}-{self._agent_id}-txn-{uuid.uuid4().hex[:16]}.seg"
            t0 = self._clock_s()
            await self._store.put(key, data)
            t1 = self._clock_s()
            file = FileSpec(
                object_key=key,
                size_bytes=len(data),
                level=0,
                writer=self._agent_id,
                completes=((record.transactional_id, record.producer_id, record.producer_epoch),),
            )
            results = await self._metadata.commit_file(file, specs)
            t2 = self._clock_s()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # boundary: one transaction's markers only
            # one transaction's markers must not stop the others; the next scan retries
            log.warning(
                "transaction %r (producer %d epoch %d): markers not written yet: %s",
                record.transactional_id,
                record.producer_id,
                record.producer_epoch,
                exc,
            )
            return False
        self.markers_written += 1
        self.marker_seconds["put"] += t1 - t0
        self.marker_seconds["commit"] += t2 - t1
        log.debug(
            "transaction %r: markers of %d partitions, PUT %.1f ms, commit %.1f ms",
            record.transactional_id,
            len(record.partitions),
            (t1 - t0) * 1000,
            (t2 - t1) * 1000,
        )
        if self._on_committed is not None:
            self._on_committed(CommittedFile(key, data, (), tuple(results), tuple(specs)))
        return True

    async def scan_once(self) -> None:
        """One pass of the background work (see the module docstring)."""
        for out in await self._metadata.expire_txns():
            if out.record is not None and out.write_markers:
                log.info(
                    "transaction %r timed out after %d ms: aborting",
                    out.record.transactional_id,
                    out.record.timeout_ms,
                )
                await self.finish(out.record)
        now = self._wall_ms()
        prepared = await self._metadata.preparing_txns()
        live = {(r.transactional_id, r.producer_id, r.producer_epoch) for r in prepared}
        self._retry = {k: v for k, v in self._retry.items() if k in live}
        for record in prepared:
            key = (record.transactional_id, record.producer_id, record.producer_epoch)
            if now - record.last_update_ms < self.redrive_after_ms or not self.coordinates(
                record.transactional_id
            ):
                continue
            next_ms, delay_ms = self._retry.get(key, (0, self.redrive_after_ms))
            if now < next_ms:
                continue
            if not await self.finish(record) and len(self._retry) < _MAX_RETRY_ENTRIES:
                self._retry[key] = (now + delay_ms, min(2 * delay_ms, self.max_retry_delay_ms))

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.scan_interval_ms / 1000.0)
            try:
                await self.scan_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # boundary: the scan task must not die
                # metadata unreachable: try again at the next tick
                log.warning("transaction scan failed: %s", exc)

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
