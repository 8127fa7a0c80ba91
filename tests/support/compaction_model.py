"""The harness the component-level compaction model tests share
(tests/component/test_compaction_model.py, test_compaction_txn_model.py, test_txn_cleanup.py).

- `Clock`: an injected clock in milliseconds, starting at `T0`, moved by the test.
- `service`: a module-scoped fixture, parametrized over SQLite and PostgreSQL (one database
  per backend for all of a module's examples: migrations are slow), giving the real
  `MetadataService` on that clock. Import it into a test module to use it.
- `model_settings`: the Hypothesis settings of the model tests.
- `compacted_config()`: the topic config of a compacted topic the models clean
  (`delete.retention.ms` `DRT_MS`, `min.compaction.lag.ms` `LAG_MS`, any dirty ratio).
- `put_segment`: builds one agent segment file from chunk inputs and puts it in the bucket.
- `read_chunk`: every batch of one stored chunk with its records, checking that the chunk's
  offset bitmap names exactly the records present.
- The steps both models draw besides their own `Produce`: `Compact` and `Tick`;
  `run_steps` applies a drawn sequence and checks the world after each step.
- `keymap_budget_bytes_st`, `roll_bytes_st`: what both models draw besides their steps.
- `assert_checkpoints`: the cleaner checkpoints in metadata are the model's.
- `runner_config`, `compact_until_settled`: the compactor as `skiff compact` runs it (claim,
  run, swap), each plan shown to the model first, until the planner offers nothing.
- `clean_until`: the models' end, dirty writes and cleans past every horizon and the lag
  until the model says the log is fully cleaned.
- `run_in_bucket`: runs an example and drops its memory:// bucket after it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from skiff.compactor.keymap import SLOT_BYTES
from skiff.compactor.plan import JobPlan
from skiff.compactor.planner import PlannerConfig, claim_jobs
from skiff.compactor.runner import LeasedJob, RunnerConfig, run_leased_job
from skiff.fileformat.chunk_reader import ChunkBatch, ChunkLocation, iter_chunk_batches
from skiff.fileformat.objectstore.memory import MemoryStore, drop_memory_bucket
from skiff.fileformat.record_decode import Record, decode_records
from skiff.fileformat.segment import ChunkInput, ChunkPlacement, build_segment
from skiff.metadata import bitmaps
from skiff.metadata.compaction.types import MergeRules
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService
from skiff.metadata.types import PartitionKey

T0 = 1_700_000_000_000
DRT_MS = 1_000  # delete.retention.ms
LAG_MS = 300  # min.compaction.lag.ms


def model_settings(max_examples: int) -> settings:
    """Hypothesis settings of the model tests: no deadline, no shrinking (through real
    metadata it takes minutes; a failure prints its example whole), the service fixture
    shared across examples."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


# A small key map fills (Kafka then cleans up to where it stopped and checkpoints there).
keymap_budget_bytes_st = st.sampled_from([SLOT_BYTES * 8, SLOT_BYTES * 4096])
# 1: every input chunk ends an output file (a swap each; a partition's checkpoint must still
# move with the file where the partition ends).
roll_bytes_st = st.sampled_from([1, 1 << 20])


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[MetadataService, Clock]]:
    """One database per backend for all examples (migrations are slow); each example its
    own topics. PostgreSQL claims leases with FOR UPDATE SKIP LOCKED, SQLite without."""
    clock = Clock()
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('model') / 'm.db'}"
    else:
        url = str(request.getfixturevalue("pg_module_url"))
    svc = MetadataService.from_url(url, clock=clock)
    yield svc, clock
    svc.close()


def compacted_config() -> dict[str, str]:
    return {
        "cleanup.policy": "compact",
        "delete.retention.ms": str(DRT_MS),
        "min.compaction.lag.ms": str(LAG_MS),
        "min.cleanable.dirty.ratio": "0.01",
    }


def assert_checkpoints(
    svc: MetadataService,
    parts: Sequence[tuple[uuid.UUID, int]],
    first_dirty: Callable[[tuple[uuid.UUID, int]], int],
) -> None:
    """Each partition's cleaner checkpoint in metadata (none: 0) is the model's first dirty offset."""
    cps = svc.compaction_leases.checkpoints([PartitionKey(t, q) for t, q in parts])
    for k, cp in cps.items():
        assert (cp or 0) == first_dirty((k.topic_id, k.partition))


def put_segment(
    store: MemoryStore, agent: int, chunk_inputs: Sequence[ChunkInput]
) -> tuple[str, bytes, dict[tuple[uuid.UUID, int], ChunkPlacement]]:
    """One agent file under agents/a<agent>/: its key, its bytes and where each partition's
    chunk landed."""
    data, placements = build_segment(chunk_inputs)
    key = f"agents/a{agent}/{uuid.uuid4().hex}.seg"
    store.put(key, data)
    return key, data, {(pl.topic_id, pl.partition): pl for pl in placements}


def read_chunk(
    store: MemoryStore, loc: ChunkLocation
) -> Iterator[tuple[ChunkBatch, list[tuple[int, Record]]]]:
    """Every batch of the chunk at `loc` (CRCs verified) with its records and their absolute
    offsets (empty batches too); the chunk's bitmap must name exactly these records
    (checked once the last batch was read)."""
    data = store.get_range(loc.object_key, loc.byte_position, loc.byte_length)
    present = bitmaps.present_set(loc)
    seen = []
    for cb in iter_chunk_batches(loc, data, verify_crc=True):
        records = [
            (cb.base_offset + r.offset_delta, r) for r in decode_records(data, cb.position, header=cb.header)
        ]
        seen += [off - loc.base_offset for off, _ in records]
        yield cb, records
    assert sorted(present) == seen, "chunk bitmap differs from the records present"


# ------------------------------------------------------------------ steps and runs


@dataclass(frozen=True)
class Compact:
    """A step: every job the planner offers now is claimed and run."""


@dataclass(frozen=True)
class Tick:
    """A step: the clock moves `ms` milliseconds."""

    ms: int


async def run_steps(
    steps: Sequence[object],
    clock: Clock,
    produce: Callable[[Any], None],
    compact: Callable[[], Awaitable[object]],
    check: Callable[[], None],
) -> None:
    """Apply each drawn step (a `Tick`, a `Compact`, else the model's own produce step)
    and check the world after it."""
    for step in steps:
        if isinstance(step, Tick):
            clock.now += step.ms
        elif isinstance(step, Compact):
            await compact()
        else:
            produce(step)
        check()


def runner_config(
    holder: str, clock: Clock, keymap_budget_bytes: int, roll_bytes: int, rules: MergeRules | None = None
) -> RunnerConfig:
    """The planner on the injected clock; `rules` None: the default merge rules."""
    return RunnerConfig(
        planner=PlannerConfig(holder=holder, clock_ms=clock, rules=rules or MergeRules()),
        keymap_budget_bytes=keymap_budget_bytes,
        roll_bytes=roll_bytes,
    )


async def compact_until_settled(
    md: LocalMetadataClient,
    store: MemoryStore,
    topics: Sequence[str],
    config: RunnerConfig,
    before_run: Callable[[JobPlan], None],
) -> list[LeasedJob]:
    """Claim (one job per topic a round) and run every job the planner offers for `topics`
    until it offers none; `before_run` sees each plan before its job runs (the model cleans
    there, as the plan says). Answers the jobs run; fails if it does not settle in 50 rounds."""
    done: list[LeasedJob] = []
    for _ in range(50):
        plans: list[JobPlan] = []
        for topic in topics:
            plans += await claim_jobs(md, topic=topic, config=config.planner, max_jobs=1)
        if not plans:
            return done
        for plan in plans:
            before_run(plan)
            done.append(await run_leased_job(md, store, plan, config))
    pytest.fail("compaction did not settle in 50 rounds")


async def clean_until(
    cleaned: Callable[[], bool],
    clock: Clock,
    dirty_write: Callable[[], None],
    compact: Callable[[], Awaitable[object]],
    check: Callable[[], None],
    failure: str,
) -> None:
    """Until `cleaned()`: the clock past every delete horizon, a dirty write, the clock past
    the compaction lag (so the write is cleanable), a compaction, a check; at most 20
    rounds (a tombstone's or marker's horizon is set by one clean and it goes at a later
    one; a small key map takes several cleans), then fail with `failure`."""
    for _ in range(20):
        if cleaned():
            return
        clock.now += DRT_MS + 1
        dirty_write()
        clock.now += LAG_MS + 1
        await compact()
        check()
    pytest.fail(failure)


def run_in_bucket(store: MemoryStore, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run `main()` to its end, then drop `store`'s memory:// bucket (examples leave none behind)."""
    try:
        asyncio.run(main())
    finally:
        drop_memory_bucket(store.name)
