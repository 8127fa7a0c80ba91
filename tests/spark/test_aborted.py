"""`spark.aborted.AbortedTransactions` against the truth of randomly generated logs, and
the `kafka.isolation.level` option. No Spark, no cluster: milliseconds each.

A log is generated as producers would write it: transactional producers each run one
transaction at a time (data batches, then a COMMIT or ABORT marker), interleaved with
each other and with non-transactional batches (some from idempotent producers, whose
producer ids can equal a transactional one's). A task reads an offset range of it in
chunks; it is given the aborted transactions overlapping the range, as metadata answers
them ((producer id, first offset) of those whose marker is at or after the range start
and whose first offset is below its end). The mask must drop exactly the data batches of
aborted transactions, nothing else, whatever the chunk boundaries.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import pytest

from spark.aborted import AbortedTransactions
from spark.options import SkiffOptionError, parse_options


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


@pytest.mark.parametrize("seed", range(300))
def test_mask_drops_exactly_the_aborted_batches(seed: int) -> None:
    rng = random.Random(seed)
    batches, aborted = _log(rng)
    end_offset = batches[-1].last_offset + 1
    start = rng.randint(0, end_offset - 1)
    until = rng.randint(start + 1, end_offset)
    in_range = [b for b in batches if b.last_offset >= start and b.base_offset < until]
    given = [(pid, first) for pid, first, marker in aborted if marker >= start and first < until]
    tracker = AbortedTransactions(given)
    got: list[bool] = []
    cut = 0
    while cut < len(in_range):  # chunks of random sizes, in order
        chunk = in_range[cut : cut + rng.randint(1, 6)]
        got.extend(tracker.mask(*_arrays(chunk)).tolist())
        cut += len(chunk)
    assert got == [b.aborted for b in in_range]


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
    import asyncio
    import uuid

    from metadata.types import OffsetAnswer
    from spark.planner import PartitionInfo, SkiffSourceError, _timestamp_offsets

    class Metadata:
        async def list_offsets(self, queries):  # type: ignore[no-untyped-def]
            return [OffsetAnswer(0, 40, 1_000) for _ in queries]  # inside the open transaction

    part = PartitionInfo("t", str(uuid.uuid4()), 0, log_start=0, high_watermark=50, latest=40)
    base = {"metadata.url": "http://m", "subscribe": "t", "kafka.isolation.level": "read_committed"}
    lenient = parse_options({**base, "startingOffsetsByTimestampStrategy": "latest"})
    run = asyncio.run
    assert run(_timestamp_offsets(Metadata(), [part], [1_000], lenient, "starting")) == [40]  # type: ignore[arg-type]
    assert run(_timestamp_offsets(Metadata(), [part], [1_000], lenient, "ending")) == [40]  # type: ignore[arg-type]
    with pytest.raises(SkiffSourceError, match="no record at or after timestamp 1000"):
        run(_timestamp_offsets(Metadata(), [part], [1_000], parse_options(base), "starting"))  # type: ignore[arg-type]
