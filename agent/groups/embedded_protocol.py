"""The consumer embedded protocol (Kafka's ConsumerProtocol): the bytes classic consumers put
in JoinGroup's protocol metadata (a subscription) and get back in SyncGroup (an assignment).
The coordinator reads and writes them only for classic members of a consumer-protocol group
(`agent.groups.mixed`): it then assigns on the server and must speak the clients' format.

Wire format (big-endian; every version starts the same way, later versions append fields):

    Subscription: version int16, topics [string], user_data nullable bytes,
                  v1+: owned_partitions [topic string, partitions [int32]],
                  v2+: generation_id int32, v3+: rack_id nullable string
    Assignment:   version int16, assigned_partitions [topic string, partitions [int32]],
                  user_data nullable bytes   (the same fields in v0-v3)

Arrays are an int32 count then the items, strings an int16 length then UTF-8, bytes an
int32 length (-1: null). A subscription that does not parse gives None (the caller answers
INCONSISTENT_GROUP_PROTOCOL); fields after the ones read are ignored, as Kafka's newer
versions are read by older readers.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

MAX_EMBEDDED_VERSION = 3  # the newest ConsumerProtocol version (Kafka 4)


@dataclass(frozen=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    owned: dict[str, frozenset[int]]  # empty before v1 (eager clients revoke before joining)
    rack_id: str | None = None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(value)

    def string(self) -> str | None:
        size = self.take(">h")
        if size < 0:
            return None
        if self.pos + size > len(self.data):
            raise ValueError("string past the end")
        out = self.data[self.pos : self.pos + size].decode()
        self.pos += size
        return out

    def skip_bytes(self) -> None:
        size = self.take(">i")
        if size > 0:
            if self.pos + size > len(self.data):
                raise ValueError("bytes past the end")
            self.pos += size

    def count(self) -> int:
        n = self.take(">i")
        if n > len(self.data):  # each item takes at least a byte: a corrupt count
            raise ValueError("array count past the end")
        return max(n, 0)

    def partitions(self) -> dict[str, frozenset[int]]:
        out: dict[str, frozenset[int]] = {}
        for _ in range(self.count()):
            topic = self.string() or ""
            ps = frozenset(self.take(">i") for _ in range(self.count()))
            out[topic] = out.get(topic, frozenset()) | ps
        return out


def decode_subscription(metadata: bytes) -> Subscription | None:
    """A JoinGroup protocol's metadata as a subscription; None if it does not parse."""
    try:
        r = _Reader(bytes(metadata))
        version = r.take(">h")
        if version < 0:
            return None
        topics = tuple(t for t in (r.string() for _ in range(r.count())) if t)
        if r.pos >= len(r.data):
            return Subscription(version, topics, {})
        r.skip_bytes()
        owned = r.partitions() if version >= 1 and r.pos < len(r.data) else {}
        if version >= 2 and r.pos < len(r.data):
            r.take(">i")  # generation id: the coordinator knows the member's epoch
        rack = r.string() if version >= 3 and r.pos < len(r.data) else None
        return Subscription(version, topics, {t: ps for t, ps in owned.items() if ps}, rack)
    except (struct.error, UnicodeDecodeError, ValueError):
        return None


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def encode_assignment(assigned: dict[str, frozenset[int]], version: int = 0) -> bytes:
    """A SyncGroup assignment of these partitions (no user data), in the member's version."""
    out = [struct.pack(">hi", max(0, min(version, MAX_EMBEDDED_VERSION)), len(assigned))]
    for topic in sorted(assigned):
        ps = sorted(assigned[topic])
        out.append(_string(topic) + struct.pack(f">i{len(ps)}i", len(ps), *ps))
    out.append(struct.pack(">i", -1))
    return b"".join(out)


def decode_assignment(data: bytes) -> dict[str, frozenset[int]] | None:
    """A SyncGroup assignment's partitions (empty bytes: none); None if it does not parse."""
    if not data:
        return {}
    try:
        r = _Reader(bytes(data))
        if r.take(">h") < 0:
            return None
        return {t: ps for t, ps in r.partitions().items() if ps}
    except (struct.error, UnicodeDecodeError, ValueError):
        return None


def encode_subscription(topics: tuple[str, ...], owned: dict[str, frozenset[int]] | None = None) -> bytes:
    """A v1 subscription (what a classic client sends; for tests and benchmarks)."""
    out = [struct.pack(">hi", 1, len(topics)), *(_string(t) for t in topics), struct.pack(">i", -1)]
    parts = owned or {}
    out.append(struct.pack(">i", len(parts)))
    for topic in sorted(parts):
        ps = sorted(parts[topic])
        out.append(_string(topic) + struct.pack(f">i{len(ps)}i", len(ps), *ps))
    return b"".join(out)
