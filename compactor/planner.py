"""The planner: metadata's compaction candidates turned into leased `JobPlan`s.

1. Ask metadata which partitions need work now (`compaction_candidates`): compacted
   partitions chosen by Kafka's cleaner rules (cleaner checkpoint, dirty ratio against
   `min.cleanable.dirty.ratio`, `min.compaction.lag.ms`, `max.compaction.lag.ms`), each
   with its whole log up to the cleanable end (the clean prefix too: newer keys shadow
   older records there); delete-policy partitions whose level-0 chunks are due for a
   merge, with the run of chunks the merge takes (`metadata.compaction.types.MergeRules`).
   Partitions leased by another job are not offered.
2. Group them into jobs by the files they share: a job reads each of its input files
   whole, twice, as streams from byte 0, so every partition with chunks in a file
   belongs in the job that reads the file (union-find over partitions and files). A
   group whose files exceed `max_job_input_bytes` is cut, most urgent partitions first;
   a file shared across the cut is then read by both jobs (each consuming its own
   chunks of it), the price of bounding a job's input.
3. Claim each job's partitions in metadata (all or none, with the input chunk ids, so a
   plan made from rows that changed since is refused at once); jobs that lose the race
   to another compactor are skipped. The claimed job's lease token travels in the plan
   and is checked by the swap.

`plan_jobs` does 1 and 2 (what `skiff compact --dry-run` prints with `describe_plan`);
`claim_jobs` does all three.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from skiff.compactor.plan import InputChunk, InputFile, JobPlan, PartitionWork
from skiff.metadata.compaction.types import CompactionCandidate, MergeRules
from skiff.metadata.types import PartitionKey
from skiff.metadata.wire.operations import CompactorClient

GiB = 1024 * 1024 * 1024
DEFAULT_MAX_JOB_INPUT_BYTES = 4 * GiB
DEFAULT_LEASE_MS = 5 * 60 * 1000  # the job runner renews well before this passes


def system_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class PlannerConfig:
    holder: str = "compactor"  # who holds the leases, for operators
    max_job_input_bytes: int = DEFAULT_MAX_JOB_INPUT_BYTES
    lease_ms: int = DEFAULT_LEASE_MS
    max_candidates: int = 1000
    rules: MergeRules = field(default_factory=MergeRules)
    clock_ms: Callable[[], int] = system_clock_ms  # the planner's clock (delete horizons)


def group_candidates(
    candidates: Sequence[CompactionCandidate], max_job_input_bytes: int
) -> list[list[CompactionCandidate]]:
    """Partitions that share input files go to one job; jobs in the order of their most
    urgent partition; a group over `max_job_input_bytes` (the sum of its distinct input
    file sizes) is cut greedily, urgency order kept; one partition alone may exceed it."""
    groups = _sharing_groups(candidates)
    jobs: list[list[CompactionCandidate]] = []
    for root in sorted(groups):
        jobs.extend(_cut_by_size(groups[root], max_job_input_bytes))
    return jobs


def _sharing_groups(candidates: Sequence[CompactionCandidate]) -> dict[int, list[CompactionCandidate]]:
    """Union-find over shared input files: candidates keyed by their group's lowest index
    (so sorted keys give the order of each group's most urgent candidate), order kept."""
    parent = list(range(len(candidates)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    for i, c in enumerate(candidates):
        for ch in c.chunks:
            j = owner.setdefault(ch.location.object_key, i)
            ri, rj = find(i), find(j)
            if ri != rj:
                parent[max(ri, rj)] = min(ri, rj)
    groups: dict[int, list[CompactionCandidate]] = {}
    for i, c in enumerate(candidates):
        groups.setdefault(find(i), []).append(c)
    return groups


def _cut_by_size(
    group: list[CompactionCandidate], max_job_input_bytes: int
) -> list[list[CompactionCandidate]]:
    """One group cut greedily into jobs of at most `max_job_input_bytes` distinct input file
    bytes, order kept; a job always takes at least one candidate."""
    jobs: list[list[CompactionCandidate]] = []
    job: list[CompactionCandidate] = []
    sizes: dict[str, int] = {}
    for c in group:
        mine = {ch.location.object_key: ch.file_size_bytes for ch in c.chunks}
        new_bytes = sum(n for k, n in mine.items() if k not in sizes)
        if job and sum(sizes.values()) + new_bytes > max_job_input_bytes:
            jobs.append(job)
            job, sizes = [], {}
        job.append(c)
        sizes.update(mine)
    if job:
        jobs.append(job)
    return jobs


def _sort_key(topic_id: uuid.UUID, partition: int) -> tuple[bytes, int]:
    return (topic_id.bytes, partition)


def build_plan(
    job_id: str, candidates: Sequence[CompactionCandidate], now_ms: int, lease_token: str | None = None
) -> JobPlan:
    """One job: its input files (each with the consumed chunk rows in byte order) and its
    partitions with their rules, sorted by (topic id bytes, partition) as files are."""
    by_file: dict[str, list[InputChunk]] = {}
    size: dict[str, int] = {}
    for c in candidates:
        for ch in c.chunks:
            key = ch.location.object_key
            by_file.setdefault(key, []).append(InputChunk(c.topic_id, c.partition, ch.location))
            size[key] = ch.file_size_bytes
    files = tuple(
        InputFile(key, size[key], tuple(sorted(chs, key=lambda x: x.location.byte_position)))
        for key, chs in sorted(by_file.items())
    )
    parts = tuple(
        sorted(
            (
                PartitionWork(
                    topic_id=c.topic_id,
                    partition=c.partition,
                    topic_name=c.topic_name,
                    compact=c.compact,
                    delete=c.delete,
                    first_dirty_offset=c.first_dirty_offset,
                    cleanable_end_offset=c.cleanable_end_offset,
                    delete_retention_ms=c.delete_retention_ms,
                    aborted=c.aborted,
                )
                for c in candidates
            ),
            key=lambda w: _sort_key(w.topic_id, w.partition),
        )
    )
    return JobPlan(job_id=job_id, files=files, partitions=parts, now_ms=now_ms, lease_token=lease_token)


async def _candidate_groups(
    md: CompactorClient, topic: str | None, config: PlannerConfig
) -> list[list[CompactionCandidate]]:
    found = await md.compaction_candidates(topic, config.rules, config.max_candidates)
    return group_candidates(found, config.max_job_input_bytes)


async def plan_jobs(
    md: CompactorClient, *, topic: str | None = None, config: PlannerConfig | None = None
) -> list[JobPlan]:
    """The jobs that would run now, unclaimed (what --dry-run prints)."""
    config = config or PlannerConfig()
    now = config.clock_ms()
    return [build_plan(_job_id(), g, now) for g in await _candidate_groups(md, topic, config)]


async def claim_jobs(
    md: CompactorClient, *, topic: str | None = None, config: PlannerConfig | None = None, max_jobs: int = 1
) -> list[JobPlan]:
    """Plan and claim up to `max_jobs` jobs; each returned plan carries its lease token.
    Jobs another compactor claimed first are skipped. The caller releases (or the swap
    consumes and then releases) each lease."""
    config = config or PlannerConfig()
    out: list[JobPlan] = []
    for group in await _candidate_groups(md, topic, config):
        if len(out) >= max_jobs:
            break
        keys = [PartitionKey(c.topic_id, c.partition) for c in group]
        ids = [ch.location.chunk_id for c in group for ch in c.chunks]
        lease = await md.claim_compaction_job(keys, config.holder, config.lease_ms, ids)
        if lease is None:
            continue
        out.append(build_plan(_job_id(), group, config.clock_ms(), lease.token))
    return out


def _job_id() -> str:
    return uuid.uuid4().hex[:16]


def describe_plan(plan: JobPlan) -> str:
    """A readable summary of one job (for `skiff compact --dry-run` and logs)."""
    total = sum(f.size_bytes for f in plan.files)
    consumed = sum(ch.location.byte_length for f in plan.files for ch in f.chunks)
    lines = [
        f"job {plan.job_id}: {len(plan.files)} input file(s), {_size(total)} to read, "
        f"{_size(consumed)} consumed, {len(plan.partitions)} partition(s)"
        + (f", lease {plan.lease_token}" if plan.lease_token else "")
    ]
    for w in plan.partitions:
        kind = "clean" if w.compact else "merge"
        n = sum(
            1
            for f in plan.files
            for ch in f.chunks
            if (ch.topic_id, ch.partition) == (w.topic_id, w.partition)
        )
        lines.append(
            f"  {kind} {w.topic_name}-{w.partition}: {n} chunk(s), "
            + (
                f"dirty [{w.first_dirty_offset}, {w.cleanable_end_offset})"
                if w.compact
                else f"offsets [{w.first_dirty_offset}, {w.cleanable_end_offset})"
            )
            + (f", {len(w.aborted)} aborted transaction(s)" if w.aborted else "")
        )
    for f in plan.files:
        lines.append(f"  file {f.object_key} ({_size(f.size_bytes)}): {len(f.chunks)} chunk(s) consumed")
    return "\n".join(lines)


def _size(n_bytes: int) -> str:
    if n_bytes < 1024:
        return f"{n_bytes} B"
    x = float(n_bytes)
    for unit in ("KiB", "MiB", "GiB"):
        x /= 1024
        if x < 1024 or unit == "GiB":
            break
    return f"{x:.1f} {unit}"
