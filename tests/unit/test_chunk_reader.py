"""The pure chunk reader: offsets from locations, Kafka's fetch selection, planning, and the
record lookups of ListOffsets. Properties over agent-written (relative) and compactor-written
(absolute, with holes) chunks; the model and its builder are in tests/support/chunk_logs."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from skiff.fileformat.chunk_reader import (
    ChunkLocation,
    ChunkReadError,
    FetchSelection,
    PartitionRead,
    coalesce_ranges,
    first_record_at_or_after,
    iter_chunk_batches,
    max_timestamp_record,
    plan_fetch,
    plan_readahead,
    plan_reads,
    select_batches,
    select_fetch,
)
from skiff.fileformat.record_build import build_batch
from skiff.fileformat.record_decode import Record

from tests.support.chunk_logs import Log, build_log, expected_selection, returned_batches

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def chunk_bytes(log: Log) -> dict[tuple[str, int, int], bytes]:
    return {
        loc.range_key: log.files[loc.object_key][loc.byte_position : loc.byte_position + loc.byte_length]
        for loc in log.locations
    }


def pairs(log: Log) -> list[tuple[object, bytes]]:
    data = chunk_bytes(log)
    return [(loc, data[loc.range_key]) for loc in log.locations]


@st.composite
def batch_shapes(draw: st.DrawFn, max_batches: int = 8) -> list[tuple[int, int, tuple[int, ...]]]:
    """(gap before the batch, value size, sorted distinct offset deltas)."""
    n = draw(st.integers(1, max_batches))
    out = []
    for _ in range(n):
        gap = draw(st.sampled_from([0, 0, 1, 5, 100]))
        size = draw(st.sampled_from([1, 10, 200, 3000]))
        deltas = tuple(sorted(draw(st.sets(st.integers(0, 12), min_size=1, max_size=5))))
        out.append((gap, size, deltas))
    return out


@st.composite
def logs(draw: st.DrawFn) -> Log:
    return build_log(
        draw(batch_shapes()),
        draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)),
        absolute=draw(st.booleans()),
        start_offset=draw(st.sampled_from([0, 7, 2**40])),
        files=draw(st.integers(1, 3)),
        filler_bytes=draw(st.sampled_from([0, 100])),
    )


# ------------------------------------------------------------------------------ offsets


@SETTINGS
@given(log=logs())
def test_chunk_batches_carry_absolute_offsets(log: Log) -> None:
    walked = [b for loc, data in pairs(log) for b in iter_chunk_batches(loc, data)]  # type: ignore[arg-type]
    assert [(b.base_offset, b.last_offset, b.size) for b in walked] == [
        (m.base_offset, m.last_offset, m.size) for m in log.batches
    ]


def test_chunk_claiming_fewer_offsets_than_its_batches_is_an_error() -> None:
    log = build_log([(0, 10, (0, 1, 2)), (0, 10, (0, 1))], [2], absolute=False, start_offset=100)
    (loc,) = log.locations
    bad = dataclasses.replace(loc, last_offset=103)
    with pytest.raises(ChunkReadError, match="past the chunk's last offset") as info:
        list(iter_chunk_batches(bad, chunk_bytes(log)[loc.range_key]))
    # the error names the object and the position of the offending (second) batch
    assert info.value.object_key == loc.object_key
    assert info.value.position == loc.byte_position + log.batches[0].size


def test_absolute_offsets_going_backwards_are_an_error() -> None:
    data = build_batch([Record(0, 1, None, b"a", ())], base_offset=10) + build_batch(
        [Record(0, 1, None, b"b", ())], base_offset=5
    )
    log = build_log([(0, 1, (0,))], [1], absolute=True, start_offset=5)
    loc = dataclasses.replace(log.locations[0], byte_position=0, byte_length=len(data), last_offset=10)
    with pytest.raises(ChunkReadError, match="below"):
        list(iter_chunk_batches(loc, data))


def test_short_chunk_bytes_are_an_error() -> None:
    log = build_log([(0, 10, (0,))], [1], absolute=False)
    (loc,) = log.locations
    with pytest.raises(ChunkReadError, match="bytes"):
        list(iter_chunk_batches(loc, chunk_bytes(log)[loc.range_key][:-1]))


def test_garbage_names_object_and_position() -> None:
    log = build_log([(0, 10, (0,))], [1], absolute=False)
    (loc,) = log.locations
    data = bytearray(chunk_bytes(log)[loc.range_key])
    data[16] = 9  # magic byte of the first batch
    with pytest.raises(ChunkReadError) as info:
        list(iter_chunk_batches(loc, bytes(data)))
    assert info.value.position == loc.byte_position
    # with CRC checking, a flipped bit in a record is caught too
    data = bytearray(chunk_bytes(log)[loc.range_key])
    data[-1] ^= 0x01
    list(iter_chunk_batches(loc, bytes(data)))  # headers alone do not see it
    with pytest.raises(ChunkReadError, match="CRC"):
        list(iter_chunk_batches(loc, bytes(data), verify_crc=True))


# ------------------------------------------------------------------------------ selection


@SETTINGS
@given(
    log=logs(),
    offset_pick=st.floats(0, 1.2),
    max_bytes=st.sampled_from([0, 1, 100, 500, 3000, 10_000, 1 << 20]),
    unbounded=st.booleans(),
)
def test_selection_follows_kafka_rules(log: Log, offset_pick: float, max_bytes: int, unbounded: bool) -> None:
    first = log.batches[0].base_offset
    end = log.batches[-1].last_offset + 1
    fetch_offset = first + int((end - first) * offset_pick)
    result = select_batches(pairs(log), fetch_offset, max_bytes, first_batch_unbounded=unbounded)  # type: ignore[arg-type]
    got = returned_batches(result.records)
    want = expected_selection(log, fetch_offset, max_bytes, unbounded)
    # whole batches, in order, with absolute base offsets and their records' offsets
    assert got == [(m.base_offset, m.size, m.offsets) for m in want]
    assert result.batch_count == len(want)
    assert result.next_offset == (want[-1].last_offset + 1 if want else fetch_offset)
    # the budget holds, except for one first batch (KIP-74)
    assert len(result.records) <= max_bytes or (unbounded and len(want) == 1)
    # nothing wholly below the fetch offset; the batch holding it comes whole
    assert all(m.last_offset >= fetch_offset for m in want)
    remaining = [m for m in log.batches if m.last_offset >= fetch_offset]
    if unbounded and remaining:
        assert want and want[0] == remaining[0]
    # maximal: the next batch would not have fitted
    if len(want) < len(remaining) and want:
        assert len(result.records) + remaining[len(want)].size > max_bytes or len(result.records) >= max_bytes


def test_agent_chunk_offsets_rewritten_from_chunk_base() -> None:
    log = build_log(
        [(0, 10, (0, 1, 2)), (0, 10, (0, 1)), (0, 10, (0, 1, 2, 3))], [3], absolute=False, start_offset=100
    )
    result = select_batches(pairs(log), 104, 1 << 20)  # type: ignore[arg-type]
    # offset 104 is in the second batch (103..104): it comes whole, the first is skipped
    assert [o for _, _, offs in returned_batches(result.records) for o in offs] == list(range(103, 109))
    assert result.next_offset == 109 and result.batch_count == 2


def test_holes_fetch_offset_in_a_hole_starts_at_next_batch() -> None:
    log = build_log(
        [(0, 10, (0, 1)), (50, 10, (0, 3)), (0, 10, (2,))], [1, 2], absolute=True, start_offset=10
    )
    # batches: 10..11, 62..65 (offsets 62, 65), 66..68 (offset 68)
    result = select_batches(pairs(log), 30, 1 << 20)  # type: ignore[arg-type]
    assert [offs for _, _, offs in returned_batches(result.records)] == [(62, 65), (68,)]
    assert result.next_offset == 69


def fetch_model(
    logs_: list[Log], offsets: list[int], pmax: list[int], max_bytes: int
) -> list[FetchSelection | Exception]:
    out: list[FetchSelection | Exception] = []
    total = 0
    for log, offset, limit in zip(logs_, offsets, pmax, strict=True):
        lim = min(limit, max_bytes - total)
        if lim <= 0 and total > 0:
            out.append(FetchSelection(b"", offset, 0))
            continue
        sel = select_batches(pairs(log), offset, max(lim, 0), first_batch_unbounded=total == 0)  # type: ignore[arg-type]
        total += len(sel.records)
        out.append(sel)
    return out


@SETTINGS
@given(
    shapes=st.lists(batch_shapes(max_batches=6), min_size=1, max_size=4),
    absolute=st.booleans(),
    chunking=st.lists(st.integers(1, 3), min_size=1, max_size=3),
    pmax=st.lists(st.sampled_from([1, 300, 3000, 1 << 20]), min_size=4, max_size=4),
    max_bytes=st.sampled_from([1, 500, 4000, 20_000, 1 << 20]),
    picks=st.lists(st.floats(0, 1), min_size=4, max_size=4),
)
def test_fetch_shares_the_budget_and_planning_converges(
    shapes: list, absolute: bool, chunking: list[int], pmax: list[int], max_bytes: int, picks: list[float]
) -> None:
    partitions = [
        build_log(s, chunking, absolute=absolute, files=2, key_prefix=f"p{i}") for i, s in enumerate(shapes)
    ]
    offsets = [
        log.batches[0].base_offset + int((log.batches[-1].last_offset - log.batches[0].base_offset) * pick)
        for log, pick in zip(partitions, picks, strict=False)
    ]
    reads = [
        PartitionRead(log.locations, off, pm) for log, off, pm in zip(partitions, offsets, pmax, strict=False)
    ]
    everything = {k: v for log in partitions for k, v in chunk_bytes(log).items()}
    want = fetch_model(partitions, offsets, pmax[: len(partitions)], max_bytes)
    complete = select_fetch(reads, max_bytes, everything)
    assert complete.missing == [] and complete.results == want
    # A driver loads what plan_fetch names, then what select_fetch reports missing:
    # it converges to the same answer and loads nothing outside the partitions' chunks.
    loaded: dict = {}
    rounds = 0
    need = plan_fetch(reads, max_bytes)
    while True:
        rounds += 1
        assert need, "select_fetch asked for nothing but was not complete"
        loaded.update({loc.range_key: everything[loc.range_key] for loc in need})
        outcome = select_fetch(reads, max_bytes, loaded)
        if not outcome.missing:
            break
        need = outcome.missing
        assert rounds < 50
    assert outcome.results == want
    # one partition alone never needs a second round: the plan is a superset
    for read in reads:
        single = plan_fetch([read], read.max_bytes)
        part = {loc.range_key: everything[loc.range_key] for loc in single}
        assert select_fetch([read], read.max_bytes, part).missing == []


@SETTINGS
@given(
    shapes=st.lists(batch_shapes(max_batches=6), min_size=1, max_size=4),
    absolute=st.booleans(),
    chunking=st.lists(st.integers(1, 3), min_size=1, max_size=3),
    files=st.integers(1, 3),
    pmax=st.lists(st.sampled_from([1, 300, 3000, 1 << 20]), min_size=4, max_size=4),
    max_bytes=st.sampled_from([1, 500, 4000, 20_000, 1 << 20]),
    picks=st.lists(st.floats(0, 1), min_size=4, max_size=4),
)
def test_object_plan_serves_a_valid_kafka_answer(
    shapes: list,
    absolute: bool,
    chunking: list[int],
    files: int,
    pmax: list[int],
    max_bytes: int,
    picks: list[float],
) -> None:
    """`plan_reads` may serve a partition less than the request-order rule would (that
    is its point), but what it serves is always a valid fetch answer: per partition a
    prefix of its own answer, the shared budget kept apart from one first batch (KIP-74),
    progress (a batch) whenever a partition has data, nothing loaded outside the plan;
    and for one partition it is exactly `plan_fetch`."""
    partitions = [
        build_log(s, chunking, absolute=absolute, files=files, key_prefix=f"p{i}")
        for i, s in enumerate(shapes)
    ]
    offsets = [
        log.batches[0].base_offset + int((log.batches[-1].last_offset - log.batches[0].base_offset) * pick)
        for log, pick in zip(partitions, picks, strict=False)
    ]
    reads = [
        PartitionRead(log.locations, off, pm) for log, off, pm in zip(partitions, offsets, pmax, strict=False)
    ]
    everything = {k: v for log in partitions for k, v in chunk_bytes(log).items()}
    planned = plan_reads(reads, max_bytes)
    for read, plan in zip(reads, planned, strict=True):
        needed = [loc for loc in read.locations if loc.last_offset >= read.fetch_offset]
        assert list(plan.locations) == needed[: len(plan.locations)]
        assert (plan.fetch_offset, plan.max_bytes) == (read.fetch_offset, read.max_bytes)
    loaded = {loc.range_key: everything[loc.range_key] for plan in planned for loc in plan.locations}
    outcome = select_fetch(planned, max_bytes, loaded)
    assert outcome.missing == []
    served = [r for r in outcome.results if isinstance(r, FetchSelection)]
    assert len(served) == len(reads)
    total = sum(len(r.records) for r in served)
    first = next((i for i, r in enumerate(served) if r.batch_count), None)
    assert total <= max_bytes or (
        first is not None and served[first].batch_count == 1 and total == len(served[first].records)
    )
    for log, read, result in zip(partitions, reads, served, strict=True):
        alone = expected_selection(log, read.fetch_offset, read.max_bytes)
        got = returned_batches(result.records)
        assert [b[0] for b in got] == [b.base_offset for b in alone[: len(got)]]
    if any(log.batches[-1].last_offset >= offsets[i] for i, log in enumerate(partitions)):
        assert first is not None  # progress: some partition gets at least one batch (KIP-74)
    for read in reads:
        assert list(plan_reads([read], read.max_bytes)[0].locations) == plan_fetch([read], read.max_bytes)


def _keyed_layout(objects: int, partitions: int, chunk_bytes_: int) -> list[list[ChunkLocation]]:
    """Per partition, its chunk locations when every object holds one chunk of every
    partition (keyed produce): object k, partition p at byte p * chunk_bytes_."""
    return [
        [
            ChunkLocation(
                chunk_id=k * partitions + p,
                object_key=f"file-{k:03d}",
                byte_position=p * chunk_bytes_,
                byte_length=chunk_bytes_,
                base_offset=10 * k,
                last_offset=10 * k + 9,
                record_count=10,
                max_timestamp=k,
            )
            for k in range(objects)
        ]
        for p in range(partitions)
    ]


def test_object_plan_reads_few_whole_files_of_a_keyed_layout() -> None:
    """40 files each holding a 1 KiB chunk of each of 100 partitions; a fetch of all of them
    with room for 4.5 files reads 5 files (4 whole and the one the budget ends in), not all
    40 as serving partitions in request order does."""
    layout = _keyed_layout(objects=40, partitions=100, chunk_bytes_=1024)
    reads = [PartitionRead(locs, 0, 1 << 20) for locs in layout]
    budget = 100 * 1024 * 9 // 2
    planned = plan_reads(reads, budget)
    objects = {loc.object_key for plan in planned for loc in plan.locations}
    assert objects == {f"file-{k:03d}" for k in range(5)}
    assert {loc.object_key for loc in plan_fetch(reads, budget)} == {f"file-{k:03d}" for k in range(40)}
    # files 0-3 are served to every partition, file 4 to the first half (by estimate; the
    # rest of file 4 is the read-ahead's job)
    assert [len(plan.locations) for plan in planned] == [5] * 51 + [4] * 49
    # partitions at different positions: each object taken serves every partition there
    reads = [PartitionRead(locs, 10 * (p % 3), 1 << 20) for p, locs in enumerate(layout)]
    planned = plan_reads(reads, budget)
    assert len({loc.object_key for plan in planned for loc in plan.locations}) <= 8


def test_failed_chunk_fails_only_its_partition() -> None:
    a = build_log([(0, 10, (0,))], [1], absolute=False, key_prefix="a")
    b = build_log([(0, 10, (0,))], [1], absolute=False, key_prefix="b")
    reads = [PartitionRead(a.locations, 0, 1 << 20), PartitionRead(b.locations, 0, 1 << 20)]
    boom = OSError("bucket unreachable")
    outcome = select_fetch(reads, 1 << 20, chunk_bytes(b), {a.locations[0].range_key: boom})
    assert outcome.results[0] is boom
    assert isinstance(outcome.results[1], FetchSelection) and outcome.results[1].batch_count == 1


# ------------------------------------------------------------------------------ ranges


@SETTINGS
@given(
    ranges=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 500)), min_size=0, max_size=20),
    gap=st.sampled_from([0, 10, 1000]),
)
def test_coalesce_ranges_covers_each_range_once(ranges: list[tuple[int, int]], gap: int) -> None:
    spans = coalesce_ranges(ranges, gap)
    members = sorted(i for s in spans for i in s.members)
    assert members == list(range(len(ranges)))
    for span in spans:
        for i in span.members:
            start, length = ranges[i]
            assert span.start <= start and start + length <= span.end
        assert span.start == min(ranges[i][0] for i in span.members)
        assert span.end == max(ranges[i][0] + ranges[i][1] for i in span.members)
    for left, right in zip(spans, spans[1:], strict=False):
        assert right.start > left.end + gap  # else they would be one read


def test_readahead_takes_neighbours_of_needed_chunks_within_budget() -> None:
    # two partitions, chunks interleaved in two files; the budget covers only the first
    p0 = build_log([(0, 100, (0,))] * 4, [1], absolute=False, files=2, key_prefix="f")
    p1 = build_log([(0, 100, (0,))] * 4, [1], absolute=False, files=2, key_prefix="g")
    reads = [PartitionRead(p0.locations, 0, 1 << 20), PartitionRead(p1.locations, 0, 1 << 20)]
    need = plan_fetch(reads[:1], 1 << 20)
    assert need == p0.locations
    # p1's chunks live in other objects: no read-ahead (it would cost GETs of its own)
    assert plan_readahead(reads, need, gap_bytes=1 << 20, max_bytes=1 << 30) == []
    # same objects: read-ahead picks them up, within its byte budget
    q1 = build_log([(0, 100, (0,))] * 4, [1], absolute=False, files=2, key_prefix="f")
    q1_locs = [dataclasses.replace(loc, byte_position=loc.byte_position + 10_000) for loc in q1.locations]
    reads = [PartitionRead(p0.locations, 0, 1 << 20), PartitionRead(q1_locs, 0, 1 << 20)]
    extra = plan_readahead(reads, need, gap_bytes=1 << 20, max_bytes=1 << 30)
    assert sorted(e.range_key for e in extra) == sorted(loc.range_key for loc in q1_locs)
    assert plan_readahead(reads, need, gap_bytes=100, max_bytes=1 << 30) == []  # too far apart
    one = q1_locs[0].byte_length
    assert len(plan_readahead(reads, need, gap_bytes=1 << 20, max_bytes=one)) == 1
    cached = {q1_locs[0].range_key}
    extra = plan_readahead(reads, need, gap_bytes=1 << 20, max_bytes=1 << 30, is_cached=lambda k: k in cached)
    assert q1_locs[0] not in extra and len(extra) == 3


# ------------------------------------------------------------------------------ ListOffsets


@SETTINGS
@given(
    shapes=batch_shapes(),
    absolute=st.booleans(),
    data=st.data(),
)
def test_record_lookups_match_a_scan(shapes: list, absolute: bool, data: st.DataObject) -> None:
    n_records = sum(len(d) for _, _, d in shapes)
    timestamps = data.draw(st.lists(st.integers(0, 50), min_size=n_records, max_size=n_records))
    log = build_log(shapes, [len(shapes)], absolute=absolute, timestamps=timestamps, start_offset=1000)
    ((loc, blob),) = pairs(log)
    records = [(o, t) for b in log.batches for o, t in zip(b.offsets, b.timestamps, strict=True)]
    target = data.draw(st.integers(-1, 52))
    min_offset = data.draw(st.sampled_from([0, records[len(records) // 2][0]]))
    live = [(o, t) for o, t in records if o >= min_offset]
    first = next(((o, t) for o, t in live if t >= target), None)
    assert first_record_at_or_after(loc, blob, target, min_offset=min_offset) == first  # type: ignore[arg-type]
    best = None
    for o, t in live:
        if best is None or t > best[1]:
            best = (o, t)
    assert max_timestamp_record(loc, blob, min_offset=min_offset) == best  # type: ignore[arg-type]


def test_max_timestamp_is_the_record_not_the_batch_end() -> None:
    # one batch, timestamps 100, 400, 200: MAX_TIMESTAMP answers the second record
    log = build_log([(0, 10, (0, 1, 2))], [1], absolute=False, start_offset=50, timestamps=[100, 400, 200])
    ((loc, blob),) = pairs(log)
    assert max_timestamp_record(loc, blob) == (51, 400)  # type: ignore[arg-type]
    assert first_record_at_or_after(loc, blob, 150) == (51, 400)  # type: ignore[arg-type]
    assert first_record_at_or_after(loc, blob, 401) is None  # type: ignore[arg-type]


def test_verify_crc_refuses_a_flipped_bit_in_a_served_batch() -> None:
    log = build_log([(0, 10, (0, 1)), (0, 10, (0,))], [2], absolute=False, start_offset=5)
    ((loc, blob),) = pairs(log)
    data = bytearray(blob)
    data[log.batches[0].size - 1] ^= 0x80  # last byte of the first batch
    # without the check the corrupt batch would be served as if nothing happened
    assert select_batches([(loc, bytes(data))], 5, 1 << 20).batch_count == 2  # type: ignore[list-item]
    with pytest.raises(ChunkReadError, match="CRC-32C") as info:
        select_batches([(loc, bytes(data))], 5, 1 << 20, verify_crc=True)  # type: ignore[list-item]
    assert (info.value.object_key, info.value.position) == (loc.object_key, loc.byte_position)
    # a batch not served (below the fetch offset) is not the fetch's concern
    assert select_batches([(loc, bytes(data))], 7, 1 << 20, verify_crc=True).batch_count == 1  # type: ignore[list-item]
    outcome = select_fetch(
        [PartitionRead([loc], 5, 1 << 20)], 1 << 20, {loc.range_key: bytes(data)}, verify_crc=True
    )
    assert isinstance(outcome.results[0], ChunkReadError)
