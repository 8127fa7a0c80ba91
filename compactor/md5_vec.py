"""MD5 of many short keys at once, in NumPy (RFC 1321), for the key map.

The cleaner hashes every keyed record it reads; `hashlib.md5(key).digest()` costs about
0.5 us a key from Python, more than everything else pass 1 does per record. Here the keys
of a whole chunk are hashed together: each key of at most `MAX_VECTOR_KEY_BYTES` (55)
bytes fits one padded 64-byte block (key, 0x80, zeros, bit length as u64 LE), the blocks
form a (16 words x n keys) uint32 matrix, and the 64 MD5 steps run as whole-column NumPy
operations (about 0.1 us a key). Longer keys (rare: Kafka keys are ids) are hashed with
`hashlib`, one by one.

The result is the digest as two little-endian u64 halves per key (`lo` = bytes 0-7,
`hi` = bytes 8-15), the form `compactor.keymap` stores.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import numpy.typing as npt

MAX_VECTOR_KEY_BYTES = 55  # one block holds the key, the 0x80 byte and the 8-byte length

_SHIFTS = [7, 12, 17, 22] * 4 + [5, 9, 14, 20] * 4 + [4, 11, 16, 23] * 4 + [6, 10, 15, 21] * 4
_K = [np.uint32(int(abs(math.sin(i + 1)) * 2**32) & 0xFFFF_FFFF) for i in range(64)]
_INIT = (np.uint32(0x67452301), np.uint32(0xEFCDAB89), np.uint32(0x98BADCFE), np.uint32(0x10325476))
_MSG_WORD = [
    i if i < 16 else (5 * i + 1) % 16 if i < 32 else (3 * i + 5) % 16 if i < 48 else (7 * i) % 16
    for i in range(64)
]

U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]


def _compress(words: npt.NDArray[np.uint32]) -> npt.NDArray[np.uint32]:
    """MD5 of one block per column of `words` (16 x n): the four state words (4 x n)."""
    n = words.shape[1]
    a, b, c, d = (np.full(n, v, np.uint32) for v in _INIT)
    f = np.empty(n, np.uint32)
    t = np.empty(n, np.uint32)
    for i in range(64):
        if i < 16:  # F = (b & c) | (~b & d)
            np.bitwise_and(b, c, out=f)
            np.invert(b, out=t)
            t &= d
            f |= t
        elif i < 32:  # G = (d & b) | (~d & c)
            np.bitwise_and(d, b, out=f)
            np.invert(d, out=t)
            t &= c
            f |= t
        elif i < 48:  # H = b ^ c ^ d
            np.bitwise_xor(b, c, out=f)
            f ^= d
        else:  # I = c ^ (b | ~d)
            np.invert(d, out=t)
            t |= b
            np.bitwise_xor(c, t, out=f)
        f += a
        f += _K[i]
        f += words[_MSG_WORD[i]]
        s = _SHIFTS[i]
        np.left_shift(f, np.uint32(s), out=t)
        f >>= np.uint32(32 - s)
        f |= t
        f += b
        # rotate the state: a <- d, d <- c, c <- b, b <- f; a's buffer is free for f
        a, d, c, b, f = d, c, b, f, a
    a += _INIT[0]
    b += _INIT[1]
    c += _INIT[2]
    d += _INIT[3]
    return np.stack([a, b, c, d])


def md5_halves(buf: U8, starts: I64, lengths: I64) -> tuple[U64, U64]:
    """The MD5 digests of the keys `buf[starts[i] : starts[i] + lengths[i]]` as
    (lo, hi) u64 arrays (see the module docstring). `lengths` must be >= 0, and `buf`
    must hold `MAX_VECTOR_KEY_BYTES` bytes after each short key's start."""
    n = len(starts)
    lo = np.empty(n, np.uint64)
    hi = np.empty(n, np.uint64)
    if n == 0:
        return lo, hi
    short = lengths <= MAX_VECTOR_KEY_BYTES
    idx = np.flatnonzero(short)
    if idx.size:
        st = starts[idx]
        ln = lengths[idx]
        m = idx.size
        blocks = np.zeros((m, 64), np.uint8)
        width = int(ln.max())
        if width:
            # a (keys x width) gather; bytes past a key's end are zeroed (the caller pads
            # `buf` so that the gather stays inside it, see `md5_halves`)
            cols = np.arange(width, dtype=np.int64)
            part = buf[st[:, None] + cols]
            part[cols >= ln[:, None]] = 0
            blocks[:, :width] = part
        rows = np.arange(m)
        blocks[rows, ln] = 0x80
        blocks[:, 56:64] = (ln.astype(np.uint64) * np.uint64(8)).astype("<u8").view(np.uint8).reshape(m, 8)
        words = np.ascontiguousarray(blocks.view("<u4").T)
        state = _compress(words).astype(np.uint64)
        lo[idx] = state[0] | (state[1] << np.uint64(32))
        hi[idx] = state[2] | (state[3] << np.uint64(32))
    for i in np.flatnonzero(~short).tolist():
        s = int(starts[i])
        digest = hashlib.md5(buf[s : s + int(lengths[i])].tobytes()).digest()
        lo[i] = int.from_bytes(digest[:8], "little")
        hi[i] = int.from_bytes(digest[8:], "little")
    return lo, hi
