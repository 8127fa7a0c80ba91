"""What every client round-trip test sends and how it checks what comes back.

`make_messages` builds a deterministic workload (keys, null keys, headers, binary values
of varied sizes, tombstones) spread over partitions; `check_consumed` asserts that the
consumed records are exactly those: same bytes, offsets contiguous from the first,
order kept per partition, nothing missing and nothing duplicated.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass


@dataclass(frozen=True)
class Msg:
    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class Got:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]


def make_messages(count: int, partitions: int, *, seed: str = "", with_headers: bool = True) -> list[Msg]:
    out = []
    for i in range(count):
        digest = hashlib.sha256(f"{seed}-{i}".encode()).digest()
        size = (digest[0] * 7) % 1500  # 0..1499 bytes, some empty
        value: bytes | None = (digest * (size // 32 + 1))[:size]
        if i % 97 == 13:
            value = None  # tombstone
        key = None if i % 11 == 5 else f"key-{seed}-{i}".encode()
        headers = (("idx", str(i).encode()), ("bin", digest[:5])) if with_headers and i % 3 else ()
        out.append(Msg(i % partitions, key, value, headers))
    return out


def check_consumed(sent: list[Msg], got: list[Got], *, first_offset: int = 0) -> None:
    by_partition_sent: dict[int, list[Msg]] = defaultdict(list)
    for m in sent:
        by_partition_sent[m.partition].append(m)
    by_partition_got: dict[int, list[Got]] = defaultdict(list)
    for g in got:
        by_partition_got[g.partition].append(g)
    assert set(by_partition_got) <= set(by_partition_sent), "records from partitions nothing was sent to"
    for p, msgs in by_partition_sent.items():
        records = sorted(by_partition_got.get(p, []), key=lambda g: g.offset)
        offsets = [g.offset for g in records]
        assert len(offsets) == len(set(offsets)), f"partition {p}: duplicated offsets"
        assert offsets == list(range(first_offset, first_offset + len(msgs))), (
            f"partition {p}: expected offsets {first_offset}..{first_offset + len(msgs) - 1}, got"
            f" {offsets[:5]}...{offsets[-5:]} ({len(offsets)} records)"
        )
        for m, g in zip(msgs, records, strict=True):
            assert (g.key, g.value) == (m.key, m.value), f"partition {p} offset {g.offset}: wrong bytes"
            assert tuple(g.headers) == tuple(m.headers), f"partition {p} offset {g.offset}: wrong headers"
