"""The driver's plan under read_committed carries each aborted transaction's last offset
(its ABORT marker's), whether metadata has few enough aborted transactions past the read
offset to answer them all (the agent cache's span) or too many (only the page's). No
Spark, no bucket: the metadata service over SQLite and PostgreSQL, in-process and over
HTTP (`md`), with the transactions stored as an agent's commits would.

The partition: one transactional producer aborts `ABORTED` transactions in a row (two
data offsets, then the ABORT marker), more than `MAX_CACHEABLE_ABORTED`, then commits
one. Tasks cover the whole log (too many aborted transactions past offset 0), its tail
(few), and the middle, in one page of chunks or in many small pages.
"""

from __future__ import annotations

import pytest
from skiff.metadata.server.local_client import SyncLocalMetadataClient
from skiff.metadata.service import MetadataService
from skiff.metadata.types import MAX_CACHEABLE_ABORTED, BatchSpec, ChunkSpec, FileSpec
from skiff.spark import planner
from skiff.spark.ranges import OffsetRange

ABORTED = MAX_CACHEABLE_ABORTED + 6
BATCH_BYTES = 100


def _batch(count: int, pid: int, seq: int = -1, control: int = -1) -> BatchSpec:
    # data batches name their transactional id (the file commit checks the transaction
    # holds the partition); markers are the coordinator's and name none
    return BatchSpec(
        0,
        BATCH_BYTES,
        count,
        count,
        0,
        pid,
        0,
        seq,
        is_transactional=True,
        control_type=control,
        transactional_id="tx" if control == -1 else None,
    )


def _write_log(service: MetadataService) -> tuple[str, list[tuple[int, int, int]], int]:
    """The topic id, the aborted transactions (pid, first offset, marker offset), and the end."""
    tid = service.create_topic("t", 1, {}).topic_id
    txns = service.transactions
    pid = txns.init_producer_id("tx", 60_000).producer_id
    aborted, offset, seq = [], 0, 0
    for n in range(ABORTED + 1):
        commit = n == ABORTED
        txns.add_partitions("tx", pid, 0, [(str(tid), 0)])
        service.commit_file(FileSpec(f"data-{n}", BATCH_BYTES), [ChunkSpec(tid, 0, (_batch(2, pid, seq),))])
        assert txns.end_txn("tx", pid, 0, commit=commit).write_markers
        service.commit_file(
            FileSpec(f"marker-{n}", BATCH_BYTES, completes=(("tx", pid, 0),)),
            [ChunkSpec(tid, 0, (_batch(1, pid, control=int(commit)),))],
        )
        if not commit:
            aborted.append((pid, offset, offset + 2))
        offset, seq = offset + 3, seq + 2
    return str(tid), aborted, offset


@pytest.mark.parametrize(
    "page_bytes", [planner.FIND_CHUNKS_PAGE_BYTES, 7 * BATCH_BYTES], ids=["one-page", "pages"]
)
def test_tasks_carry_the_last_offsets_of_their_aborted_transactions(
    metadata_service: MetadataService,
    monkeypatch: pytest.MonkeyPatch,
    page_bytes: int,
) -> None:
    monkeypatch.setattr(planner, "FIND_CHUNKS_PAGE_BYTES", page_bytes)
    tid, aborted, end = _write_log(metadata_service)
    tail = end - 3 * (MAX_CACHEABLE_ABORTED // 2)
    tasks = [OffsetRange("t", 0, 0, end), OffsetRange("t", 0, tail, end), OffsetRange("t", 0, 31, 95)]
    md = SyncLocalMetadataClient(metadata_service)
    planned = planner.attach_chunks(md, tasks, {("t", 0): tid}, read_committed=True)  # type: ignore[arg-type]
    for task, plan in zip(tasks, planned, strict=True):
        want = [a for a in aborted if a[2] >= task.from_offset and a[1] < task.until_offset]
        assert list(plan.aborted) == want
    assert len(planned[0].aborted) > MAX_CACHEABLE_ABORTED  # metadata's too-many answer
    assert 0 < len(planned[1].aborted) <= MAX_CACHEABLE_ABORTED  # its cacheable answer
