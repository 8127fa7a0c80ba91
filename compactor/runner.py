"""One maintenance pass, and the loop of them: what `skiff compact`, the playground timer
and an agent's compaction role run.

A pass, in this order:

1. retention (`compactor.retention.enforce_all`): drops whole chunks by `retention.ms` /
   `retention.bytes` and below the log start offset, so compaction never rewrites data
   that is about to go;
2. compaction rounds: the planner claims a job (a lease on all its partitions,
   `compactor.planner.claim_jobs`), the job runs in a worker thread (`compactor.job.run_job`,
   blocking: two streaming GETs per input file) while this loop renews the lease every
   third of its lifetime; each output file is swapped with `replace_chunks(...,
   checkpoints, lease_token)` from the worker through the event loop; the lease is released
   at the end, whatever happened. Rounds repeat until the planner has nothing to offer, or
   offers exactly the input chunks of a round before (no progress: stop rather than spin);
2b. tables (`compactor.tables`, when `RunnerConfig.tables` is set): every topic with
   `skiff.table.enabled` gets its committed records appended to its Iceberg table;
3. garbage collection (`compactor.gc.GarbageCollector`): files past their grace period,
   then the paged orphan scan;
4. committed-offset expiry (`compactor.retention.expire_offsets`, Kafka's
   `offsets.retention.minutes`).

A failed job (lost lease, refused swap, unreadable input) is logged and counted; its
inputs stay live and its partitions are planned again once the lease is gone. A pass
never raises for one job's failure. Many runners may run side by side: the leases keep
their jobs apart, the collector's claims keep their deletes apart.

Logs: one INFO line when a job is claimed and one when it is done (its swaps at DEBUG),
one GC summary when GC deleted something, and the pass's line at INFO only when the pass
changed something (DEBUG otherwise), so an idle cluster's passes log nothing at INFO.

What a pass did is `compactor.pass_summary.PassSummary`; `compactor.maintenance_loop.MaintenanceLoop`
runs passes on an interval until stopped (the playground, agents with the compaction role,
`skiff compact` without `--once`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from skiff.compactor import metrics, retention
from skiff.compactor.gc import DEFAULT_GRACE_MS, DEFAULT_ORPHAN_GRACE_MS, GarbageCollector
from skiff.compactor.job import JobResult, planned_stream_bytes, run_job
from skiff.compactor.keymap import DEFAULT_BUDGET_BYTES
from skiff.compactor.output import DEFAULT_ROLL_BYTES, Checkpoint
from skiff.compactor.pass_summary import NoProgress, PassSummary, Progress
from skiff.compactor.pause_hook import PauseHook
from skiff.compactor.plan import JobPlan
from skiff.compactor.planner import PlannerConfig, claim_jobs
from skiff.fileformat.objectstore import ObjectStore
from skiff.metadata.compaction.types import CheckpointUpdate
from skiff.metadata.types import FileSpec, OutputChunk
from skiff.metadata.wire.operations import CompactorClient

if TYPE_CHECKING:
    from skiff.compactor.tables import TablesConfig

log = logging.getLogger(__name__)

PROGRESS_STEP_BYTES = 1 << 20  # report streamed bytes to the progress bars this often
MAX_ROUNDS_PER_PASS = 10_000  # a safety net: each round consumes input chunks or the pass ends


class SwapClient(Protocol):
    """The one blocking metadata operation a job's thread calls (the blocking clients forward
    it as declared in `metadata.wire.operations`)."""

    def replace_chunks(
        self,
        input_chunk_ids: Sequence[int],
        file: FileSpec,
        outputs: Sequence[OutputChunk],
        checkpoints: Sequence[CheckpointUpdate] = (),
        lease_token: str | None = None,
    ) -> None: ...


@dataclass(frozen=True)
class RunnerConfig:
    planner: PlannerConfig = field(default_factory=PlannerConfig)
    topic: str | None = None  # compact only this topic (retention too); None: all
    keymap_budget_bytes: int = DEFAULT_BUDGET_BYTES
    roll_bytes: int = DEFAULT_ROLL_BYTES
    key_prefix: str = "compacted/"
    gc_grace_ms: int = DEFAULT_GRACE_MS
    orphan_grace_ms: int = DEFAULT_ORPHAN_GRACE_MS
    offsets_retention_minutes: int = retention.DEFAULT_OFFSETS_RETENTION_MINUTES
    retention: bool = True
    gc: bool = True
    expire_offsets: bool = True
    pause: PauseHook | None = None  # the test hook (compactor.pause_hook); None in production
    # A blocking metadata client (`metadata.wire.connect.open_sync_metadata_client`) the job's
    # thread swaps through directly; None: each swap hops to the event loop's async client
    # (an agent's compaction role and the playground have only that one).
    swap_client: SwapClient | None = None
    # Where topics' Iceberg tables go (compactor.tables); None: no tables are materialized.
    tables: TablesConfig | None = None


@dataclass
class LeasedJob:
    """A finished job and what its streams read."""

    result: JobResult
    bytes_read: int


async def run_leased_job(
    md: CompactorClient,
    store: ObjectStore,
    plan: JobPlan,
    config: RunnerConfig,
    progress: Progress | None = None,
) -> LeasedJob:
    """Run one claimed job: the blocking runner in a thread, the lease renewed meanwhile,
    each output swapped under the lease with its checkpoints, the lease released at the end."""
    token = plan.lease_token
    job = _JobThread(md, store, plan, config, progress or NoProgress(), asyncio.get_running_loop())
    renewer = asyncio.create_task(_renew(md, token, config.planner.lease_ms)) if token else None
    try:
        result = await asyncio.to_thread(job.work)
        return LeasedJob(result, job.read_bytes)
    finally:
        if renewer is not None:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
        if token:
            try:
                await md.release_compaction_lease(token)
            except Exception as exc:  # boundary: cleanup must not mask the outcome
                # the lease expires on its own; the work is done or retried
                log.warning("compaction: releasing lease of job %s failed: %s", plan.job_id, exc)


class _JobThread:
    """One job run in a worker thread: it swaps each output through the event loop (under the
    job's lease, with its checkpoints) and reports progress to the loop."""

    def __init__(
        self,
        md: CompactorClient,
        store: ObjectStore,
        plan: JobPlan,
        config: RunnerConfig,
        progress: Progress,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._md = md
        self._store = store
        self._plan = plan
        self._config = config
        self._progress = progress
        self._loop = loop
        self._holder = config.planner.holder
        self._pause = config.pause
        self.read_bytes = 0  # bytes streamed, written by the job's thread only
        self._unreported = {"A": 0, "B": 0}

    def swap(
        self, ids: Sequence[int], file: FileSpec, outputs: Sequence[OutputChunk], cps: Sequence[Checkpoint]
    ) -> None:
        plan = self._plan
        updates = [CheckpointUpdate(c.topic_id, c.partition, c.first_dirty_offset) for c in cps]
        direct = self._config.swap_client
        if direct is not None:  # from this thread, no hop to the loop
            direct.replace_chunks(list(ids), file, list(outputs), updates, plan.lease_token)
        else:
            fut = asyncio.run_coroutine_threadsafe(
                self._md.replace_chunks(list(ids), file, list(outputs), updates, plan.lease_token), self._loop
            )
            fut.result()
        # DEBUG: a job may swap many outputs; its one INFO line is the summary at its end
        log.debug(
            "compaction: holder %s job %s swapped %s (%d bytes) for %d input chunk(s): %s",
            self._holder,
            plan.job_id,
            file.object_key,
            file.size_bytes,
            len(ids),
            ",".join(map(str, ids)),
        )
        self._loop.call_soon_threadsafe(self._progress.file_swapped, plan, file.object_key, len(ids))
        if self._pause is not None:
            self._pause.swapped(plan.job_id, self._holder)

    def on_read(self, stream: str, nbytes: int) -> None:
        self.read_bytes += nbytes
        self._unreported[stream] += nbytes
        # one call into the loop per MiB or so, not per network piece
        if self._unreported[stream] >= PROGRESS_STEP_BYTES:
            self._loop.call_soon_threadsafe(
                self._progress.bytes_read, self._plan, stream, self._unreported[stream]
            )
            self._unreported[stream] = 0

    def work(self) -> JobResult:
        if self._pause is not None:
            self._pause.job_started(self._plan.job_id, self._holder)
        try:
            return run_job(
                self._plan,
                self._store,
                self.swap,
                key_prefix=self._config.key_prefix,
                writer_id=self._holder,
                keymap_budget_bytes=self._config.keymap_budget_bytes,
                roll_bytes=self._config.roll_bytes,
                on_read=self.on_read,
            )
        finally:
            for stream, n in self._unreported.items():
                if n:
                    self._loop.call_soon_threadsafe(self._progress.bytes_read, self._plan, stream, n)


async def _renew(md: CompactorClient, token: str, lease_ms: int) -> None:
    """Renew every third of the lease's lifetime; a lost lease is logged (the swap refuses)."""
    while True:
        await asyncio.sleep(lease_ms / 3000)
        try:
            await md.renew_compaction_lease(token, lease_ms)
        except Exception as exc:  # boundary: the renewal task must not die
            # a lost lease is logged and the swap refuses
            log.warning("compaction: renewing lease failed: %s", exc)


async def _compact(
    md: CompactorClient, store: ObjectStore, config: RunnerConfig, progress: Progress, summary: PassSummary
) -> None:
    """Claim and run jobs one at a time until none is left (or the same work comes back, or
    MAX_ROUNDS_PER_PASS), adding each to `summary`."""
    seen: set[frozenset[tuple[int, str]]] = set()
    for _ in range(MAX_ROUNDS_PER_PASS):
        plans = await claim_jobs(md, topic=config.topic, config=config.planner, max_jobs=1)
        if not plans:
            break
        plan = plans[0]
        # chunk ids alone are not enough: SQLite reuses the id of a deleted last row, so a
        # swap's output chunk can carry its input's id; its file is always new
        inputs = frozenset((ch.location.chunk_id, f.object_key) for f in plan.files for ch in f.chunks)
        if inputs in seen:  # the same work again: the last run of it changed nothing
            if plan.lease_token:
                await md.release_compaction_lease(plan.lease_token)
            log.warning("compaction: job over the same input chunks offered again; stopping this pass")
            break
        seen.add(inputs)
        log.info(
            "compaction: holder %s claimed job %s: %s; %d input file(s), %d chunk(s), up to %d bytes to stream",
            config.planner.holder,
            plan.job_id,
            ",".join(f"{w.topic_name}-{w.partition}" for w in plan.partitions),
            len(plan.files),
            sum(len(f.chunks) for f in plan.files),
            planned_stream_bytes(plan),
        )
        progress.job_started(plan)
        metrics.job_started()
        try:
            done = await run_leased_job(md, store, plan, config, progress)
        except Exception as exc:  # boundary: one job's failure must not stop the pass
            summary.jobs_failed += 1
            metrics.job_failed()
            log.warning(
                "compaction: holder %s job %s failed: %s",
                config.planner.holder,
                plan.job_id,
                exc,
                exc_info=True,
            )
            progress.job_done(plan, None)
            continue
        summary.add_job(plan, done.result.stats, done.bytes_read)
        metrics.job_finished(done.result.stats)
        progress.job_done(plan, done.result.stats)
        _log_job_done(config.planner.holder, plan, done.result)


async def run_pass(
    md: CompactorClient,
    store: ObjectStore,
    config: RunnerConfig | None = None,
    progress: Progress | None = None,
) -> PassSummary:
    """Retention, then compaction until nothing is left, then GC and offset expiry."""
    config = config or RunnerConfig()
    progress = progress or NoProgress()
    started = time.monotonic()
    summary = PassSummary()
    if config.retention:
        progress.stage("retention")
        topics = [config.topic] if config.topic else None
        r = await retention.enforce_all(md, topics)
        summary.retention_chunks_deleted += r.chunks_deleted
        summary.retention_bytes_deleted += r.bytes_deleted
        metrics.retention_done(r.chunks_deleted, r.bytes_deleted)
    progress.stage("compaction")
    await _compact(md, store, config, progress, summary)
    if not summary.jobs_failed:  # the age operators watch (metadata's /metrics, task "compaction")
        await md.record_success("compaction")
        metrics.compaction_succeeded()
    if config.tables is not None:
        progress.stage("tables")
        from skiff.compactor.tables import materialize_all  # pyiceberg only when tables are on

        tables = await materialize_all(md, store, config.tables)
        summary.table_records += tables.records
        summary.tables_failed += tables.failed
    if config.gc:
        progress.stage("garbage collection")
        collector = GarbageCollector(
            md, store, grace_ms=config.gc_grace_ms, orphan_grace_ms=config.orphan_grace_ms
        )
        summary.gc_files_deleted += await collector.collect_once()
        summary.orphans_deleted += await collector.collect_orphans()
        metrics.gc_done(summary.gc_files_deleted, summary.orphans_deleted)
    if config.expire_offsets:
        progress.stage("offset expiry")
        summary.offsets_expired += await retention.expire_offsets(md, config.offsets_retention_minutes)
    summary.elapsed_s = time.monotonic() - started
    _log_pass(config.planner.holder, summary)
    return summary


# A job's summary line names at most this many output files (a job rolls an output every
# `roll_bytes`, 256 MiB by default: a few per job in practice; the count is always given).
MAX_LOGGED_OUTPUTS = 10


def _log_job_done(holder: str, plan: JobPlan, result: JobResult) -> None:
    """One INFO line per finished job (its claim is the other one): what it read, wrote and
    removed, and its output files (the agent role's e2e test matches them with metadata)."""
    stats = result.stats
    keys = result.output_keys
    shown = ",".join(keys[:MAX_LOGGED_OUTPUTS]) + (
        f",+{len(keys) - MAX_LOGGED_OUTPUTS}" if len(keys) > MAX_LOGGED_OUTPUTS else ""
    )
    log.info(
        "compaction: holder %s job %s done: %d partition(s), %d file(s) in (%d bytes), %d out (%d bytes), "
        "%d record(s) in, %d out, %d removed; outputs: %s",
        holder,
        plan.job_id,
        len(plan.partitions),
        stats.files_in,
        stats.bytes_in,
        stats.files_out,
        stats.bytes_out,
        stats.records_in,
        stats.records_out,
        stats.records_in - stats.records_out,
        shown or "-",
    )


def _log_pass(holder: str, s: PassSummary) -> None:
    """GC's one summary line when it deleted something, and the pass's own line: INFO when
    the pass changed anything, DEBUG when it found nothing to do (an idle cluster's passes,
    every `interval_ms`, would otherwise log a line each)."""
    if s.gc_files_deleted or s.orphans_deleted:
        log.info(
            "gc: holder %s deleted %d file(s) past their grace and %d orphan object(s)",
            holder,
            s.gc_files_deleted,
            s.orphans_deleted,
        )
    worked = s.jobs or s.jobs_failed or s.retention_chunks_deleted or s.gc_files_deleted
    worked = worked or s.orphans_deleted or s.offsets_expired or s.table_records or s.tables_failed
    log.log(
        logging.INFO if worked else logging.DEBUG,
        "maintenance pass of holder %s: %d job(s), %d failed, %d file(s) in, %d out, %d record(s) removed, "
        "%d chunk(s) past retention, %d file(s) and %d orphan(s) deleted, %d offset(s) expired, %.1f s",
        holder,
        s.jobs,
        s.jobs_failed,
        s.files_in,
        s.files_out,
        s.records_removed,
        s.retention_chunks_deleted,
        s.gc_files_deleted,
        s.orphans_deleted,
        s.offsets_expired,
        s.elapsed_s,
    )
