"""Bounds of the values that cross the metadata service's HTTP boundary.

The domain dataclasses (`metadata.types` and its siblings) and the parameters of each
operation (`metadata.wire.operations`) are annotated with these aliases; to Python and mypy
they are plain `int`, `str`, `Sequence`, but the wire layer (`metadata.wire.codec`, built
on pydantic) checks them on every request, so a malformed or hostile request is a 422
with Kafka's INVALID_REQUEST, never an overflow in the database or an unbounded loop.

Integers follow Kafka's field widths (int32, int64); names are bounded like Kafka's
(a topic name is at most 249 characters, a group or transactional id at most 32,767);
lists are bounded by the most a single call may carry. Uses only `annotated_types`
(pydantic's own dependency), so importing it costs nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, TypeVar

from annotated_types import Interval, Len, MaxLen

X = TypeVar("X")

Int32 = Annotated[int, Interval(ge=-(2**31), le=2**31 - 1)]
Int64 = Annotated[int, Interval(ge=-(2**63), le=2**63 - 1)]
NonNegInt32 = Annotated[int, Interval(ge=0, le=2**31 - 1)]
NonNegInt64 = Annotated[int, Interval(ge=0, le=2**63 - 1)]
PositiveInt64 = Annotated[int, Interval(ge=1, le=2**63 - 1)]
Port = Annotated[int, Interval(ge=0, le=65535)]

# A topic, object key, group member's topic: generous (Kafka's topic names stop at 249).
Name = Annotated[str, MaxLen(1024)]
# An agent id, host, listener name, compactor holder: DNS-sized.
ShortName = Annotated[str, MaxLen(255)]
Id = Annotated[str, Len(1, 255)]  # required non-empty: an agent id
# Kafka's group and transactional ids are int16-length strings.
KafkaId = Annotated[str, MaxLen(32767)]
TxnId = Annotated[str, Len(1, 32767)]
Token = Annotated[str, MaxLen(64)]  # a lease or claim token

# Items per call: one request's list of names, offsets, queries, ...
MAX_ITEMS = 10_000
# Partitions per call (a commit or a transaction may touch many).
MAX_PARTITIONS = 100_000

Items = Annotated[Sequence[X], MaxLen(MAX_ITEMS)]
ManyItems = Annotated[Sequence[X], MaxLen(MAX_PARTITIONS)]
