"""The data source's options: Spark's built-in Kafka source options, parsed and checked.

Names and semantics follow Spark's Kafka integration guide (keys are case-insensitive):

- which partitions: exactly one of `subscribe` (comma-separated topics), `subscribePattern`
  (a regular expression matched against whole topic names) or `assign` (JSON
  `{"topicA":[0,1]}`);
- where to start and end (batch: end exclusive): `startingOffsets` / `endingOffsets`
  (`earliest`, `latest`, or JSON `{"topicA":{"0":23,"1":-2}}` with -2 = earliest and
  -1 = latest; a JSON map must name exactly the assigned partitions), overridden by
  `startingOffsetsByTimestamp` / `endingOffsetsByTimestamp` (JSON of ms per partition),
  overridden by `startingTimestamp` / `endingTimestamp` (ms, every partition);
  `startingOffsetsByTimestampStrategy` `error` (default) or `latest` when no record is at
  or after the timestamp;
- `failOnDataLoss` (default true), `minPartitions`, `maxRecordsPerPartition`,
  `includeHeaders` (default false), `maxOffsetsPerTrigger` (streaming);
- `kafka.isolation.level`: `read_uncommitted` (the default, as for Spark's Kafka source,
  which leaves the Kafka consumer's default alone) or `read_committed` (case-insensitive,
  as Kafka's consumer config): committed data only, up to the last stable offset (see
  `spark.planner` and `spark.decode`). Transaction markers are never rows in either mode;
- Skiff's own: `metadata.url` (required), `bucket` (the bucket URL: `s3://b/prefix`,
  `file:///path`; default: the one metadata serves; endpoint and credentials from the
  usual AWS settings); the metadata service's credentials `metadata.token` or
  `metadata.tokenFile` and `metadata.caFile` (default: the driver's `SKIFF_METADATA_TOKEN`,
  `SKIFF_METADATA_TOKEN_FILE`, `SKIFF_METADATA_CA_FILE`, as every Skiff client; the driver
  plans with them); `metadata.reportUsage` (default true): each executor task reports its
  object-store requests to metadata (role `reader`, `spark.usage`) with the driver's
  credentials, in at most 2 s and never failing the task; set false where executors cannot
  reach the metadata service (then only the driver talks to it);
- typed reads through the schema registry: `valueFormat`/`keyFormat`, `valueSubject`/
  `keySubject`, `valueSchemaVersion`/`keySchemaVersion`, `valueProtobufMessage`/
  `keyProtobufMessage`, `onDecodeError` (`spark.typed_options`).

Errors are `SkiffOptionError` (a ValueError) with a message naming the option.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from skiff.spark.typed_options import TypedOptionError, TypedOptions, parse_typed

EARLIEST = -2
LATEST = -1
READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"


class SkiffOptionError(ValueError):
    """An option is missing, malformed or contradicts another one."""


@dataclass(frozen=True)
class OffsetSpec:
    """Where to start or end: `kind` is "earliest", "latest", "offsets" (per partition,
    -2/-1 allowed), "timestamps" (ms per partition) or "timestamp" (ms, all partitions)."""

    kind: str
    per_partition: Mapping[tuple[str, int], int] | None = None
    timestamp_ms: int | None = None


@dataclass(frozen=True)
class SourceOptions:
    metadata_url: str
    bucket: str | None
    subscribe: tuple[str, ...] | None
    subscribe_pattern: str | None
    assign: tuple[tuple[str, int], ...] | None
    starting: OffsetSpec
    ending: OffsetSpec
    timestamp_strategy: str
    fail_on_data_loss: bool
    min_partitions: int | None
    max_records_per_partition: int | None
    include_headers: bool
    max_offsets_per_trigger: int | None
    isolation_level: str = READ_UNCOMMITTED
    metadata_token: str | None = field(default=None, repr=False)
    metadata_token_file: str | None = None
    metadata_ca_file: str | None = None
    # typed reads (spark.typed_options): None when key and value are both raw
    typed: TypedOptions | None = None
    # batch reads take Spark's pushed filters (spark.pushdown); needs the session's
    # spark.sql.python.filterPushdown.enabled=true
    push_filters: bool = True
    # executors report their object-store requests to metadata (spark.usage)
    report_usage: bool = True

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == READ_COMMITTED


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise SkiffOptionError(f"option {name} must be true or false, got {raw!r}")


def _positive_int(opts: Mapping[str, str], name: str) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise SkiffOptionError(f"option {name} must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise SkiffOptionError(f"option {name} must be a positive integer, got {raw!r}")
    return value


def _json_partition_map(name: str, raw: str) -> dict[tuple[str, int], int]:
    try:
        data = json.loads(raw)
        out: dict[tuple[str, int], int] = {}
        for topic, parts in data.items():
            for partition, value in parts.items():
                out[(str(topic), int(partition))] = int(value)
        return out
    except (ValueError, AttributeError, TypeError):
        raise SkiffOptionError(
            f'option {name} must be JSON like {{"topicA":{{"0":23,"1":-1}}}}, got {raw!r}'
        ) from None


def _offset_spec(opts: Mapping[str, str], edge: str, default: str) -> OffsetSpec:
    """Spark's precedence: <edge>Timestamp, then <edge>OffsetsByTimestamp, then <edge>Offsets."""
    ts = opts.get(f"{edge}timestamp")
    if ts is not None:
        try:
            return OffsetSpec("timestamp", timestamp_ms=int(ts))
        except ValueError:
            raise SkiffOptionError(f"option {edge}Timestamp must be a number of ms, got {ts!r}") from None
    by_ts = opts.get(f"{edge}offsetsbytimestamp")
    if by_ts is not None:
        return OffsetSpec("timestamps", per_partition=_json_partition_map(f"{edge}OffsetsByTimestamp", by_ts))
    raw = opts.get(f"{edge}offsets", default).strip()
    if raw.lower() in ("earliest", "latest"):
        return OffsetSpec(raw.lower())
    return OffsetSpec("offsets", per_partition=_json_partition_map(f"{edge}Offsets", raw))


def include_headers_option(raw: Mapping[str, str]) -> bool:
    """`includeHeaders` alone (it decides the schema, for batch and streaming alike)."""
    return _bool({str(k).lower(): str(v) for k, v in raw.items()}, "includeHeaders", False)


def parse_options(raw: Mapping[str, str], *, streaming: bool | None = False) -> SourceOptions:
    """The options of a batch (`streaming` False) or streaming (True) query; None: either
    (the schema is asked before Spark says which), so neither's own checks apply."""
    opts = {str(k).lower(): str(v) for k, v in raw.items()}
    metadata_url = opts.get("metadata.url")
    if not metadata_url:
        raise SkiffOptionError(
            "option metadata.url is required (the Skiff metadata service, http://host:9093)"
        )
    if opts.get("metadata.token") and opts.get("metadata.tokenfile"):
        raise SkiffOptionError("give one of the options metadata.token and metadata.tokenFile")
    strategies = [s for s in ("subscribe", "subscribepattern", "assign") if opts.get(s)]
    if len(strategies) != 1:
        raise SkiffOptionError(
            "exactly one of the options subscribe, subscribePattern and assign must be given"
            f" (got {len(strategies)})"
        )
    subscribe = pattern = assign = None
    if "subscribe" in strategies:
        subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise SkiffOptionError("option subscribe names no topic")
    elif "subscribepattern" in strategies:
        pattern = opts["subscribepattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise SkiffOptionError(f"option subscribePattern is not a valid regex: {exc}") from None
    else:
        try:
            data = json.loads(opts["assign"])
            assign = tuple((str(t), int(p)) for t, parts in data.items() for p in parts)
        except (ValueError, AttributeError, TypeError):
            raise SkiffOptionError(
                f'option assign must be JSON like {{"topicA":[0,1]}}, got {opts["assign"]!r}'
            ) from None
    starting = _offset_spec(opts, "starting", "latest" if streaming else "earliest")
    ending = _offset_spec(opts, "ending", "latest")
    if streaming is False:
        # Spark refuses these for batch queries: a batch must have a fixed, readable range.
        if starting.kind == "latest" or (
            starting.kind == "offsets" and LATEST in (starting.per_partition or {}).values()
        ):
            raise SkiffOptionError("startingOffsets cannot be latest (-1) for batch queries")
        if ending.kind == "earliest" or (
            ending.kind == "offsets" and EARLIEST in (ending.per_partition or {}).values()
        ):
            raise SkiffOptionError("endingOffsets cannot be earliest (-2) for batch queries")
    elif streaming and any(k.startswith("ending") for k in opts):
        raise SkiffOptionError("ending offsets options are for batch queries only")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise SkiffOptionError(
            f"option startingOffsetsByTimestampStrategy must be error or latest, got {strategy!r}"
        )
    isolation = opts.get("kafka.isolation.level", READ_UNCOMMITTED).strip().lower()
    if isolation not in (READ_UNCOMMITTED, READ_COMMITTED):
        raise SkiffOptionError(
            f"option kafka.isolation.level must be read_uncommitted or read_committed, got {isolation!r}"
        )
    try:
        typed = parse_typed(opts)
    except TypedOptionError as exc:
        raise SkiffOptionError(str(exc)) from None
    return SourceOptions(
        metadata_url=metadata_url,
        bucket=opts.get("bucket") or None,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        timestamp_strategy=strategy,
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        min_partitions=_positive_int(opts, "minPartitions"),
        max_records_per_partition=_positive_int(opts, "maxRecordsPerPartition"),
        include_headers=_bool(opts, "includeHeaders", False),
        max_offsets_per_trigger=_positive_int(opts, "maxOffsetsPerTrigger"),
        isolation_level=isolation,
        metadata_token=opts.get("metadata.token") or None,
        metadata_token_file=opts.get("metadata.tokenfile") or None,
        metadata_ca_file=opts.get("metadata.cafile") or None,
        typed=typed,
        push_filters=_bool(opts, "pushFilters", True),
        report_usage=_bool(opts, "metadata.reportUsage", True),
    )
