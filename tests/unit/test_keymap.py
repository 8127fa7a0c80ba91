"""The compactor's key map against a dict: latest offset per key, full at the budget."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from skiff.compactor.keymap import EMPTY_SLOT, SLOT_BYTES, KeyMap, key_hash


def test_default_budget_holds_five_million_keys_in_128_mib() -> None:
    m = KeyMap()
    assert m.memory_bytes <= 128 * 1024 * 1024
    assert m.max_keys >= 5_000_000
    assert m.capacity * SLOT_BYTES == m.memory_bytes


def test_put_get_latest_offset_and_values() -> None:
    m = KeyMap(4096)
    m.reset(100)
    assert m.put(key_hash(b"a"), 100)
    assert m.put(key_hash(b"b"), 101)
    assert m.put(key_hash(b"a"), 105)
    assert m.put(key_hash(b"a"), 103)  # an older offset never replaces a newer one
    assert m.get(key_hash(b"a")) == 105
    assert m.get(key_hash(b"b")) == 101
    assert m.get(key_hash(b"c")) == -1
    assert m.size == 2
    assert m.latest_offset == 105
    assert sorted(m.latest_offsets()) == [1, 5]


def test_full_map_refuses_the_next_put_and_reports_the_offset_reached() -> None:
    m = KeyMap(20 * 10, load_factor=0.5)  # 10 slots, 5 keys
    m.reset(0)
    for i in range(5):
        assert m.put(key_hash(b"k%d" % i), i)
    assert m.full
    # Kafka stops at the next record whatever its key, even one already in the map
    assert not m.put(key_hash(b"k0"), 5)
    assert not m.put(key_hash(b"new"), 5)
    assert m.latest_offset == 4
    assert m.get(key_hash(b"k0")) == 0


def test_offsets_beyond_32_bits_of_the_base_are_refused_like_full() -> None:
    m = KeyMap(4096)
    m.reset(10)
    assert m.put(key_hash(b"x"), 10 + EMPTY_SLOT - 1)
    assert not m.put(key_hash(b"y"), 10 + EMPTY_SLOT)


def test_reset_empties_the_map() -> None:
    m = KeyMap(4096)
    m.reset(0)
    m.put(key_hash(b"x"), 3)
    m.reset(50)
    assert m.size == 0 and m.get(key_hash(b"x")) == -1 and m.latest_offset == 49
    assert len(m.latest_offsets()) == 0


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(0, 1000)), max_size=300),
    st.integers(1, 60),
    st.integers(0, 1 << 40),
)
def test_matches_a_dict_until_full(ops: list[tuple[int, int]], slots: int, base: int) -> None:
    m = KeyMap(SLOT_BYTES * (slots + 1), load_factor=0.9)
    m.reset(base)
    model: dict[bytes, int] = {}
    stopped = False
    for key_id, rel in ops:
        digest = key_hash(b"key-%d" % key_id)
        accepted = m.put(digest, base + rel)
        # the map refuses exactly when it holds max_keys keys
        assert accepted == (len(model) < m.max_keys)
        if not accepted:
            stopped = True
            break
        model[digest] = max(model.get(digest, -1), base + rel)
    assert m.size == len(model)
    for digest, offset in model.items():
        assert m.get(digest) == offset
    assert dict(m.items()) == model
    # a set: two keys never share an offset in a real log
    assert set(m.latest_offsets()) == {o - base for o in model.values()}
    if model:
        assert m.latest_offset == max(model.values())
    assert stopped or len(model) <= m.max_keys
