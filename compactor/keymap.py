"""The compactor's key map: 16-byte MD5 key hash -> latest offset, in a fixed memory budget.

Kafka's cleaner keeps a `SkimpyOffsetMap` (a flat byte buffer, open addressing, MD5
hashes, load factor `log.cleaner.io.buffer.load.factor` = 0.9); this is the same idea in
the standard library only (no NumPy in the runtime dependencies):

    slot i:  hash_lo[i] (u64) | hash_hi[i] (u64) | value[i] (u32)       20 bytes a slot

The hash is the key's MD5 digest read as two little-endian u64 halves; the home slot is
`hash_lo % capacity`, collisions probe linearly. The value is the offset relative to the
map's `base_offset` (the partition's first dirty offset), so 32 bits suffice;
`EMPTY_SLOT` (2**32 - 1) marks a free slot. With the default 128 MiB budget the map has
6.7 M slots and takes 6.04 M distinct keys before it reports full (a Python dict would
cost about 100 bytes an entry).

Full: as in Kafka, once `size` reached `max_keys` the next `put` (of any key, new or not)
is refused and the caller stops there: the map then covers the offsets
`[base_offset, latest_offset]`, and the cleaner checkpoints at `latest_offset + 1`. An
offset beyond `base_offset + MAX_RELATIVE_OFFSET` is refused the same way.

`put` keeps the larger offset when a key is already present, so the map holds each key's
latest offset whatever order the records arrive in. Collisions of MD5 are ignored, as in
Kafka (two keys with one digest would be treated as one).
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Iterator

from pyroaring import BitMap

SLOT_BYTES = 20
DEFAULT_BUDGET_BYTES = 128 * 1024 * 1024
DEFAULT_LOAD_FACTOR = 0.9  # Kafka's log.cleaner.io.buffer.load.factor
EMPTY_SLOT = 0xFFFF_FFFF
MAX_RELATIVE_OFFSET = EMPTY_SLOT - 1
_MASK64 = (1 << 64) - 1

md5 = hashlib.md5


def key_hash(key: bytes | bytearray | memoryview) -> bytes:
    """The 16-byte MD5 digest the map is keyed by (Kafka's default cleaner hash)."""
    return md5(key).digest()


class KeyMap:
    """Open-addressing map of MD5 digest -> latest offset (see the module docstring)."""

    def __init__(
        self, budget_bytes: int = DEFAULT_BUDGET_BYTES, *, load_factor: float = DEFAULT_LOAD_FACTOR
    ) -> None:
        if not 0.0 < load_factor <= 0.95:
            raise ValueError(f"load factor {load_factor} must be in (0, 0.95]")
        capacity = budget_bytes // SLOT_BYTES
        if capacity < 2:
            raise ValueError(f"a key map budget of {budget_bytes} bytes holds no key")
        self.capacity = capacity
        self.max_keys = max(1, int(capacity * load_factor))
        self._lo = array("Q", bytes(8 * capacity))
        self._hi = array("Q", bytes(8 * capacity))
        self._val = array("I", b"\xff" * (4 * capacity))
        self.base_offset = 0
        self.size = 0
        self.latest_offset = -1  # the last offset put (Kafka's SkimpyOffsetMap.latestOffset)

    @property
    def memory_bytes(self) -> int:
        """Bytes held by the table (what the budget bounds)."""
        return self.capacity * SLOT_BYTES

    @property
    def full(self) -> bool:
        return self.size >= self.max_keys

    def reset(self, base_offset: int) -> None:
        """Empty the map for a new partition whose offsets start at `base_offset`."""
        if self.size:
            self._val[:] = array("I", b"\xff" * (4 * self.capacity))
        self.base_offset = base_offset
        self.size = 0
        self.latest_offset = base_offset - 1

    def put(self, digest: bytes, offset: int) -> bool:
        """Record `offset` for the key; False (nothing changed) when the map is full or the
        offset lies beyond what it can represent: the caller stops at this offset."""
        if self.size >= self.max_keys:
            return False
        rel = offset - self.base_offset
        if rel < 0 or rel > MAX_RELATIVE_OFFSET:
            if rel < 0:
                raise ValueError(f"offset {offset} is below the map's base offset {self.base_offset}")
            return False
        x = int.from_bytes(digest, "little")
        lo = x & _MASK64
        hi = x >> 64
        cap = self.capacity
        slot = lo % cap
        val = self._val
        los = self._lo
        his = self._hi
        while True:
            v = val[slot]
            if v == EMPTY_SLOT:
                los[slot] = lo
                his[slot] = hi
                val[slot] = rel
                self.size += 1
                break
            if los[slot] == lo and his[slot] == hi:
                if rel > v:
                    val[slot] = rel
                break
            slot += 1
            if slot == cap:
                slot = 0
        if offset > self.latest_offset:
            self.latest_offset = offset
        return True

    def get(self, digest: bytes) -> int:
        """The key's latest offset, or -1 if it is not in the map."""
        x = int.from_bytes(digest, "little")
        lo = x & _MASK64
        hi = x >> 64
        cap = self.capacity
        slot = lo % cap
        val = self._val
        los = self._lo
        his = self._hi
        while True:
            v = val[slot]
            if v == EMPTY_SLOT:
                return -1
            if los[slot] == lo and his[slot] == hi:
                return self.base_offset + v
            slot += 1
            if slot == cap:
                slot = 0

    def latest_offsets(self) -> BitMap:
        """The set of values (each key's latest offset), relative to `base_offset`: the
        records of the covered range that survive a clean."""
        bm = BitMap(self._val)  # pyroaring reads an array('I') through the buffer protocol
        bm.discard(EMPTY_SLOT)
        return bm

    def items(self) -> Iterator[tuple[bytes, int]]:
        """(digest, offset) of every key, in slot order (tests and debugging)."""
        for slot in range(self.capacity):
            v = self._val[slot]
            if v != EMPTY_SLOT:
                x = self._lo[slot] | (self._hi[slot] << 64)
                yield x.to_bytes(16, "little"), self.base_offset + v
