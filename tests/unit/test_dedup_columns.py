"""The vectorised pieces of the dedup path against their one-at-a-time references:
NumPy MD5 vs hashlib, the column scan vs `scan_records`, `KeyMap.put_many`/`get_many`
vs a dict model with Kafka's one-record-at-a-time semantics (including the map filling
in the middle of a batch, where the cleaner checkpoints)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from skiff.compactor.keymap import SLOT_BYTES, KeyMap, digest_halves, key_hash
from skiff.compactor.md5_vec import md5_halves
from skiff.compactor.rebuild import scan_records
from skiff.compactor.record_scan import LOCKSTEP_MIN_BATCHES, PAD_BYTES, batch_payload, scan_batches
from skiff.fileformat.batch_header import Compression, CorruptBatchError
from skiff.fileformat.chunk_reader import ChunkLocation, iter_chunk_batches
from skiff.fileformat.record_build import build_batch
from skiff.fileformat.record_decode import Record

# ------------------------------------------------------------------ MD5


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=130), max_size=60))
def test_md5_halves_match_hashlib(keys: list[bytes]) -> None:
    buf = np.frombuffer(b"".join(keys) + bytes(PAD_BYTES), np.uint8)
    lengths = np.array([len(k) for k in keys], np.int64)
    starts = np.cumsum(lengths) - lengths
    lo, hi = md5_halves(buf, starts, lengths)
    want_lo, want_hi = digest_halves([hashlib.md5(k).digest() for k in keys])
    assert lo.tolist() == want_lo.tolist()
    assert hi.tolist() == want_hi.tolist()


# ------------------------------------------------------------------ the column scan

record_st = st.tuples(
    st.none() | st.binary(max_size=70),  # key
    st.none() | st.binary(max_size=300),  # value (None: tombstone)
    st.integers(-(2**40), 2**40),  # timestamp delta
    st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2),
)


def _chunk(batches: list[list[tuple]], codec: Compression) -> tuple[ChunkLocation, bytes]:
    encoded = []
    offset = 0
    for recs in batches:
        rs = [Record(i, 1_000_000 + ts, k, v, hs) for i, (k, v, ts, hs) in enumerate(recs)]
        encoded.append(build_batch(rs, base_offset=0, compression=codec))
        offset += len(recs)
    data = b"".join(encoded)
    loc = ChunkLocation(1, "f", 0, len(data), 0, offset - 1, offset, 0)
    return loc, data


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(record_st, min_size=1, max_size=12), min_size=1, max_size=2 * LOCKSTEP_MIN_BATCHES + 3),
    st.sampled_from([Compression.NONE, Compression.NONE, Compression.LZ4, Compression.ZSTD]),
)
def test_scan_batches_matches_scan_records(batches: list[list[tuple]], codec: Compression) -> None:
    loc, data = _chunk(batches, codec)
    cbs = list(iter_chunk_batches(loc, data))
    cols = scan_batches(data, cbs)
    want = []
    payloads = []
    for cb in cbs:
        payload = bytes(batch_payload(data, cb, 1 << 30))
        base = sum(len(p) for p in payloads)
        payloads.append(payload)
        for r in scan_records(payload, cb.header.records_count, cb.position):
            want.append(
                (
                    base + r.start,
                    base + r.end,
                    base + r.ts_end,
                    r.offset_delta,
                    r.timestamp_delta,
                    r.key,
                    r.tombstone,
                )
            )
    assert cols.payload == b"".join(payloads)
    got = []
    for i in range(cols.count):
        kl = int(cols.key_len[i])
        ks = int(cols.key_start[i])
        key = None if kl < 0 else cols.key_buf[ks : ks + kl].tobytes()
        got.append(
            (
                int(cols.start[i]),
                int(cols.end[i]),
                int(cols.ts_end[i]),
                int(cols.offset_delta[i]),
                int(cols.timestamp_delta[i]),
                key,
                bool(cols.tombstone[i]),
            )
        )
    assert got == want
    assert np.diff(cols.batch_first).tolist() == [len(b) for b in batches]


def test_many_batches_use_the_lockstep_walk_and_long_ones_the_python_walk() -> None:
    """40 batches of 3 records (lockstep) and 2 of 500 (their tail walked in Python)."""
    batches = [[(b"k%d" % i, b"v" * i, i, [])] * 3 for i in range(40)]
    batches += [[(b"long%d" % j, b"x" * (j % 90), j, []) for j in range(500)] for _ in range(2)]
    loc, data = _chunk(batches, Compression.NONE)
    cols = scan_batches(data, list(iter_chunk_batches(loc, data)))
    assert cols.count == 40 * 3 + 1000
    assert cols.offset_delta[-500:].tolist() == list(range(500))
    kl, ks = int(cols.key_len[-1]), int(cols.key_start[-1])
    assert cols.key_buf[ks : ks + kl].tobytes() == b"long499"


@pytest.mark.parametrize("damage", ["record_length", "key_length", "count", "truncate"])
def test_corrupt_records_raise_the_scalar_scans_error(damage: str) -> None:
    batches = [[(b"key-%d" % i, b"value", 0, [])] * 4 for i in range(2 * LOCKSTEP_MIN_BATCHES)]
    loc, data = _chunk(batches, Compression.NONE)
    buf = bytearray(data)
    cbs = list(iter_chunk_batches(loc, data))
    victim = cbs[LOCKSTEP_MIN_BATCHES]
    first_record = victim.position + 61
    if damage == "record_length":
        buf[first_record] = 0x7E  # 63 bytes: past the batch's records
    elif damage == "key_length":
        buf[first_record + 4] = 0x7E  # key of 63 bytes inside a 20-byte record
    elif damage == "count":
        buf[victim.position + 57 : victim.position + 61] = (5).to_bytes(4, "big")
    else:
        buf[first_record] = 0x02  # a record of 1 byte
    damaged = bytes(buf)
    with pytest.raises(CorruptBatchError) as info:
        scan_batches(damaged, list(iter_chunk_batches(loc, damaged)))
    assert info.value.position == victim.position


# ------------------------------------------------------------------ the key map in batches


def _model_put(
    model: dict[bytes, int], digests: list[bytes], offsets: list[int], max_keys: int, base: int
) -> int:
    """Kafka's SkimpyOffsetMap.put, one record at a time: how many go in."""
    for i, (d, o) in enumerate(zip(digests, offsets, strict=True)):
        if len(model) >= max_keys or o - base > 0xFFFF_FFFE:
            return i
        model[d] = max(model.get(d, -1), o)
    return len(digests)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 5)), max_size=80), max_size=6),
    st.integers(2, 120),
    st.sampled_from([0.5, 0.9, 0.95]),
)
def test_put_many_matches_one_at_a_time_until_full(
    batches: list[list[tuple[int, int]]], slots: int, load: float
) -> None:
    """Batches with repeated keys, offsets rising across the batches; the map fills in
    the middle of a batch: put_many accepts exactly the prefix the one-at-a-time map
    would, so the cleaner's checkpoint (the first record not accepted) is the same."""
    m = KeyMap(SLOT_BYTES * slots, load_factor=load)
    base = 1000
    m.reset(base)
    model: dict[bytes, int] = {}
    offset = base
    stopped = False
    for ops in batches:
        digests = [key_hash(b"key-%d" % k) for k, _ in ops]
        offsets = []
        for _, gap in ops:
            offsets.append(offset)
            offset += 1 + gap
        lo, hi = digest_halves(digests)
        got = m.put_many(lo, hi, np.array(offsets, np.int64))
        want = _model_put(model, digests, offsets, m.max_keys, base)
        assert got == want
        if got < len(ops):
            stopped = True
            break
    assert m.size == len(model)
    assert dict(m.items()) == model
    probe = [key_hash(b"key-%d" % k) for k in range(70)]
    lo, hi = digest_halves(probe)
    assert m.get_many(lo, hi).tolist() == [model.get(d, -1) for d in probe]
    assert set(m.latest_offsets()) == {o - base for o in model.values()}
    if stopped:
        assert m.full


def test_full_map_checkpoint_in_a_large_batch() -> None:
    """A 20,000-slot map (18,000 keys) fed 50,000 records of 30,000 keys in two batches:
    the vectorised rounds and the exact cut agree with the dict model."""
    rng = np.random.default_rng(7)
    m = KeyMap(SLOT_BYTES * 20_000)
    m.reset(0)
    keys = rng.integers(0, 30_000, 50_000)
    digests = [key_hash(b"%d" % k) for k in keys.tolist()]
    model: dict[bytes, int] = {}
    offsets = np.arange(50_000, dtype=np.int64) * 2
    total = 0
    for a, b in [(0, 20_000), (20_000, 50_000)]:
        lo, hi = digest_halves(digests[a:b])
        got = m.put_many(lo, hi, offsets[a:b])
        want = _model_put(model, digests[a:b], offsets[a:b].tolist(), m.max_keys, 0)
        assert got == want
        total += got
    assert total < 50_000 and m.size == m.max_keys == len(model)
    assert dict(m.items()) == model
    lo, hi = digest_halves(digests)
    assert m.get_many(lo, hi).tolist() == [model.get(d, -1) for d in digests]


def test_put_many_refuses_offsets_below_the_base() -> None:
    m = KeyMap(4096)
    m.reset(100)
    lo, hi = digest_halves([key_hash(b"a")])
    with pytest.raises(ValueError):
        m.put_many(lo, hi, np.array([99], np.int64))


def test_default_map_takes_five_million_distinct_keys() -> None:
    """The budget promise, with real inserts: 5 M distinct keys in 128 MiB."""
    m = KeyMap()
    m.reset(0)
    rng = np.random.default_rng(3)
    n = 5_000_000
    accepted = 0
    for start in range(0, n, 1_000_000):
        lo = rng.integers(0, 2**64, 1_000_000, dtype=np.uint64, endpoint=False)
        hi = rng.integers(0, 2**64, 1_000_000, dtype=np.uint64, endpoint=False)
        accepted += m.put_many(lo, hi, np.arange(start, start + 1_000_000, dtype=np.int64))
    assert accepted == n and m.size == n and not m.full
    assert m.memory_bytes <= 128 * 1024 * 1024
