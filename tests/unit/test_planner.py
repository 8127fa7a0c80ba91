"""The planner's grouping of candidates into jobs and the plans it builds."""

from __future__ import annotations

import uuid

from skiff.compactor.planner import build_plan, describe_plan, group_candidates
from skiff.metadata.compaction.types import CandidateChunk, CompactionCandidate
from skiff.metadata.types import ChunkLocation

T1 = uuid.UUID(int=2)
T2 = uuid.UUID(int=1)
_ids = iter(range(1, 10_000))


def cand(
    tid: uuid.UUID, part: int, files: list[tuple[str, int, int]], compact: bool = True
) -> CompactionCandidate:
    """files: (object key, byte position, file size)."""
    chunks = tuple(
        CandidateChunk(
            ChunkLocation(next(_ids), key, pos, 50, i * 10, i * 10 + 9, 10, 0, False, None), size, 0
        )
        for i, (key, pos, size) in enumerate(files)
    )
    return CompactionCandidate(
        tid,
        part,
        f"t{tid.int}",
        compact,
        not compact,
        86_400_000,
        0,
        len(files) * 10,
        0,
        len(files) * 10,
        0,
        50 * len(files),
        1.0,
        False,
        "test",
        chunks,
    )


def keys(job: list[CompactionCandidate]) -> list[tuple[int, int]]:
    return [(c.topic_id.int, c.partition) for c in job]


def test_partitions_sharing_files_go_to_one_job() -> None:
    a = cand(T1, 0, [("f1", 0, 100), ("f2", 0, 100)])
    b = cand(T1, 1, [("f2", 50, 100)])
    c = cand(T2, 0, [("f3", 0, 100)])
    d = cand(T2, 1, [("f3", 50, 100), ("f1", 50, 100)])
    jobs = group_candidates([a, b, c, d], 10**9)
    assert [keys(j) for j in jobs] == [[(2, 0), (2, 1), (1, 0), (1, 1)]]  # all linked via f1
    e = cand(T1, 2, [("f9", 0, 100)])
    jobs = group_candidates([a, b, e], 10**9)
    assert [keys(j) for j in jobs] == [[(2, 0), (2, 1)], [(2, 2)]]
    # each input file is read by exactly one job
    seen: dict[str, int] = {}
    for i, j in enumerate(jobs):
        for c_ in j:
            for ch in c_.chunks:
                assert seen.setdefault(ch.location.object_key, i) == i


def test_groups_are_cut_at_the_input_byte_bound() -> None:
    a = cand(T1, 0, [("f1", 0, 600), ("f2", 0, 600)])
    b = cand(T1, 1, [("f2", 50, 600), ("f3", 0, 600)])
    c = cand(T1, 2, [("f3", 50, 600)])
    jobs = group_candidates([a, b, c], 1800)
    # a (1200) + b adds f3 (600) = 1800 fits; c adds nothing new
    assert [keys(j) for j in jobs] == [[(2, 0), (2, 1), (2, 2)]]
    jobs = group_candidates([a, b, c], 1500)
    assert [keys(j) for j in jobs] == [[(2, 0)], [(2, 1), (2, 2)]]
    # a lone partition larger than the bound still gets a job
    assert [keys(j) for j in group_candidates([a], 10)] == [[(2, 0)]]


def test_build_plan_orders_partitions_and_chunks() -> None:
    a = cand(T1, 0, [("f2", 300, 1000), ("f1", 0, 1000)])
    b = cand(T2, 3, [("f2", 100, 1000)])
    plan = build_plan("j1", [a, b], now_ms=123, lease_token="tok")
    assert [(w.topic_id, w.partition) for w in plan.partitions] == [(T2, 3), (T1, 0)]  # topic id bytes
    assert [f.object_key for f in plan.files] == ["f1", "f2"]
    f2 = plan.files[1]
    assert [c.location.byte_position for c in f2.chunks] == [100, 300]  # byte order
    assert [(c.topic_id, c.partition) for c in f2.chunks] == [(T2, 3), (T1, 0)]
    assert plan.now_ms == 123 and plan.lease_token == "tok" and f2.size_bytes == 1000
    w = plan.partitions[1]
    assert (w.compact, w.first_dirty_offset, w.cleanable_end_offset) == (True, 0, 20)
    text = describe_plan(plan)
    assert "job j1: 2 input file(s)" in text and "clean t2-0: 2 chunk(s)" in text and "file f2" in text
