"""Long-poll fetches in the purgatory (agent.commit_watch) on a manual clock, with a fake
metadata long poll: completion by this agent's commits, by other agents' commits (the
follower), by timeout; deleted partitions; a newly followed partition restarts the long
poll; cancelled fetches leave the timer; lingering follow ends (on the manual clock too);
parked fetches are counted by how they completed (wake or expiry)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

import pytest
from skiff.agent import commit_watch
from skiff.agent.commit_watch import CommitWatch
from skiff.agent.timing_wheel import SystemTimer
from skiff.metadata.types import PartitionWatermark

from tests.unit.test_timing_wheel import ManualClock

T = uuid.uuid4()
A, B = (T, 0), (T, 1)


class FakeLongPoll:
    """`wait_for_commits` that records its questions and answers from a queue."""

    def __init__(self) -> None:
        self.calls: list[list[PartitionWatermark]] = []
        self.answers: asyncio.Queue[list[PartitionWatermark] | Exception] = asyncio.Queue()
        self.cancelled = 0
        self._asked = asyncio.Condition()

    async def asked(self, times: int) -> None:
        """Until the long poll was asked `times` times."""
        async with self._asked:
            await self._asked.wait_for(lambda: len(self.calls) >= times)

    async def wait_for_commits(
        self, known: Sequence[PartitionWatermark], timeout_ms: int
    ) -> list[PartitionWatermark]:
        async with self._asked:
            self.calls.append(list(known))
            self._asked.notify_all()
        try:
            answer = await self.answers.get()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        if isinstance(answer, Exception):
            raise answer
        return answer


def make(linger_ms: int = 60_000) -> tuple[ManualClock, FakeLongPoll, CommitWatch, list[tuple]]:
    clock = ManualClock(1000)
    md = FakeLongPoll()
    seen: list[tuple] = []
    watch = CommitWatch(
        md,  # type: ignore[arg-type]
        retry_interval_ms=1,
        follow_linger_ms=linger_ms,
        on_high_watermark=lambda k, h: seen.append((k, h)),
        timer=SystemTimer(now_ms=clock, sleep=clock.sleep),
        monotonic_s=lambda: clock.now / 1000,  # the follow linger's clock: the same manual one
    )
    return clock, md, watch, seen


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_own_commit_completes_the_fetch_and_it_leaves_the_timer() -> None:
    _, _, watch, _ = make()
    fetch = asyncio.ensure_future(watch.wait({A: 10, B: 5}, 500))
    await settle()
    assert watch.waiting == 1
    watch.committed(B, 5)  # not news
    await settle()
    assert not fetch.done()
    watch.committed(B, 7)
    assert await fetch is True
    assert watch.waiting == 0
    assert (watch.parked_woken, watch.parked_expired) == (1, 0)
    await watch.close()


async def test_timeout_answers_false_on_the_manual_clock() -> None:
    clock, _, watch, _ = make()
    fetch = asyncio.ensure_future(watch.wait({A: 10}, 500))
    await settle()
    clock.now += 499
    watch.purgatory.advance_clock()
    await settle()
    assert not fetch.done()
    clock.now += 1
    watch.purgatory.advance_clock()
    assert await fetch is False
    assert (watch.parked_woken, watch.parked_expired) == (0, 1)
    await watch.close()


async def test_newer_watermark_already_known_completes_at_once_and_distrusts_the_cache() -> None:
    _, md, watch, seen = make()
    first = asyncio.ensure_future(watch.wait({A: 10}, 500))
    await settle()
    md.answers.put_nowait([PartitionWatermark(T, 0, 12)])
    assert await first is True
    seen.clear()
    # A read that came back behind what the watch heard: answered at once.
    assert await watch.wait({A: 11}, 500) is True
    assert seen == [(A, 12)]
    # only the first fetch parked: one answered at once is neither woken nor expired
    assert (watch.parked_woken, watch.parked_expired) == (1, 0)
    await watch.close()


async def test_other_agents_commit_arrives_through_the_long_poll() -> None:
    _, md, watch, seen = make()
    fetch = asyncio.ensure_future(watch.wait({A: 10, B: 3}, 5_000))
    await settle()
    assert md.calls == [[PartitionWatermark(T, 0, 10), PartitionWatermark(T, 1, 3)]]
    md.answers.put_nowait([PartitionWatermark(T, 1, 4)])
    assert await fetch is True
    assert (B, 4) in seen
    await settle()
    # The follower asks again at once, with what it now knows.
    assert md.calls[-1] == [PartitionWatermark(T, 0, 10), PartitionWatermark(T, 1, 4)]
    assert watch.long_polls == 1
    await watch.close()


async def test_a_new_partition_restarts_the_long_poll() -> None:
    _, md, watch, _ = make()
    f1 = asyncio.ensure_future(watch.wait({A: 10}, 5_000))
    await settle()
    f2 = asyncio.ensure_future(watch.wait({B: 0}, 5_000))
    await settle()
    assert md.cancelled == 1
    assert md.calls[-1] == [PartitionWatermark(T, 0, 10), PartitionWatermark(T, 1, 0)]
    md.answers.put_nowait([PartitionWatermark(T, 1, 1)])
    assert await f2 is True
    assert not f1.done()
    await watch.close()
    f1.cancel()


async def test_deleted_partition_wakes_its_fetches_and_is_no_longer_followed() -> None:
    _, md, watch, _ = make()
    fetch = asyncio.ensure_future(watch.wait({A: 10}, 5_000))
    await settle()
    md.answers.put_nowait([PartitionWatermark(T, 0, -1, error_code=3)])
    assert await fetch is True  # read again: the read reports the error
    assert watch.followed_partitions == 0
    await watch.close()


async def test_long_poll_failure_is_retried() -> None:
    _, md, watch, _ = make()
    fetch = asyncio.ensure_future(watch.wait({A: 10}, 5_000))
    await settle()
    md.answers.put_nowait(RuntimeError("metadata down"))
    await asyncio.wait_for(md.asked(2), 10)  # asked again after retry_interval_ms
    md.answers.put_nowait([PartitionWatermark(T, 0, 11)])
    assert await fetch is True
    await watch.close()


async def test_cancelled_fetch_leaves_the_timer() -> None:
    _, _, watch, _ = make()
    fetch = asyncio.ensure_future(watch.wait({A: 10}, 5_000))
    await settle()
    assert watch.waiting == 1
    fetch.cancel()
    with pytest.raises(asyncio.CancelledError):
        await fetch
    assert watch.waiting == 0
    assert (watch.parked_woken, watch.parked_expired) == (0, 0)  # cancelled: neither
    await watch.close()


async def test_follow_ends_after_the_linger_when_nobody_waits() -> None:
    clock, md, watch, _ = make(linger_ms=100)
    fetch = asyncio.ensure_future(watch.wait({A: 10}, 5_000))
    await settle()
    watch.committed(A, 11)
    assert await fetch is True
    clock.now += 99  # the last wait is younger than the linger: still followed
    md.answers.put_nowait([])  # the long poll answers and is asked again
    await asyncio.wait_for(md.asked(2), 10)
    assert watch.followed_partitions == 1
    clock.now += 2  # past the linger, and nobody waited
    md.answers.put_nowait([])
    await settle()
    assert watch.followed_partitions == 0
    assert len(md.calls) == 2  # the follower stopped: no third long poll
    await watch.close()


async def test_news_of_a_partition_this_agent_is_committing_waits_for_that_commit() -> None:
    _, md, watch, _ = make()
    watch.local_commit_pending = lambda key: key == A
    fetch = asyncio.ensure_future(watch.wait({A: 10}, 5_000))
    await settle()
    md.answers.put_nowait([PartitionWatermark(T, 0, 12)])
    await settle()
    assert not fetch.done()  # left to our own commit's callback ...
    assert md.calls[-1] == [PartitionWatermark(T, 0, 12)]  # ... but not asked about again
    watch.committed(A, 12)
    assert await fetch is True
    # If that commit never reports (it failed), the news wakes fetches after the settle delay.
    late = asyncio.ensure_future(watch.wait({A: 12}, 5_000))
    await settle()
    md.answers.put_nowait([PartitionWatermark(T, 0, 15)])
    await settle()
    assert not late.done()
    assert await asyncio.wait_for(late, 2) is True
    await watch.close()


async def test_a_fetch_that_times_out_with_deferred_news_counts_as_expired(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """News deferred to this agent's own commit (not checked against the waiters) makes the
    expiring fetch read again (True), but it completed by its timeout: an expiry."""
    # the settle delay is real time (loop.call_later): out of reach, so only the manual
    # clock decides
    monkeypatch.setattr(commit_watch, "LOCAL_SETTLE_MS", 3_600_000)
    clock, md, watch, _ = make()
    watch.local_commit_pending = lambda key: key == A
    fetch = asyncio.ensure_future(watch.wait({A: 10}, 500))
    await settle()
    md.answers.put_nowait([PartitionWatermark(T, 0, 12)])
    await settle()
    assert not fetch.done()  # the news waits for our commit (or the settle delay) ...
    clock.now += 500
    watch.purgatory.advance_clock()  # ... and the max wait runs out first
    assert await fetch is True
    assert (watch.parked_woken, watch.parked_expired) == (0, 1)
    await watch.close()
