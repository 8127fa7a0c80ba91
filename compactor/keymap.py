"""The compactor's key map: 16-byte MD5 key hash -> latest offset, in a fixed memory budget.

Kafka's cleaner keeps a `SkimpyOffsetMap` (a flat byte buffer, open addressing, MD5
hashes, load factor `log.cleaner.io.buffer.load.factor` = 0.9); this is the same idea
in three NumPy columns:

    slot i:  lo[i] (u64) | hi[i] (u64) | value[i] (u32)       20 bytes a slot

The hash is the key's MD5 digest read as two little-endian u64 halves; the home slot is
`lo % capacity`, collisions probe linearly. The value is the offset relative to the
map's `base_offset` (the partition's first dirty offset), so 32 bits suffice;
`EMPTY_SLOT` (2**32 - 1) marks a free slot. With the default 128 MiB budget the map has
6.7 M slots and takes 6.04 M distinct keys before it reports full (a Python dict would
cost about 100 bytes an entry).

Batches (`put_many`, `get_slots`): the keys of a whole chunk are probed together, in
rounds. Each round every pending key looks at its current slot: the same key (update the
value to the larger offset: `np.maximum.at`, so duplicates in one batch are fine), an
empty slot (claim it), or another key (move to the next slot). Keys of one batch that
claim the same empty slot are resolved by writing each claimant's batch index into the
slot's value and reading it back: the one that reads its own index won, writes its key
and offset, and the others stay pending at that slot for the next round (where they find
either their own key, a duplicate that won, or a foreign key and move on). Slots only go
from empty to occupied, so every key ends in the first slot of its probe sequence that
was free or held it, as one-at-a-time insertion would put it. Once few keys are left
pending (the long probe sequences of a full table), they finish one at a time.

Full: as in Kafka, once `size` reached `max_keys` the next put (of any key, new or not)
is refused and the caller stops there: the map then covers the offsets
`[base_offset, latest_offset]`, and the cleaner checkpoints at the refused record's
offset. `put_many` keeps these semantics exactly: when a batch may overflow the room left
it finds, before inserting, the record at which the map would reach `max_keys` (the
first occurrences of the keys the map does not hold, in record order) and inserts only
the records before the refused one. An offset beyond `base_offset +
MAX_RELATIVE_OFFSET` is refused the same way.

A put keeps the larger offset when a key is already present, so the map holds each
key's latest offset whatever order the records arrive in. Collisions of MD5 are
ignored, as in Kafka (two keys with one digest would be treated as one).
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt
from pyroaring import BitMap

SLOT_BYTES = 20
DEFAULT_BUDGET_BYTES = 128 * 1024 * 1024
DEFAULT_LOAD_FACTOR = 0.9  # Kafka's log.cleaner.io.buffer.load.factor
EMPTY_SLOT = 0xFFFF_FFFF
MAX_RELATIVE_OFFSET = EMPTY_SLOT - 1
SCALAR_TAIL_KEYS = 32  # pending keys below which a round costs more than one-at-a-time probing

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]

md5 = hashlib.md5
_EMPTY = np.uint32(EMPTY_SLOT)


def key_hash(key: bytes | bytearray | memoryview) -> bytes:
    """The 16-byte MD5 digest the map is keyed by (Kafka's default cleaner hash)."""
    return md5(key).digest()


def digest_halves(digests: list[bytes]) -> tuple[U64, U64]:
    """16-byte digests as (lo, hi) little-endian u64 arrays."""
    both = np.frombuffer(b"".join(digests), "<u8").reshape(-1, 2) if digests else np.empty((0, 2), "<u8")
    return both[:, 0].astype(np.uint64), both[:, 1].astype(np.uint64)


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
        self._lo = np.zeros(capacity, np.uint64)
        self._hi = np.zeros(capacity, np.uint64)
        self._val = np.full(capacity, _EMPTY, np.uint32)
        self.base_offset = 0
        self.size = 0
        self.latest_offset = -1  # the last offset put (Kafka's SkimpyOffsetMap.latestOffset)

    @property
    def memory_bytes(self) -> int:
        """Bytes held by the table (what the budget bounds)."""
        return self.capacity * SLOT_BYTES

    @property
    def used_bytes(self) -> int:
        """Bytes of the table's occupied slots (`size` entries of SLOT_BYTES each)."""
        return self.size * SLOT_BYTES

    @property
    def full(self) -> bool:
        return self.size >= self.max_keys

    def reset(self, base_offset: int) -> None:
        """Empty the map for a new partition whose offsets start at `base_offset`."""
        if self.size:
            self._val.fill(_EMPTY)
        self.base_offset = base_offset
        self.size = 0
        self.latest_offset = base_offset - 1

    # ------------------------------------------------------------ one key

    def put(self, digest: bytes, offset: int) -> bool:
        """Record `offset` for the key; False (nothing changed) when the map is full or the
        offset lies beyond what it can represent: the caller stops at this offset."""
        lo, hi = digest_halves([digest])
        return self.put_many(lo, hi, np.array([offset], np.int64)) == 1

    def get(self, digest: bytes) -> int:
        """The key's latest offset, or -1 if it is not in the map."""
        lo, hi = digest_halves([digest])
        return int(self.get_many(lo, hi)[0])

    # ------------------------------------------------------------ batches

    def put_many(self, lo: U64, hi: U64, offsets: I64) -> int:
        """Put the records (key halves, offset) in order; the number accepted: a prefix,
        shorter than the batch when the map fills or an offset is out of its range (the
        caller stops at the first record not accepted)."""
        n = len(offsets)
        if n == 0 or self.size >= self.max_keys:
            return 0
        rel = offsets - self.base_offset
        if int(rel.min()) < 0:
            bad = int(offsets[np.argmax(rel < 0)])
            raise ValueError(f"offset {bad} is below the map's base offset {self.base_offset}")
        over = rel > MAX_RELATIVE_OFFSET
        if over.any():
            n = int(np.argmax(over))
        room = self.max_keys - self.size
        if n > room:
            n = self._accepted_prefix(lo[:n], hi[:n], room)
        if n == 0:
            return 0
        self._insert(lo[:n], hi[:n], rel[:n].astype(np.uint32))
        self.latest_offset = max(self.latest_offset, int(offsets[:n].max()))
        return n

    def _accepted_prefix(self, lo: U64, hi: U64, room: int) -> int:
        """How many of these records go in before the map holds `max_keys` and refuses the
        next: the record after the first occurrence of the room-th key it does not hold."""
        new = np.flatnonzero(self.get_slots(lo, hi) < 0)
        if new.size < room:
            return len(lo)
        nlo, nhi = lo[new], hi[new]
        order = np.lexsort((new, nhi, nlo))  # by key, then by record index
        slo, shi = nlo[order], nhi[order]
        first = np.ones(len(order), np.bool_)
        first[1:] = (slo[1:] != slo[:-1]) | (shi[1:] != shi[:-1])
        firsts = np.sort(new[order][first])  # each new key's first record, in record order
        if firsts.size < room:
            return len(lo)
        return int(firsts[room - 1]) + 1

    def _insert(self, lo: U64, hi: U64, rel: npt.NDArray[np.uint32]) -> None:
        cap = self.capacity
        klo, khi, val = self._lo, self._hi, self._val
        slot = (lo % np.uint64(cap)).astype(np.int64)
        pend = np.arange(len(lo), dtype=np.int64)
        while pend.size > SCALAR_TAIL_KEYS:
            s = slot[pend]
            v = val[s]
            empty = v == _EMPTY
            same = ~empty & (klo[s] == lo[pend]) & (khi[s] == hi[pend])
            if same.any():
                m = pend[same]
                np.maximum.at(val, slot[m], rel[m])
            claimed = pend[empty]
            losers = claimed[:0]
            if claimed.size:
                cs = slot[claimed]
                val[cs] = claimed.astype(np.uint32)  # batch index < 2**32 - 1: never EMPTY
                won = val[cs] == claimed
                w = claimed[won]
                ws = cs[won]
                klo[ws] = lo[w]
                khi[ws] = hi[w]
                val[ws] = rel[w]
                self.size += int(w.size)
                losers = claimed[~won]
            moving = pend[~empty & ~same]
            nxt = slot[moving] + 1
            nxt[nxt == cap] = 0
            slot[moving] = nxt
            pend = np.concatenate([moving, losers])
        for i in pend.tolist():
            self._put_one(int(lo[i]), int(hi[i]), int(rel[i]), int(slot[i]))

    def _put_one(self, lo: int, hi: int, rel: int, slot: int) -> None:
        klo, khi, val = self._lo, self._hi, self._val
        cap = self.capacity
        while True:
            v = int(val[slot])
            if v == EMPTY_SLOT:
                klo[slot] = lo
                khi[slot] = hi
                val[slot] = rel
                self.size += 1
                return
            if int(klo[slot]) == lo and int(khi[slot]) == hi:
                if rel > v:
                    val[slot] = rel
                return
            slot += 1
            if slot == cap:
                slot = 0

    def get_slots(self, lo: U64, hi: U64) -> I64:
        """Each key's slot, or -1 where the map does not hold it."""
        cap = self.capacity
        klo, khi, val = self._lo, self._hi, self._val
        out = np.full(len(lo), -1, np.int64)
        if self.size == 0:
            return out
        slot = (lo % np.uint64(cap)).astype(np.int64)
        pend = np.arange(len(lo), dtype=np.int64)
        while pend.size > SCALAR_TAIL_KEYS:
            s = slot[pend]
            empty = val[s] == _EMPTY
            same = ~empty & (klo[s] == lo[pend]) & (khi[s] == hi[pend])
            out[pend[same]] = s[same]
            pend = pend[~empty & ~same]
            nxt = slot[pend] + 1
            nxt[nxt == cap] = 0
            slot[pend] = nxt
        for i in pend.tolist():
            at = int(slot[i])
            want_lo, want_hi = int(lo[i]), int(hi[i])
            while int(val[at]) != EMPTY_SLOT:
                if int(klo[at]) == want_lo and int(khi[at]) == want_hi:
                    out[i] = at
                    break
                at += 1
                if at == cap:
                    at = 0
        return out

    def get_many(self, lo: U64, hi: U64) -> I64:
        """Each key's latest offset, or -1 where the map does not hold it."""
        slots = self.get_slots(lo, hi)
        found = slots >= 0
        out = np.full(len(lo), -1, np.int64)
        out[found] = self._val[slots[found]].astype(np.int64) + self.base_offset
        return out

    # ------------------------------------------------------------ whole map

    def latest_offsets(self) -> BitMap:
        """The set of values (each key's latest offset), relative to `base_offset`: the
        records of the covered range that survive a clean."""
        # pyroaring reads an array('I') through the buffer protocol (a NumPy array element
        # by element, ~10x slower)
        bm = BitMap(array("I", self._val.tobytes()))
        bm.discard(EMPTY_SLOT)
        return bm

    def items(self) -> Iterator[tuple[bytes, int]]:
        """(digest, offset) of every key, in slot order (tests and debugging)."""
        for slot in np.flatnonzero(self._val != _EMPTY).tolist():
            x = int(self._lo[slot]) | (int(self._hi[slot]) << 64)
            yield x.to_bytes(16, "little"), self.base_offset + int(self._val[slot])
