"""TopicCache.fresh: the synchronous lookup of Produce's synchronous path (agent.topic_cache)."""

from __future__ import annotations

import asyncio
import uuid

from skiff.agent.topic_cache import TopicCache
from skiff.metadata.types import Topic


class _Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


class _Metadata:
    """describe_topics answers once `release` is set; counts the calls."""

    def __init__(self, topic: Topic) -> None:
        self.topic = topic
        self.calls = 0
        self.release = asyncio.Event()

    async def describe_topics(self, names: list[str]) -> dict[str, Topic]:
        self.calls += 1
        await self.release.wait()
        return {n: self.topic for n in names if n == self.topic.name}


def _topic(partitions: int) -> Topic:
    return Topic(name="t", topic_id=uuid.UUID(int=1), partition_count=partitions, configs={})


async def test_fresh_answers_fresh_entries_and_stale_ones_while_one_reload_runs():
    clock = _Clock()
    md = _Metadata(_topic(3))
    cache = TopicCache(md, ttl_ms=5_000, monotonic=clock)  # type: ignore[arg-type]
    assert cache.fresh("t") is None  # not cached: nothing is started
    assert md.calls == 0
    cache.put(_topic(1))
    assert cache.fresh("t").partition_count == 1  # type: ignore[union-attr]
    clock.now_s += 6  # expired, less than another TTL ago: answered, one reload started
    assert cache.fresh("t").partition_count == 1  # type: ignore[union-attr]
    assert cache.fresh("t").partition_count == 1  # type: ignore[union-attr]
    md.release.set()
    await cache.get_by_name(["t"])  # joins the reload in flight
    assert md.calls == 1
    assert cache.fresh("t").partition_count == 3  # type: ignore[union-attr]
    clock.now_s += 11  # expired more than a TTL ago: the awaiting path loads it
    assert cache.fresh("t") is None
