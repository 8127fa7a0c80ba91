"""The chunk reader's two drivers run the same cases over every backend.

    driver:  sync (`fileformat.read_sync` over `open_store`)
             async (`fileformat.read_async` over `open_async_store`, on its own loop)
             cached (`fileformat.read_async` over a `RangeCache` wrapping the async store)
    backend: memory:// | file:// | s3:// on moto's server

The S3 backend is configured only through the standard AWS variables, as in production;
if moto's server cannot start, the test fails (the fixture does not skip). Request counts
come from the stores' own counters (each models one S3 request per call).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from skiff.fileformat import read_async, read_sync
from skiff.fileformat.chunk_reader import ChunkLocation, FetchSelection, PartitionRead
from skiff.fileformat.objectstore import ObjectNotFound, drop_memory_bucket, open_async_store, open_store
from skiff.fileformat.objectstore.range_cache import RangeCache

from tests.support.chunk_logs import Log, build_log, expected_selection, returned_batches
from tests.support.s3servers import S3Bucket


class Driver:
    """One synchronous face over a driver and its store, to write each case once."""

    def __init__(self, kind: str, url: str) -> None:
        self.kind = kind
        self.loop: asyncio.AbstractEventLoop | None = None
        if kind == "sync":
            self.store: Any = open_store(url, fsync=False) if url.startswith("file") else open_store(url)
        else:
            self.loop = asyncio.new_event_loop()
            inner = open_async_store(url)
            self.store = (
                RangeCache(inner, max_bytes=64 << 20, coalesce_gap_bytes=1 << 20)
                if kind == "cached"
                else inner
            )

    def run(self, coro: Any) -> Any:
        assert self.loop is not None
        return self.loop.run_until_complete(coro)

    def put(self, key: str, data: bytes) -> None:
        if self.kind == "sync":
            self.store.put(key, data)
        else:
            inner = self.store.inner if isinstance(self.store, RangeCache) else self.store
            self.run(inner.put(key, data))  # not through the cache: reads must GET

    def gets(self) -> int:
        return int(self.store.stats.snapshot().requests.get("get_range", 0))

    def read_partition(
        self, locations: Sequence[ChunkLocation], offset: int, max_bytes: int, **kw: Any
    ) -> FetchSelection:
        if self.kind == "sync":
            return read_sync.read_partition(self.store, locations, offset, max_bytes, **kw)
        return self.run(read_async.read_partition(self.store, locations, offset, max_bytes, **kw))  # type: ignore[no-any-return]

    def read_fetch(
        self, reads: Sequence[PartitionRead], max_bytes: int, **kw: Any
    ) -> list[FetchSelection | Exception]:
        if self.kind == "sync":
            return read_sync.read_fetch(self.store, reads, max_bytes, **kw)
        return self.run(read_async.read_fetch(self.store, reads, max_bytes, **kw))  # type: ignore[no-any-return]

    def read_chunk(self, location: ChunkLocation) -> bytes:
        if self.kind == "sync":
            return bytes(read_sync.read_chunk(self.store, location))
        return bytes(self.run(read_async.read_chunk(self.store, location)))

    def close(self) -> None:
        if self.kind == "sync":
            self.store.close()
        else:
            self.run(self.store.close())
            assert self.loop is not None
            self.loop.close()


@pytest.fixture(params=["memory", "file", pytest.param("moto", marks=pytest.mark.s3)])
def store_url(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    if request.param == "memory":
        name = f"drivers-{uuid.uuid4().hex[:12]}"
        yield f"memory://{name}"
        drop_memory_bucket(name)
    elif request.param == "file":
        yield f"file://{tmp_path}/bucket"
    else:
        bucket: S3Bucket = request.getfixturevalue("moto_s3")
        bucket.setenv(monkeypatch)
        yield bucket.url("reader")


@pytest.fixture(params=["sync", "async", "cached"])
def driver(request: pytest.FixtureRequest, store_url: str) -> Iterator[Driver]:
    d = Driver(request.param, store_url)
    yield d
    d.close()


def upload(driver: Driver, *logs: Log) -> None:
    for log in logs:
        for key, data in log.files.items():
            driver.put(key, data)


AGENT_LOG: Callable[[], Log] = lambda: build_log(  # noqa: E731
    [(0, 50, (0, 1, 2)), (0, 50, (0,)), (0, 900, (0, 1)), (0, 50, (0, 1, 2, 3))] * 3,
    [2, 1, 3],
    absolute=False,
    start_offset=1_000,
    files=3,
    filler_bytes=300,
    key_prefix="agent",
)
COMPACTED_LOG: Callable[[], Log] = lambda: build_log(  # noqa: E731
    [(0, 50, (0, 4)), (10, 50, (1,)), (0, 700, (0, 2, 3)), (100, 50, (5,))] * 3,
    [1, 2],
    absolute=True,
    start_offset=500,
    files=2,
    filler_bytes=300,
    key_prefix="compacted",
)


@pytest.mark.parametrize("make_log", [AGENT_LOG, COMPACTED_LOG], ids=["agent", "compacted"])
def test_partition_reads_follow_the_rules(driver: Driver, make_log: Callable[[], Log]) -> None:
    log = make_log()
    upload(driver, log)
    first, last = log.batches[0].base_offset, log.batches[-1].last_offset
    for offset in (first, first + 3, (first + last) // 2, last, last + 1):
        for max_bytes in (1, 1000, 5000, 1 << 20):
            got = driver.read_partition(log.locations, offset, max_bytes)
            want = expected_selection(log, offset, max_bytes)
            assert returned_batches(got.records) == [(m.base_offset, m.size, m.offsets) for m in want]
            assert got.next_offset == (want[-1].last_offset + 1 if want else offset)
    loc = log.locations[1]
    blob = log.files[loc.object_key]
    assert driver.read_chunk(loc) == blob[loc.byte_position : loc.byte_position + loc.byte_length]


def test_fetch_reads_each_object_once_when_chunks_are_close(driver: Driver) -> None:
    # three partitions whose chunks share three objects, 300 filler bytes apart
    logs = [
        build_log([(0, 40, (0, 1))] * 6, [1], absolute=False, files=3, filler_bytes=300, key_prefix="shared")
        for _ in range(1)
    ]
    log = logs[0]
    # the same objects hold the chunks of "three partitions": chunks 0-5 split between them
    reads = [
        PartitionRead(log.locations[0:2], log.locations[0].base_offset, 1 << 20),
        PartitionRead(log.locations[2:4], log.locations[2].base_offset, 1 << 20),
        PartitionRead(log.locations[4:6], log.locations[4].base_offset, 1 << 20),
    ]
    upload(driver, log)
    gap = {} if driver.kind == "cached" else {"gap_bytes": 1 << 20}
    before = driver.gets()
    results = driver.read_fetch(reads, 1 << 20, **gap)
    assert driver.gets() - before == len(log.files)  # one GET per object, not one per chunk
    for read, result in zip(reads, results, strict=True):
        assert isinstance(result, FetchSelection)
        assert [b[0] for b in returned_batches(result.records)] == [loc.base_offset for loc in read.locations]
    # with no coalescing every chunk costs its own GET (the cached driver: all cached now)
    if driver.kind != "cached":
        before = driver.gets()
        driver.read_fetch(reads, 1 << 20, gap_bytes=0)
        assert driver.gets() - before == len(log.locations)
    else:
        before = driver.gets()
        assert driver.read_fetch(reads, 1 << 20) == results
        assert driver.gets() == before


def test_shared_budget_in_request_order(driver: Driver) -> None:
    a = build_log([(0, 400, (0,))] * 4, [2], absolute=False, key_prefix="a")
    b = build_log([(0, 400, (0,))] * 4, [2], absolute=False, key_prefix="b")
    upload(driver, a, b)
    size = a.batches[0].size
    reads = [PartitionRead(a.locations, 0, 1 << 20), PartitionRead(b.locations, 0, 1 << 20)]
    first, second = driver.read_fetch(reads, 3 * size)
    assert isinstance(first, FetchSelection) and isinstance(second, FetchSelection)
    assert (first.batch_count, second.batch_count) == (3, 0)  # a takes the budget first
    first, second = driver.read_fetch(reads, 6 * size)
    assert (first.batch_count, second.batch_count) == (4, 2)  # type: ignore[union-attr]


def test_missing_object_fails_only_its_partition(driver: Driver) -> None:
    a = build_log([(0, 40, (0,))] * 2, [1], absolute=False, key_prefix="present")
    gone = build_log([(0, 40, (0,))] * 2, [1], absolute=False, key_prefix="gone")
    upload(driver, a)
    reads = [PartitionRead(gone.locations, 0, 1 << 20), PartitionRead(a.locations, 0, 1 << 20)]
    first, second = driver.read_fetch(reads, 1 << 20)
    assert isinstance(first, ObjectNotFound)
    assert isinstance(second, FetchSelection) and second.batch_count == 2
    with pytest.raises(ObjectNotFound):
        driver.read_partition(gone.locations, 0, 1 << 20)
