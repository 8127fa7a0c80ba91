"""Kafka topic configs: names, defaults, validation. Pure (no I/O).

Every topic-level config Kafka 3.x knows is accepted, with Kafka's name, type, default and
range, so that tools that create topics with configs Skiff ignores (Kafka Streams sets
`segment.bytes`/`segment.ms` on its internal topics, Connect sets `min.insync.replicas`)
keep working. The ones Skiff acts on are marked `effective=True`; the rest are stored and
described but have no effect (there are no segments, replicas or local disks).

`validate_configs(overrides)` returns the normalized overrides (the form stored on the
topic) or raises `ConfigError`; `effective_configs(overrides)` gives every config with its
value and whether it is the default, for DescribeConfigs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

# DescribeConfigs config_type values (Kafka's ConfigType enum in DescribeConfigs v3+).
TYPE_BOOLEAN = 1
TYPE_STRING = 2
TYPE_INT = 3
TYPE_SHORT = 4
TYPE_LONG = 5
TYPE_DOUBLE = 6
TYPE_LIST = 7

CLEANUP_POLICY = "cleanup.policy"
COMPRESSION_TYPE = "compression.type"
DELETE_RETENTION_MS = "delete.retention.ms"
MAX_COMPACTION_LAG_MS = "max.compaction.lag.ms"
MAX_MESSAGE_BYTES = "max.message.bytes"
MESSAGE_TIMESTAMP_TYPE = "message.timestamp.type"
MIN_CLEANABLE_DIRTY_RATIO = "min.cleanable.dirty.ratio"
MIN_COMPACTION_LAG_MS = "min.compaction.lag.ms"
MIN_INSYNC_REPLICAS = "min.insync.replicas"
RETENTION_BYTES = "retention.bytes"
RETENTION_MS = "retention.ms"
# Broker-side schema validation, as Confluent Server names its topic configs
# (the agent's `agent.schema_validation` acts on them).
KEY_SCHEMA_VALIDATION = "confluent.key.schema.validation"
VALUE_SCHEMA_VALIDATION = "confluent.value.schema.validation"
KEY_SUBJECT_NAME_STRATEGY = "confluent.key.subject.name.strategy"
VALUE_SUBJECT_NAME_STRATEGY = "confluent.value.subject.name.strategy"

_STRATEGY_PACKAGE = "io.confluent.kafka.serializers.subject."
TOPIC_NAME_STRATEGY = _STRATEGY_PACKAGE + "TopicNameStrategy"
RECORD_NAME_STRATEGY = _STRATEGY_PACKAGE + "RecordNameStrategy"
TOPIC_RECORD_NAME_STRATEGY = _STRATEGY_PACKAGE + "TopicRecordNameStrategy"
SUBJECT_NAME_STRATEGIES = (TOPIC_NAME_STRATEGY, RECORD_NAME_STRATEGY, TOPIC_RECORD_NAME_STRATEGY)

# Topics as Iceberg tables (compactor.tables): Skiff's own configs, not Kafka's.
TABLE_ENABLED = "skiff.table.enabled"
TABLE_NAME = "skiff.table.name"
TABLE_PARTITION_SPEC = "skiff.table.partition.spec"
TABLE_COMMIT_INTERVAL_MS = "skiff.table.commit.interval.ms"
TABLE_SNAPSHOT_RETENTION_MS = "skiff.table.snapshot.retention.ms"
TABLE_TRANSFORMS = ("identity", "year", "month", "day", "hour")
TABLE_COLUMNS = ("partition", "offset", "timestamp", "timestampType", "key", "value")

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"


class ConfigError(ValueError):
    """An unknown config name or an invalid value (Kafka's INVALID_CONFIG)."""


@dataclass(frozen=True)
class ConfigDef:
    name: str
    config_type: int  # TYPE_*
    default: str
    normalize: Callable[[str], str]  # validates and returns the stored form; raises ValueError
    effective: bool  # whether Skiff acts on it
    doc: str = ""


def _long(lo: int = INT64_MIN, hi: int = INT64_MAX) -> Callable[[str], str]:
    def norm(v: str) -> str:
        s = v.strip()
        if not re.fullmatch(r"[+-]?[0-9]+", s):
            raise ValueError(f"{v!r} is not an integer")
        n = int(s)
        if not lo <= n <= hi:
            raise ValueError(f"{n} is out of range [{lo}, {hi}]")
        return str(n)

    return norm


def _int(lo: int = INT32_MIN, hi: int = INT32_MAX) -> Callable[[str], str]:
    return _long(max(lo, INT32_MIN), min(hi, INT32_MAX))


def _double(lo: float, hi: float) -> Callable[[str], str]:
    def norm(v: str) -> str:
        try:
            x = float(v.strip())
        except ValueError:
            raise ValueError(f"{v!r} is not a number") from None
        if not lo <= x <= hi:  # also rejects NaN
            raise ValueError(f"{x} is out of range [{lo}, {hi}]")
        return v.strip()

    return norm


def _bool(v: str) -> str:
    s = v.strip().lower()
    if s not in ("true", "false"):
        raise ValueError(f"{v!r} is not a boolean (true|false)")
    return s


def _one_of(*choices: str) -> Callable[[str], str]:
    def norm(v: str) -> str:
        s = v.strip()
        if s not in choices:
            raise ValueError(f"{v!r} is not one of {', '.join(choices)}")
        return s

    return norm


def _cleanup_policy(v: str) -> str:
    if not v.strip():
        return ""  # the empty list: no cleanup at all, infinite retention (Kafka 4.2, KIP-1161)
    items = [p.strip() for p in v.split(",")]
    if any(p not in ("delete", "compact") for p in items):
        raise ValueError(f"{v!r} must be a comma-separated list of delete, compact")
    # Kafka keeps the list as given; we drop repeats and keep the order.
    return ",".join(dict.fromkeys(items))


def _subject_name_strategy(v: str) -> str:
    """A strategy's full class name, also given by its short name (`RecordNameStrategy`)."""
    s = v.strip()
    for full in SUBJECT_NAME_STRATEGIES:
        if s in (full, full.removeprefix(_STRATEGY_PACKAGE)):
            return full
    raise ValueError(f"{v!r} is not one of {', '.join(SUBJECT_NAME_STRATEGIES)} (or their short names)")


def _table_name(v: str) -> str:
    """Empty (the topic's name) or an Iceberg table name of the same characters as a topic's."""
    s = v.strip()
    if s and not re.fullmatch(r"[a-zA-Z0-9_-]{1,249}", s):
        raise ValueError(f"{v!r} is not a table name (letters, digits, '_' and '-', at most 249)")
    return s


def parse_partition_spec(v: str) -> list[tuple[str, str]]:
    """`day(timestamp), identity(partition)` -> [(transform, column)]; ValueError if invalid."""
    out: list[tuple[str, str]] = []
    for item in (p.strip() for p in v.split(",") if p.strip()):
        m = re.fullmatch(r"([a-z]+)\(\s*([A-Za-z]+)\s*\)", item)
        if m is None or m.group(1) not in TABLE_TRANSFORMS or m.group(2) not in TABLE_COLUMNS:
            raise ValueError(
                f"{item!r} is not transform(column) with a transform of {', '.join(TABLE_TRANSFORMS)}"
                f" and a column of {', '.join(TABLE_COLUMNS)}"
            )
        out.append((m.group(1), m.group(2)))
    return out


def _partition_spec(v: str) -> str:
    return ", ".join(f"{t}({c})" for t, c in parse_partition_spec(v))


def _any_string(v: str) -> str:
    return v


def _replica_list(v: str) -> str:
    s = v.strip()
    if s in ("", "*") or re.fullmatch(r"\s*[0-9]+\s*:\s*[0-9]+\s*(,\s*[0-9]+\s*:\s*[0-9]+\s*)*", s):
        return s
    raise ValueError(f"{v!r} must be '*' or a list of partition:broker pairs")


_L = INT64_MAX
CONFIG_DEFS: dict[str, ConfigDef] = {
    d.name: d
    for d in [
        ConfigDef(
            CLEANUP_POLICY,
            TYPE_LIST,
            "delete",
            _cleanup_policy,
            True,
            "delete: old data is removed by retention; compact: only the latest record per key is kept",
        ),
        ConfigDef(
            COMPRESSION_TYPE,
            TYPE_STRING,
            "producer",
            _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
            False,
        ),
        ConfigDef(
            DELETE_RETENTION_MS,
            TYPE_LONG,
            "86400000",
            _long(0),
            True,
            "how long tombstones are kept on compacted topics",
        ),
        ConfigDef(
            KEY_SCHEMA_VALIDATION,
            TYPE_BOOLEAN,
            "false",
            _bool,
            True,
            "true: every record's key must carry a schema id registered under the key's subject",
        ),
        ConfigDef(
            KEY_SUBJECT_NAME_STRATEGY,
            TYPE_STRING,
            TOPIC_NAME_STRATEGY,
            _subject_name_strategy,
            True,
            "the key's subject: TopicNameStrategy, RecordNameStrategy or TopicRecordNameStrategy",
        ),
        ConfigDef(
            VALUE_SCHEMA_VALIDATION,
            TYPE_BOOLEAN,
            "false",
            _bool,
            True,
            "true: every record's value must carry a schema id registered under the value's subject",
        ),
        ConfigDef(
            VALUE_SUBJECT_NAME_STRATEGY,
            TYPE_STRING,
            TOPIC_NAME_STRATEGY,
            _subject_name_strategy,
            True,
            "the value's subject: TopicNameStrategy, RecordNameStrategy or TopicRecordNameStrategy",
        ),
        ConfigDef(
            TABLE_ENABLED,
            TYPE_BOOLEAN,
            "false",
            _bool,
            True,
            "true: the maintenance pass keeps an Iceberg table of the topic's committed records",
        ),
        ConfigDef(
            TABLE_NAME, TYPE_STRING, "", _table_name, True, "the Iceberg table's name; empty: the topic's"
        ),
        ConfigDef(
            TABLE_PARTITION_SPEC,
            TYPE_STRING,
            "",
            _partition_spec,
            True,
            "the table's Iceberg partition spec, e.g. day(timestamp); empty: unpartitioned",
        ),
        ConfigDef(
            TABLE_COMMIT_INTERVAL_MS,
            TYPE_LONG,
            "60000",
            _long(0),
            True,
            "a maintenance loop commits to the table at most this often (a single pass commits at once)",
        ),
        ConfigDef(
            TABLE_SNAPSHOT_RETENTION_MS,
            TYPE_LONG,
            "432000000",
            _long(0),
            True,
            "the table's snapshots older than this are expired (never the current one), then their"
            " files no live snapshot names are deleted",
        ),
        ConfigDef("file.delete.delay.ms", TYPE_LONG, "60000", _long(0), False),
        ConfigDef("flush.messages", TYPE_LONG, str(_L), _long(1), False),
        ConfigDef("flush.ms", TYPE_LONG, str(_L), _long(0), False),
        ConfigDef("follower.replication.throttled.replicas", TYPE_LIST, "", _replica_list, False),
        ConfigDef("index.interval.bytes", TYPE_INT, "4096", _int(0), False),
        ConfigDef("leader.replication.throttled.replicas", TYPE_LIST, "", _replica_list, False),
        ConfigDef("local.retention.bytes", TYPE_LONG, "-2", _long(-2), False),
        ConfigDef("local.retention.ms", TYPE_LONG, "-2", _long(-2), False),
        ConfigDef(MAX_COMPACTION_LAG_MS, TYPE_LONG, str(_L), _long(1), True),
        ConfigDef(
            MAX_MESSAGE_BYTES, TYPE_INT, "1048588", _int(0), True, "largest record batch accepted, in bytes"
        ),
        ConfigDef("message.downconversion.enable", TYPE_BOOLEAN, "true", _bool, False),
        ConfigDef("message.format.version", TYPE_STRING, "3.0-IV1", _any_string, False),
        ConfigDef("message.timestamp.after.max.ms", TYPE_LONG, str(_L), _long(0), False),
        ConfigDef("message.timestamp.before.max.ms", TYPE_LONG, str(_L), _long(0), False),
        ConfigDef("message.timestamp.difference.max.ms", TYPE_LONG, str(_L), _long(0), False),
        ConfigDef(
            MESSAGE_TIMESTAMP_TYPE,
            TYPE_STRING,
            CREATE_TIME,
            _one_of(CREATE_TIME, LOG_APPEND_TIME),
            True,
            "LogAppendTime: the commit time replaces the producer's timestamps",
        ),
        ConfigDef(MIN_CLEANABLE_DIRTY_RATIO, TYPE_DOUBLE, "0.5", _double(0.0, 1.0), True),
        ConfigDef(MIN_COMPACTION_LAG_MS, TYPE_LONG, "0", _long(0), True),
        ConfigDef(MIN_INSYNC_REPLICAS, TYPE_INT, "1", _int(1), False),
        ConfigDef("preallocate", TYPE_BOOLEAN, "false", _bool, False),
        ConfigDef("remote.storage.enable", TYPE_BOOLEAN, "false", _bool, False),
        ConfigDef(RETENTION_BYTES, TYPE_LONG, "-1", _long(), True, "per-partition size limit; -1: none"),
        ConfigDef(RETENTION_MS, TYPE_LONG, "604800000", _long(-1), True, "age limit; -1: none"),
        ConfigDef("segment.bytes", TYPE_INT, "1073741824", _int(14), False),
        ConfigDef("segment.index.bytes", TYPE_INT, "10485760", _int(4), False),
        ConfigDef("segment.jitter.ms", TYPE_LONG, "0", _long(0), False),
        ConfigDef("segment.ms", TYPE_LONG, "604800000", _long(1), False),
        ConfigDef("unclean.leader.election.enable", TYPE_BOOLEAN, "false", _bool, False),
    ]
}

DEFAULTS: dict[str, str] = {name: d.default for name, d in CONFIG_DEFS.items()}


def validate_config(name: str, value: object) -> str:
    """The normalized stored form of one config value; ConfigError if unknown or invalid."""
    d = CONFIG_DEFS.get(name)
    if d is None:
        raise ConfigError(f"Unknown topic config name: {name}")
    if not isinstance(value, str):
        raise ConfigError(f"Invalid value {value!r} for configuration {name}: a string is required")
    try:
        return d.normalize(value)
    except ValueError as e:
        raise ConfigError(f"Invalid value {value} for configuration {name}: {e}") from None


def validate_config_names(names: Iterable[str]) -> None:
    for name in names:
        if name not in CONFIG_DEFS:
            raise ConfigError(f"Unknown topic config name: {name}")


def validate_configs(overrides: Mapping[str, object]) -> dict[str, str]:
    """Validate explicit topic configs; returns them normalized (what the topic stores)."""
    return {name: validate_config(name, value) for name, value in overrides.items()}


def effective_configs(overrides: Mapping[str, str]) -> dict[str, tuple[str, bool]]:
    """Every known config -> (value, is_default), as DescribeConfigs reports them."""
    out: dict[str, tuple[str, bool]] = {}
    for name, d in CONFIG_DEFS.items():
        if name in overrides:
            out[name] = (overrides[name], False)
        else:
            out[name] = (d.default, True)
    return out


def config_value(overrides: Mapping[str, str], name: str) -> str:
    v = overrides.get(name)
    return v if v is not None else CONFIG_DEFS[name].default


def config_int(overrides: Mapping[str, str], name: str) -> int:
    return int(config_value(overrides, name))


def cleanup_policies(overrides: Mapping[str, str]) -> frozenset[str]:
    return frozenset(p.strip() for p in config_value(overrides, CLEANUP_POLICY).split(",") if p.strip())


def is_compacted(overrides: Mapping[str, str]) -> bool:
    return "compact" in cleanup_policies(overrides)


def table_enabled(overrides: Mapping[str, str]) -> bool:
    return config_value(overrides, TABLE_ENABLED) == "true"


def uses_log_append_time(overrides: Mapping[str, str]) -> bool:
    return config_value(overrides, MESSAGE_TIMESTAMP_TYPE) == LOG_APPEND_TIME


# --- topic names ------------------------------------------------------------------------

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


def topic_name_error(name: object) -> str | None:
    """Why `name` is not a legal Kafka topic name, or None if it is (Kafka's Topic.validate)."""
    if not isinstance(name, str) or not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, topic name: {name}"
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        return (
            f"Topic name {name!r} is illegal, it contains a character other than ASCII alphanumerics, "
            "'.', '_' and '-'"
        )
    return None
