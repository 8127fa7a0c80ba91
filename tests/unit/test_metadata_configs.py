"""Pure parts of the metadata service: topic configs and names (metadata.configs), the
present-offset bitmaps of compacted chunks (metadata.bitmaps) and the idempotent
producer rules (metadata.commits.idempotence)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyroaring import BitMap
from skiff.metadata import bitmaps, configs
from skiff.metadata.commits import idempotence
from skiff.metadata.configs import ConfigError, effective_configs, topic_name_error, validate_configs

# ------------------------------------------------------------------ configs


def test_kafka_defaults() -> None:
    d = configs.DEFAULTS
    assert d["cleanup.policy"] == "delete"
    assert d["retention.ms"] == "604800000"
    assert d["retention.bytes"] == "-1"
    assert d["delete.retention.ms"] == "86400000"
    assert d["min.compaction.lag.ms"] == "0"
    assert d["max.message.bytes"] == "1048588"
    assert d["message.timestamp.type"] == "CreateTime"
    assert d["min.insync.replicas"] == "1"
    for name in ("segment.bytes", "segment.ms", "compression.type", "unclean.leader.election.enable"):
        assert name in d  # accepted for compatibility (Kafka Streams, Connect set them)


@pytest.mark.parametrize(
    ("given_", "stored"),
    [
        ({"cleanup.policy": "compact"}, {"cleanup.policy": "compact"}),
        ({"cleanup.policy": " compact , delete "}, {"cleanup.policy": "compact,delete"}),
        ({"cleanup.policy": "delete,compact,delete"}, {"cleanup.policy": "delete,compact"}),
        ({"cleanup.policy": ""}, {"cleanup.policy": ""}),  # empty list: infinite retention (Kafka 4.2)
        ({"cleanup.policy": " "}, {"cleanup.policy": ""}),
        ({"retention.ms": "-1", "retention.bytes": "+100"}, {"retention.ms": "-1", "retention.bytes": "100"}),
        ({"message.timestamp.type": "LogAppendTime"}, {"message.timestamp.type": "LogAppendTime"}),
        ({"min.cleanable.dirty.ratio": "0.25"}, {"min.cleanable.dirty.ratio": "0.25"}),
        ({"preallocate": "TRUE"}, {"preallocate": "true"}),
        ({"max.message.bytes": "0"}, {"max.message.bytes": "0"}),
        ({}, {}),
    ],
)
def test_validate_configs_normalizes(given_: dict[str, str], stored: dict[str, str]) -> None:
    assert validate_configs(given_) == stored


@pytest.mark.parametrize(
    "bad",
    [
        {"no.such.config": "1"},
        {"cleanup.policy": "compact,"},
        {"cleanup.policy": "forever"},
        {"retention.ms": "1.5"},
        {"retention.ms": "-2"},
        {"retention.ms": str(2**63)},
        {"retention.bytes": "lots"},
        {"delete.retention.ms": "-1"},
        {"min.compaction.lag.ms": "-1"},
        {"max.message.bytes": str(2**31)},
        {"max.message.bytes": "-1"},
        {"message.timestamp.type": "createtime"},
        {"min.insync.replicas": "0"},
        {"min.cleanable.dirty.ratio": "1.5"},
        {"min.cleanable.dirty.ratio": "nan"},
        {"preallocate": "yes"},
        {"segment.bytes": "10"},
        {"compression.type": "brotli"},
        {"retention.ms": None},
        {"retention.ms": 5},
    ],
)
def test_validate_configs_rejects(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigError) as e:
        validate_configs(bad)
    assert str(e.value)


def test_effective_configs() -> None:
    eff = effective_configs({"retention.ms": "5", "cleanup.policy": "compact"})
    assert eff["retention.ms"] == ("5", False)
    assert eff["cleanup.policy"] == ("compact", False)
    assert eff["retention.bytes"] == ("-1", True)
    assert set(eff) == set(configs.CONFIG_DEFS)
    assert all(d.config_type in range(1, 8) for d in configs.CONFIG_DEFS.values())


def test_config_helpers() -> None:
    assert configs.is_compacted({"cleanup.policy": "compact,delete"})
    assert not configs.is_compacted({})
    assert configs.cleanup_policies({"cleanup.policy": "compact,delete"}) == {"compact", "delete"}
    assert configs.uses_log_append_time({"message.timestamp.type": "LogAppendTime"})
    assert not configs.uses_log_append_time({})
    assert configs.config_int({}, "max.message.bytes") == 1048588
    assert configs.config_int({"retention.ms": "7"}, "retention.ms") == 7
    configs.validate_config_names(["retention.ms"])
    with pytest.raises(ConfigError):
        configs.validate_config_names(["retention.ms", "bogus"])


@pytest.mark.parametrize("name", ["a", "A-b_c.9", "a" * 249, "..a", "_", "-"])
def test_legal_topic_names(name: str) -> None:
    assert topic_name_error(name) is None


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "a b", "a/b", "ü", "a\n", "a:b", None, 5])
def test_illegal_topic_names(name: object) -> None:
    assert topic_name_error(name)


@given(st.text(min_size=1, max_size=260))
def test_topic_name_rule(name: str) -> None:
    legal = (
        len(name) <= 249
        and name not in (".", "..")
        and all(c.isascii() and (c.isalnum() or c in "._-") for c in name)
    )
    assert (topic_name_error(name) is None) == legal


# ------------------------------------------------------------------ bitmaps


@dataclass(frozen=True)
class Chunk:
    base_offset: int
    last_offset: int
    present_offsets: bytes | None = None


def _chunks_from(layout: list[tuple[int, set[int] | None]]) -> tuple[list[Chunk], set[int]]:
    """Consecutive chunks of the given lengths; a set of relative offsets means compacted."""
    chunks, present, base = [], set(), 0
    for length, keep in layout:
        rel = set(range(length)) if keep is None else {k for k in keep if k < length}
        bm = None if keep is None else bitmaps.serialize(rel)
        chunks.append(Chunk(base, base + length - 1, bm))
        present |= {base + r for r in rel}
        base += length
    return chunks, present


layouts = st.lists(
    st.integers(1, 40).flatmap(
        lambda n: st.tuples(st.just(n), st.none() | st.sets(st.integers(0, n - 1), max_size=n))
    ),
    min_size=1,
    max_size=8,
)


@given(layouts, st.integers(-5, 350), st.integers(-5, 350))
def test_count_present_is_exact(layout: list[tuple[int, set[int] | None]], a: int, b: int) -> None:
    chunks, present = _chunks_from(layout)
    lo, hi = min(a, b), max(a, b)
    assert bitmaps.count_present(chunks, lo, hi) == sum(1 for o in present if lo <= o < hi)


@given(layouts, st.integers(-5, 350))
def test_next_present_offset(layout: list[tuple[int, set[int] | None]], x: int) -> None:
    chunks, present = _chunks_from(layout)
    expected = min((o for o in present if o >= x), default=None)
    assert bitmaps.next_present_offset(chunks, x) == expected
    for c in chunks:
        in_chunk = [o for o in present if c.base_offset <= o <= c.last_offset]
        assert bitmaps.next_present_in_chunk(c, x) == min((o for o in in_chunk if o >= x), default=None)
        assert bitmaps.last_present_in_chunk(c) == max(in_chunk, default=None)


def test_bitmap_helpers() -> None:
    data = bitmaps.from_absolute(100, [100, 105, 107])
    assert list(BitMap.deserialize(data)) == [0, 5, 7]
    c = Chunk(100, 109, data)
    assert list(bitmaps.present_set(c)) == [0, 5, 7]
    assert len(bitmaps.present_set(Chunk(0, 9))) == 10
    assert bitmaps.check_chunk_bitmap(100, 109, data, 3) is None
    assert bitmaps.check_chunk_bitmap(100, 109, None, 99) is None
    assert "record_count" in (bitmaps.check_chunk_bitmap(100, 109, data, 2) or "")
    assert "past" in (bitmaps.check_chunk_bitmap(100, 106, data, 3) or "")
    assert bitmaps.check_chunk_bitmap(0, 9, b"\x00garbage", 1)
    with pytest.raises(ValueError):
        bitmaps.deserialize(b"nope")


# ------------------------------------------------------------------ idempotence


def test_increment_sequence_wraps() -> None:
    top = idempotence.INT32_MAX
    assert idempotence.increment_sequence(5, 3) == 8
    assert idempotence.increment_sequence(top, 1) == 0
    assert idempotence.increment_sequence(top - 1, 2) == 0
    assert idempotence.increment_sequence(top - 1, 5) == 3
    assert idempotence.in_sequence(top, 0) and idempotence.in_sequence(4, 5)
    assert not idempotence.in_sequence(4, 6) and not idempotence.in_sequence(top, 1)


def test_idempotence_rules() -> None:
    check, record, CB = idempotence.check, idempotence.record, idempotence.CachedBatch
    assert check(None, 0, 17, 20).error == 0  # unknown producer: any sequence (KIP-360)
    e = record(None, 2, CB(0, 4, 100, 104))
    assert check(e, 2, 0, 4).duplicate_of == CB(0, 4, 100, 104)
    assert check(e, 2, 5, 9).error == 0 and check(e, 2, 5, 9).duplicate_of is None
    assert check(e, 2, 6, 9).error == 45
    assert check(e, 2, 0, 3).error == 45  # overlapping, not the same batch
    assert check(e, 1, 5, 9).error == 47
    assert check(e, 1, 0, 4).error == 47  # a duplicate only within the same epoch
    assert check(e, 3, 5, 9).error == 45
    assert check(e, 3, 0, 0).error == 0
    e = record(e, 3, CB(0, 0, 105, 105))
    assert e.epoch == 3 and e.batches == [CB(0, 0, 105, 105)]  # a new epoch forgets the old batches
    for i in range(1, 8):
        record(e, 3, CB(i, i, 105 + i, 105 + i))
    assert [b.first_seq for b in e.batches] == [3, 4, 5, 6, 7]
    assert CB.from_json(CB(1, 2, 3, 4, 5).to_json()) == CB(1, 2, 3, 4, 5)
    assert CB.from_json([1, 2, 3, 4]) == CB(1, 2, 3, 4, -1)


@given(st.lists(st.tuples(st.integers(1, 5), st.booleans()), min_size=1, max_size=30))
def test_retries_are_always_duplicates(sends: list[tuple[int, bool]]) -> None:
    """A producer sends batches in sequence, retrying some right away: each retry of one
    of the last five is a duplicate with the original offset, never stored twice."""
    entry: idempotence.ProducerEntry | None = None
    seq, offset = 0, 0
    history: list[idempotence.CachedBatch] = []
    for n, retry in sends:
        last = idempotence.increment_sequence(seq, n - 1)
        v = idempotence.check(entry, 0, seq, last)
        assert v.error == 0 and v.duplicate_of is None
        b = idempotence.CachedBatch(seq, last, offset, offset + n - 1)
        entry = idempotence.record(entry, 0, b)
        history.append(b)
        offset += n
        seq = idempotence.increment_sequence(last, 1)
        if retry:
            old = history[-min(len(history), 5)]
            v = idempotence.check(entry, 0, old.first_seq, old.last_seq)
            assert v.duplicate_of == old
