"""`spark.aborted.AbortedTransactions` against the truth of randomly generated logs, and
the `kafka.isolation.level` option. No Spark, no cluster: milliseconds each.

A log is generated as producers would write it: transactional producers each run one
transaction at a time (data batches, then a COMMIT or ABORT marker), interleaved with
each other and with non-transactional batches (some from idempotent producers, whose
producer ids can equal a transactional one's). A task reads an offset range of it in
chunks; it is given the aborted transactions overlapping the range, as metadata answers
them ((producer id, first offset) of those whose marker is at or after the range start
and whose first offset is below its end, with or without their last offsets, the ABORT
markers' offsets). The mask must drop exactly the data batches of aborted transactions,
nothing else, whatever the chunk boundaries. With the last offsets it must do so also
when random chunks are lost and skipped (failOnDataLoss=false), ABORT markers with them:
the batches read are checked against a per-batch model (a transactional data batch is
aborted iff an aborted transaction of its producer spans its base offset).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import pytest
from skiff.spark.aborted import AbortedTransactions
from skiff.spark.options import SkiffOptionError, parse_options


@dataclass
class Batch:
    producer_id: int
    base_offset: int
    last_offset: int
    control: bool
    transactional: bool
    aborted: bool  # the truth: a data batch of an aborted transaction


def _log(rng: random.Random) -> tuple[list[Batch], list[tuple[int, int, int]]]:
    """Batches in offset order, and every aborted transaction (pid, first, marker offset)."""
    batches: list[Batch] = []
    aborted: list[tuple[int, int, int]] = []
    open_txn: dict[int, tuple[int, bool, int]] = {}  # pid -> (first offset, will abort, batches left)
    offset = 0
    for _ in range(rng.randint(1, 120)):
        pid = rng.choice([1, 2, 3, 7])
        kind = rng.random()
        if kind < 0.2:  # non-transactional (idempotent: may share an id with a transactional one)
            n = rng.randint(1, 4)
            batches.append(Batch(pid, offset, offset + n - 1, False, False, False))
            offset += n
            continue
        if pid not in open_txn:
            open_txn[pid] = (offset, rng.random() < 0.5, rng.randint(1, 4))
        first, abort, left = open_txn[pid]
        if left == 0:
            batches.append(Batch(pid, offset, offset, True, True, False))
            if abort:
                aborted.append((pid, first, offset))
            del open_txn[pid]
            offset += 1
            continue
        n = rng.randint(1, 5)
        batches.append(Batch(pid, offset, offset + n - 1, False, True, abort))
        open_txn[pid] = (first, abort, left - 1)
        offset += n
    for pid, (first, abort, _) in open_txn.items():  # every transaction ends (the range is below the LSO)
        batches.append(Batch(pid, offset, offset, True, True, False))
        if abort:
            aborted.append((pid, first, offset))
        offset += 1
    return batches, aborted


def _arrays(batches: list[Batch]) -> tuple[np.ndarray, ...]:
    return (
        np.array([b.producer_id for b in batches], np.int64),
        np.array([b.base_offset for b in batches], np.int64),
        np.array([b.control for b in batches], bool),
        np.array([b.transactional for b in batches], bool),
    )


def _model(batches: list[Batch], aborted: list[tuple[int, int, int]]) -> list[bool]:
    """Per batch, without ranges closing: is it a data batch an aborted transaction spans?"""
    return [
        b.transactional
        and not b.control
        and any(pid == b.producer_id and first <= b.base_offset <= last for pid, first, last in aborted)
        for b in batches
    ]


def _task(rng: random.Random) -> tuple[list[Batch], list[tuple[int, int, int]]]:
    """A random task: the batches of a random range of a random log, and the aborted
    transactions metadata answers for that range, with their last offsets."""
    batches, aborted = _log(rng)
    end_offset = batches[-1].last_offset + 1
    start = rng.randint(0, end_offset - 1)
    until = rng.randint(start + 1, end_offset)
    in_range = [b for b in batches if b.last_offset >= start and b.base_offset < until]
    given = [(pid, first, marker) for pid, first, marker in aborted if marker >= start and first < until]
    return in_range, given


def _chunks(rng: random.Random, batches: list[Batch]) -> list[list[Batch]]:
    out, cut = [], 0
    while cut < len(batches):  # chunks of random sizes, in order
        out.append(batches[cut : cut + rng.randint(1, 6)])
        cut += len(out[-1])
    return out


@pytest.mark.parametrize("last_offsets_known", [False, True], ids=["pairs", "triples"])
@pytest.mark.parametrize("seed", range(300))
def test_mask_drops_exactly_the_aborted_batches(seed: int, last_offsets_known: bool) -> None:
    rng = random.Random(seed)
    in_range, given = _task(rng)
    tracker = AbortedTransactions(given if last_offsets_known else [(pid, first) for pid, first, _ in given])
    got: list[bool] = []
    for chunk in _chunks(rng, in_range):
        got.extend(tracker.mask(*_arrays(chunk)).tolist())
    assert got == [b.aborted for b in in_range] == _model(in_range, given)


@pytest.mark.parametrize("seed", range(300))
def test_with_last_offsets_lost_chunks_drop_nothing_more(seed: int) -> None:
    """Chunks lost at random (markers with them): the batches read are masked as the model
    says, so a producer's committed batches after a lost ABORT marker are kept."""
    rng = random.Random(seed)
    in_range, given = _task(rng)
    tracker = AbortedTransactions(given)
    read: list[Batch] = []
    got: list[bool] = []
    for chunk in _chunks(rng, in_range):
        if rng.random() < 0.3:
            continue  # gone from the bucket: skipped, never fed
        read.extend(chunk)
        got.extend(tracker.mask(*_arrays(chunk)).tolist())
    assert got == _model(read, given)


def test_a_lost_abort_marker_no_longer_drops_later_committed_batches() -> None:
    """Producer 1 aborts [0, 3) (ABORT marker at 3), then commits [4, 7) (COMMIT at 7); the
    chunk holding the ABORT marker is lost. Known last offset: the commit is read. Without
    it (Kafka consumer's information), the range runs on to the next marker read."""
    first_chunk = [Batch(1, 0, 2, False, True, True)]
    lost_chunk = [Batch(1, 3, 3, True, True, False)]  # the ABORT marker
    last_chunk = [Batch(1, 4, 6, False, True, False), Batch(1, 7, 7, True, True, False)]
    assert lost_chunk  # never fed
    known = AbortedTransactions([(1, 0, 3)])
    assert known.mask(*_arrays(first_chunk)).tolist() == [True]
    assert known.mask(*_arrays(last_chunk)).tolist() == [False, False]
    unknown = AbortedTransactions([(1, 0)])
    assert unknown.mask(*_arrays(first_chunk)).tolist() == [True]
    assert unknown.mask(*_arrays(last_chunk)).tolist() == [True, False]  # the gap this closes
    # the same transaction given both ways (pages of one plan): the known last offset wins
    both = AbortedTransactions([(1, 0), (1, 0, 3)])
    assert len(both) == 1
    assert both.mask(*_arrays(first_chunk + last_chunk)).tolist() == [True, False, False]


def test_a_marker_before_the_last_offset_still_ends_the_range() -> None:
    """min(marker read, last offset + 1): the earlier one ends the range."""
    tracker = AbortedTransactions([(1, 0, 10)])
    batches = [
        Batch(1, 0, 1, False, True, True),
        Batch(1, 2, 2, True, True, False),
        Batch(1, 3, 4, False, True, False),
    ]
    assert tracker.mask(*_arrays(batches)).tolist() == [True, False, False]


def test_nothing_given_drops_nothing() -> None:
    batches = [Batch(1, 0, 3, False, True, False), Batch(1, 4, 4, True, True, False)]
    assert not AbortedTransactions([]).mask(*_arrays(batches)).any()


def test_isolation_level_option() -> None:
    base = {"metadata.url": "http://m", "subscribe": "t"}
    assert parse_options(base).isolation_level == "read_uncommitted"  # Kafka's consumer default
    assert not parse_options(base).read_committed
    assert parse_options({**base, "kafka.isolation.level": "Read_Committed"}).read_committed
    assert parse_options({**base, "KAFKA.ISOLATION.LEVEL": "read_committed"}, streaming=True).read_committed
    with pytest.raises(
        SkiffOptionError, match="kafka.isolation.level must be read_uncommitted or read_committed"
    ):
        parse_options({**base, "kafka.isolation.level": "committed"})


def test_a_timestamp_answer_at_or_above_the_latest_offset_is_no_answer() -> None:
    """As Kafka's ListOffsets: under read_committed an offset at or above the LSO is no answer."""
    import uuid

    from skiff.metadata.types import OffsetAnswer
    from skiff.spark.planner import PartitionInfo, SkiffSourceError, _timestamp_offsets

    class Metadata:
        def list_offsets(self, queries):  # type: ignore[no-untyped-def]
            return [OffsetAnswer(0, 40, 1_000) for _ in queries]  # inside the open transaction

    part = PartitionInfo("t", str(uuid.uuid4()), 0, log_start=0, high_watermark=50, latest=40)
    base = {"metadata.url": "http://m", "subscribe": "t", "kafka.isolation.level": "read_committed"}
    lenient = parse_options({**base, "startingOffsetsByTimestampStrategy": "latest"})
    assert _timestamp_offsets(Metadata(), [part], [1_000], lenient, "starting") == [40]  # type: ignore[arg-type]
    assert _timestamp_offsets(Metadata(), [part], [1_000], lenient, "ending") == [40]  # type: ignore[arg-type]
    with pytest.raises(SkiffSourceError, match="no record at or after timestamp 1000"):
        _timestamp_offsets(Metadata(), [part], [1_000], parse_options(base), "starting")  # type: ignore[arg-type]
