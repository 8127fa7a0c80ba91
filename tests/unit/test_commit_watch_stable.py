"""The commit watch hands the last stable offset of each long-poll answer to the chunk
cache before it wakes waiters, so a read_committed fetch parked at an LSO that another
agent's commit did not move can park again without a metadata call."""

from __future__ import annotations

import asyncio
import functools

from skiff.agent.chunk_cache import ChunkLocationCache
from skiff.agent.commit_watch import CommitWatch
from skiff.agent.timing_wheel import SystemTimer
from skiff.metadata.types import PartitionFetchInfo, PartitionWatermark

from tests.unit.test_chunk_cache import loc
from tests.unit.test_commit_watch import A, FakeLongPoll, T, settle
from tests.unit.test_timing_wheel import ManualClock


async def test_an_unmoved_lso_parks_again_a_moved_one_asks_metadata() -> None:
    clock = ManualClock(1000)
    md = FakeLongPoll()
    cache = ChunkLocationCache(monotonic=lambda: 0.0)
    order: list[str] = []

    def on_stable(key: tuple, hwm: int, lso: int) -> None:
        order.append("stable")
        cache.saw_stable(key, hwm, lso)

    watch = CommitWatch(
        md,  # type: ignore[arg-type]
        retry_interval_ms=1,
        on_high_watermark=cache.saw_high_watermark,
        on_stable=on_stable,
        timer=SystemTimer(now_ms=clock, sleep=clock.sleep),
    )
    confirms = functools.partial(watch.confirms_tail, A)
    # metadata said: watermark 10, an open transaction holds the LSO at 5
    cache.store(A, PartitionFetchInfo(0, 0, 10, (loc(0, 4),), 5, (), (), 5), fetch_offset=0)
    tail = cache.known_tail_committed(A, 5, 0, confirms=confirms)
    assert tail is not None and tail.high_watermark == 10
    fetch = asyncio.ensure_future(watch.wait({A: tail.high_watermark}, 5_000))
    await settle()
    fetch.add_done_callback(lambda _: order.append("woken"))
    md.answers.put_nowait([PartitionWatermark(T, 0, 12, 0, 5)])  # more data of the transaction
    assert await fetch is True
    assert order == ["stable", "woken"]
    again = cache.known_tail_committed(A, 5, 0, confirms=confirms)  # the re-read
    assert again is not None and (again.last_stable_offset, again.high_watermark) == (5, 12)
    fetch = asyncio.ensure_future(watch.wait({A: again.high_watermark}, 5_000))
    await settle()
    assert not fetch.done()  # parked again
    md.answers.put_nowait([PartitionWatermark(T, 0, 14, 0, 14)])  # the markers
    assert await fetch is True
    assert cache.known_tail_committed(A, 5, 0, confirms=confirms) is None  # moved: metadata
    await watch.close()
