"""The executors' side: one planned task's chunks, read from the bucket, as Arrow batches.

No metadata access here: the task carries its chunk locations. Chunks are read with
ranged GETs through the synchronous object store (`fileformat.objectstore`, boto3 for
s3://), up to `prefetch` of them in flight on a small thread pool (bounded by
`prefetch_bytes`) so the next chunk downloads while this one decodes, and decoded by
`spark.decode.RecordBatchBuilder`; a typed read then decodes key and value with the
task's schemas (`spark.typed_apply`). Under read_committed the task also carries the aborted
transactions of its range (planned by the driver), whose batches the builder drops.

A chunk whose object is gone (compaction swapped it out and the collector deleted it, or
retention removed it, after the plan was made) is data loss: with `failOnDataLoss` the
task fails saying so; without it the chunk is skipped, as Spark's Kafka source skips
offsets that vanished. A skipped chunk may have held ABORT markers: the task's aborted
transactions also carry their last offsets, which end them anyway, so a producer's later
committed batches are still read and only what the chunk held is missing.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow as pa
from skiff.fileformat.chunk_reader import ChunkLocation
from skiff.fileformat.objectstore import ObjectStore, open_store
from skiff.fileformat.objectstore.errors import ObjectNotFound, StorageError
from skiff.spark.decode import RecordBatchBuilder
from skiff.spark.planner import PlannedRead, SkiffSourceError, bucket_read_error
from skiff.spark.typed import TypedTask

log = logging.getLogger(__name__)


def _fetch(store: ObjectStore, loc: ChunkLocation) -> bytes:
    return store.get_range(loc.object_key, loc.byte_position, loc.byte_length)


def read_task(
    task: PlannedRead,
    bucket: str,
    *,
    include_headers: bool,
    fail_on_data_loss: bool,
    prefetch: int = 3,
    prefetch_bytes: int = 64 * 1024 * 1024,
    store: ObjectStore | None = None,
    typed: TypedTask | None = None,
) -> Iterator[pa.RecordBatch]:
    batches = _read_raw(task, bucket, include_headers, fail_on_data_loss, prefetch, prefetch_bytes, store)
    if typed is None:
        yield from batches
        return
    from skiff.spark.typed_apply import apply_typed

    for batch in batches:
        yield apply_typed(batch, typed, task.topic, task.partition)


def _read_raw(
    task: PlannedRead,
    bucket: str,
    include_headers: bool,
    fail_on_data_loss: bool,
    prefetch: int,
    prefetch_bytes: int,
    store: ObjectStore | None,
) -> Iterator[pa.RecordBatch]:
    builder = RecordBatchBuilder(
        task.topic,
        task.partition,
        task.from_offset,
        task.until_offset,
        include_headers=include_headers,
        aborted=task.aborted,
    )
    store = store or open_store(bucket)
    chunks = list(task.chunks)
    with ThreadPoolExecutor(max_workers=max(prefetch, 1), thread_name_prefix="skiff-read") as pool:
        queue: deque[tuple[ChunkLocation, Future[bytes]]] = deque()
        next_index = 0
        while queue or next_index < len(chunks):
            in_flight = sum(loc.byte_length for loc, _ in queue)
            while (
                next_index < len(chunks)
                and len(queue) < max(prefetch, 1)
                and (not queue or in_flight + chunks[next_index].byte_length <= prefetch_bytes)
            ):
                loc = chunks[next_index]
                queue.append((loc, pool.submit(_fetch, store, loc)))
                in_flight += loc.byte_length
                next_index += 1
            loc, future = queue.popleft()
            try:
                data = future.result()
            except ObjectNotFound as exc:
                where = f"{task.topic}-{task.partition} offsets {loc.base_offset}..{loc.last_offset}"
                if fail_on_data_loss:
                    raise SkiffSourceError(
                        f"{where}: the object {loc.object_key} is gone from the bucket (compaction or"
                        " retention replaced it after the query was planned); re-run the query, or set"
                        " failOnDataLoss=false to skip what is lost"
                    ) from exc
                log.warning("%s: %s is gone; skipped (failOnDataLoss=false)", where, loc.object_key)
                continue
            except StorageError as exc:
                raise bucket_read_error(bucket, loc.object_key, exc) from exc
            yield from builder.add_chunk(loc, data)
    last = builder.flush()
    if last is not None:
        yield last
