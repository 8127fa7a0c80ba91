"""Structured Streaming: `SkiffStreamReader`, the `DataSourceStreamReader` behind
`spark.readStream.format("skiff")`.

Offsets are Spark's Kafka source offsets: JSON of the next offset to read per partition,
`{"orders": {"0": 23, "1": 40}}`. Each micro-batch:

1. `latestOffset(start, limit)` asks metadata once for the selected partitions and their
   log start and latest offset (`planner.resolve_partitions`: topic lookups and one
   partition_states call, plus one find_chunks call under read_committed; never a bucket
   LIST). The end is each partition's latest offset (the high watermark, or with
   `kafka.isolation.level=read_committed` the last stable offset, so a micro-batch never
   reaches into an open transaction), capped by the Trigger.AvailableNow target if one was taken, then cut by
   the read limit: `ReadMaxRows(maxOffsetsPerTrigger)` is prorated over the partitions
   exactly as Spark's `KafkaMicroBatchStream.rateLimit` does (a partition's share is
   floored, or ceiled when below 1, so small partitions are not starved).
2. `partitions(start, end)` turns the offset pairs into ranges (a partition missing from
   `start` is new and starts at its log start, i.e. earliest), applies `failOnDataLoss`
   to starts below the log start, and plans tasks with the batch planner (split as
   Spark's Kafka source, chunks attached by find_chunks, with the aborted transactions
   under read_committed). Executors read them with the batch executor.

Typed reads: each micro-batch's tasks carry the writer schemas registered when it is
planned (`spark.typed`), with the reader schemas the query started with.

The plan depends only on the two offsets, so a batch Spark replays after a restart from
its checkpoint reads exactly the same records: nothing lost, nothing twice.

Trigger.AvailableNow: `prepareForTriggerAvailableNow` takes the latest offsets of that
moment as the target; later micro-batches never go past them (partitions created after
it wait for the next run). Spark before 4.2 calls `latestOffset()` without a start or a
limit: the reader then starts from the last offsets it planned or committed and applies
`maxOffsetsPerTrigger` itself; its first micro-batch after the query (re)starts is not
limited (the reader cannot know the checkpoint's offsets, and a limit counted from the
starting offsets could fall behind them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from skiff.metadata.wire.http_client import SyncHttpMetadataClient
from skiff.spark.options import SourceOptions
from skiff.spark.planner import (
    PartitionInfo,
    SkiffSourceError,
    plan_tasks,
    resolve_bucket,
    resolve_offsets,
    resolve_partitions,
    run,
)
from skiff.spark.ranges import OffsetRange
from skiff.spark.source import input_partitions, read_partition, typed_specs
from skiff.spark.typed import TypedPlanner

try:  # Spark 4.2+: admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - older 4.x
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass


Key = tuple[str, int]


def parse_offsets(offsets: Mapping[str, Any] | None) -> dict[Key, int]:
    """`{"orders": {"0": 23}}` -> {("orders", 0): 23}."""
    return {(str(t), int(p)): int(o) for t, parts in (offsets or {}).items() for p, o in parts.items()}


def offsets_json(offsets: Mapping[Key, int]) -> dict[str, dict[str, int]]:
    """The inverse of `parse_offsets`, topics and partitions in order (stable checkpoints)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def rate_limit(max_rows: int, begin: Mapping[Key, int], until: Mapping[Key, int]) -> dict[Key, int]:
    """Spark's KafkaMicroBatchStream.rateLimit: share `max_rows` over the partitions in
    proportion to their backlog `until - begin` (every key of `until` is in `begin`)."""
    sizes = {k: end - begin[k] for k, end in until.items() if end - begin[k] > 0}
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(until)
    out = {}
    for k, end in until.items():
        if k not in sizes:
            out[k] = end
            continue
        prorate = max_rows * (sizes[k] / total)
        share = int(prorate) if prorate >= 1 else (1 if prorate > 0 else 0)
        out[k] = min(end, begin[k] + share)
    return out


class SkiffStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: SourceOptions, typed: TypedPlanner | None = None) -> None:
        self.opts = opts
        # typed reads: the reader schemas pinned by the DataFrame's schema; writers per batch
        self.typed = typed or (TypedPlanner(opts.typed) if opts.typed is not None else None)
        self._bucket: str | None = None
        self._parts: dict[Key, PartitionInfo] = {}  # the last answer from metadata
        self._available_now: dict[Key, int] | None = None
        self._last_end: dict[str, Any] | None = None  # for Spark < 4.2 (latestOffset without start)

    # ------------------------------------------------------------------ metadata

    def _poll(self) -> dict[Key, PartitionInfo]:
        """One metadata conversation: the selected partitions with log start and watermark."""
        parts = run(lambda client: resolve_partitions(client, self.opts), self.opts)
        self._parts = {(p.topic, p.partition): p for p in parts}
        return self._parts

    # ------------------------------------------------------------------ offsets

    def initialOffset(self) -> dict[str, Any]:
        def starts(client: SyncHttpMetadataClient) -> dict[Key, int]:
            parts = resolve_partitions(client, self.opts)
            bucket = resolve_bucket(client, self.opts)  # timestamps read one chunk
            opts = dataclasses.replace(self.opts, bucket=bucket)
            offsets = resolve_offsets(client, parts, opts.starting, opts, "starting")
            return {(p.topic, p.partition): o for p, o in zip(parts, offsets, strict=True)}

        return offsets_json(run(starts, self.opts))

    def getDefaultReadLimit(self) -> Any:
        if self.opts.max_offsets_per_trigger is not None and ReadMaxRows is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = {k: p.latest for k, p in self._poll().items()}

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        max_rows: int | None
        if start is None:  # Spark < 4.2: no start, no limit; the source limits itself
            # From the end of the batch it last planned or committed. A reader that has seen
            # none cannot tell a new query from one restarted from a checkpoint (Spark does
            # not say where the checkpoint is), so that first batch takes everything
            # available: limiting it from the starting offsets could end *behind* the
            # checkpoint and make Spark read records twice.
            max_rows = self.opts.max_offsets_per_trigger if self._last_end is not None else None
            start = self._last_end or {}
        else:
            max_rows = limit.max_rows if ReadMaxRows is not None and isinstance(limit, ReadMaxRows) else None
        begin = parse_offsets(start)
        until = dict(begin)  # partitions metadata no longer lists stay where they were
        for key, p in self._poll().items():
            if key not in begin:  # a new partition: from the earliest offset
                begin[key] = p.log_start
            end = p.latest
            if self._available_now is not None:
                end = min(end, self._available_now.get(key, begin[key]))
            until[key] = max(end, begin[key])  # offsets never move back
        if max_rows is not None:
            until = rate_limit(max_rows, begin, until)
        self._last_end = offsets_json(until)
        return self._last_end

    def reportLatestOffset(self) -> dict[str, Any] | None:
        if not self._parts:
            return None
        return offsets_json({k: p.latest for k, p in self._parts.items()})

    # ------------------------------------------------------------------ planning and reading

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, until = parse_offsets(start), parse_offsets(end)
        if all(begin.get(k) == u for k, u in until.items()):
            return []  # nothing new: no metadata call

        def plan(client: SyncHttpMetadataClient) -> tuple[str, list[Any], dict[str, Any]]:
            bucket = self._bucket or resolve_bucket(client, self.opts)
            if not set(until) <= set(self._parts):  # e.g. a batch replayed after a restart
                self._parts = {(p.topic, p.partition): p for p in resolve_partitions(client, self.opts)}
            ranges = self._ranges(begin, until)
            ids = {k: p.topic_id for k, p in self._parts.items()}
            tasks = plan_tasks(client, ranges, ids, self.opts)
            return bucket, tasks, typed_specs(self.typed, client, tasks)

        self._bucket, tasks, typed = run(plan, self.opts)
        self._last_end = end
        return input_partitions(tasks, self._bucket, self.opts, typed)

    def _ranges(self, begin: Mapping[Key, int], until: Mapping[Key, int]) -> list[OffsetRange]:
        ranges = []
        for key, end in sorted(until.items()):
            p = self._parts.get(key)
            frm = begin.get(key, p.log_start if p is not None else end)
            if p is None:
                if frm < end:
                    self._data_loss(
                        f"{key[0]}-{key[1]} no longer exists; offsets {frm} to {end - 1} are lost"
                    )
                continue
            if frm < p.log_start:
                self._data_loss(
                    f"{p.topic}-{p.partition}: offsets {frm} to {p.log_start - 1} are gone (the log now"
                    f" starts at {p.log_start}; retention or DeleteRecords removed them)"
                )
                frm = p.log_start
            if frm < end:
                ranges.append(OffsetRange(p.topic, p.partition, frm, end))
        return ranges

    def _data_loss(self, message: str) -> None:
        if self.opts.fail_on_data_loss:
            raise SkiffSourceError(message + ". Set failOnDataLoss=false to skip them.")

    def commit(self, end: dict[str, Any]) -> None:
        self._last_end = end  # metadata keeps no reader state: the checkpoint is Spark's

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_partition(partition)

    def stop(self) -> None:
        pass
