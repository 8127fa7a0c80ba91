"""A direct decoder for Produce requests (v3-v9), the agent's most frequent request.

The generic path walks a request twice: `check_bounds` (agent.protocol.schema_walk: a
closure per field, a call per varint) and then kio's reader, which builds dataclass
entities with typed integers. For a one-partition Produce request that is most of the
decode cost. This reads the same bytes once, with the same rules, into light objects
with the attributes the Produce handler reads (`transactional_id`, `acks`, `timeout_ms`,
`topic_data[].name`, `topic_data[].partition_data[].index` / `.records`).

Layout (Kafka's ProduceRequest.json), after the request header:

    transactional_id  nullable string
    acks              int16
    timeout_ms        int32
    topic_data        array of [name string,
                                partition_data array of [index int32, records nullable bytes]]

v3-v8: strings have an int16 length (-1 = null), bytes and arrays an int32 length
(-1 = null). v9 is flexible: compact forms (unsigned varint length + 1, 0 = null) and a
tagged-field section after each struct (none are defined for Produce up to v9, and kio
refuses unknown ones: a tagged field is refused).

Refused with `MalformedRequest` exactly where the generic path refuses: a length or count
that does not fit in the frame (a count is checked against the smallest possible item
before any item is read), a null where the schema says not nullable (the topic array, a
topic name, a partition array), a negative length other than -1, a string that is not
UTF-8, a varint longer than 5 bytes. Bytes after the request are ignored, as Kafka does.
tests/unit/test_produce_request_decode.py compares the two paths on valid, truncated and
mutated requests of every version.
"""

from __future__ import annotations

import datetime
import struct

from skiff.agent.protocol.schema_walk import MalformedRequest, read_uvarint

MIN_VERSION = 3
MAX_VERSION = 9

# A whole request frame: bytes, or a view of the buffer it was received into (the records
# are then views too: no copy of the batches; agent.network.frame_reader).
Buffer = bytes | memoryview

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I32_PAIR = struct.Struct(">ii")
_ACKS_TIMEOUT = struct.Struct(">hi")


class PartitionData:
    __slots__ = ("index", "records")

    def __init__(self, index: int, records: Buffer | None) -> None:
        self.index = index
        self.records = records


class TopicData:
    __slots__ = ("name", "partition_data")

    def __init__(self, name: str, partition_data: tuple[PartitionData, ...]) -> None:
        self.name = name
        self.partition_data = partition_data


class ProduceRequestData:
    """A decoded Produce request (the attributes of kio's `ProduceRequest` that matter)."""

    __slots__ = ("transactional_id", "acks", "timeout_ms", "topic_data", "__version__")
    __api_key__ = 0

    def __init__(
        self,
        version: int,
        transactional_id: str | None,
        acks: int,
        timeout_ms: int,
        topic_data: tuple[TopicData, ...],
    ) -> None:
        self.__version__ = version
        self.transactional_id = transactional_id
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.topic_data = topic_data

    @property
    def timeout(self) -> datetime.timedelta:
        return datetime.timedelta(milliseconds=self.timeout_ms)


def _uvarint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    if pos < end:
        b = buf[pos]
        if b < 0x80:  # nearly every length in a produce request
            return b, pos + 1
    return read_uvarint(buf, pos, end)


def _null(name: str) -> MalformedRequest:
    return MalformedRequest(f"non-nullable field {name} was serialized as null")


def _text(buf: Buffer, pos: int, n: int, end: int) -> str:
    if pos + n > end:
        raise MalformedRequest(f"string of {n} bytes exceeds the {end - pos} bytes left")
    try:
        return str(buf[pos : pos + n], "utf-8")
    except UnicodeDecodeError as e:
        raise MalformedRequest(f"cannot decode ProduceRequest: {e}") from None


def _skip_tagged(buf: Buffer, pos: int, end: int) -> int:
    """A struct's tagged-field section, which must be empty: Produce defines no tagged
    fields up to v9, and kio refuses unknown ones (so the generic path does)."""
    count, pos = _uvarint(buf, pos, end)
    if count:
        if count > end - pos:
            raise MalformedRequest(f"{count} tagged fields cannot fit in {end - pos} bytes")
        tag, pos = _uvarint(buf, pos, end)
        raise MalformedRequest(f"cannot decode ProduceRequest: unknown tagged field tag: {tag}")
    return pos


def _count(buf: Buffer, pos: int, end: int, flexible: bool, name: str, item_min: int) -> tuple[int, int]:
    """An array's item count (refusing null, negative and impossible counts) and the position after it."""
    if flexible:
        v = buf[pos] if pos < end else 0x80  # 0x80: the slow form raises "truncated varint"
        if v < 0x80:
            pos += 1
        else:
            v, pos = _uvarint(buf, pos, end)
        if v == 0:
            raise _null(name)
        count = v - 1
    else:
        if pos + 4 > end:
            raise MalformedRequest(f"array length of 4 bytes exceeds the {end - pos} bytes left")
        (count,) = _I32.unpack_from(buf, pos)
        pos += 4
        if count == -1:
            raise _null(name)
        if count < -1:
            raise MalformedRequest(f"negative array length {count}")
    if count * item_min > end - pos:
        raise MalformedRequest(f"array of {count} items cannot fit in {end - pos} bytes")
    return count, pos


def decode_produce_request(buf: Buffer, pos: int, version: int) -> ProduceRequestData:
    """The Produce request body at `pos` of `buf` (a whole request frame, without its size prefix)."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise MalformedRequest(f"Produce v{version} is not decoded here")
    try:
        if version >= 9:
            return _decode_flexible(buf, pos, version)
        return _decode_classic(buf, pos, version)
    except (IndexError, struct.error):  # a fixed-size field or a varint's first byte past the end
        raise MalformedRequest("truncated ProduceRequest") from None


def _decode_classic(buf: Buffer, pos: int, version: int) -> ProduceRequestData:
    """v3-v8: int16 string lengths, int32 byte and array lengths, -1 for null."""
    end = len(buf)
    txn: str | None = None
    (n,) = _I16.unpack_from(buf, pos)
    pos += 2
    if n >= 0:
        txn = _text(buf, pos, n, end)
        pos += n
    elif n != -1:
        raise MalformedRequest(f"negative length {n}")
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(buf, pos)
    pos += 6
    # the smallest topic: name length and partition count; partition: index and records length
    topic_count, pos = _count(buf, pos, end, False, "ProduceRequest.topic_data", 6)
    topics = []
    for _ in range(topic_count):
        (n,) = _I16.unpack_from(buf, pos)
        pos += 2
        if n < 0:
            raise _null("TopicProduceData.name") if n == -1 else MalformedRequest(f"negative length {n}")
        name = _text(buf, pos, n, end)
        pos += n
        part_count, pos = _count(buf, pos, end, False, "TopicProduceData.partition_data", 8)
        partitions = []
        for _ in range(part_count):
            index, n = _I32_PAIR.unpack_from(buf, pos)
            pos += 8
            records: Buffer | None = None
            if n >= 0:
                if pos + n > end:
                    raise MalformedRequest(f"records of {n} bytes exceed the {end - pos} bytes left")
                records = buf[pos : pos + n]
                pos += n
            elif n != -1:
                raise MalformedRequest(f"negative length {n}")
            partitions.append(PartitionData(index, records))
        topics.append(TopicData(name, tuple(partitions)))
    return ProduceRequestData(version, txn, acks, timeout_ms, tuple(topics))


def _decode_flexible(buf: Buffer, pos: int, version: int) -> ProduceRequestData:
    """v9: compact lengths (unsigned varint + 1, 0 for null) and empty tagged-field sections.
    Varints are read inline in their one-byte form (every length below 127)."""
    end = len(buf)
    txn: str | None = None
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = _uvarint(buf, pos, end)
    if n:
        txn = _text(buf, pos, n - 1, end)
        pos += n - 1
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(buf, pos)
    pos += 6
    # the smallest topic: name, partition array, tags; partition: index, records, tags
    topic_count, pos = _count(buf, pos, end, True, "ProduceRequest.topic_data", 3)
    topics = []
    for _ in range(topic_count):
        n = buf[pos]
        if n < 0x80:
            pos += 1
        else:
            n, pos = _uvarint(buf, pos, end)
        if n == 0:
            raise _null("TopicProduceData.name")
        name = _text(buf, pos, n - 1, end)
        pos += n - 1
        part_count, pos = _count(buf, pos, end, True, "TopicProduceData.partition_data", 6)
        partitions = []
        for _ in range(part_count):
            (index,) = _I32.unpack_from(buf, pos)
            pos += 4
            n = buf[pos]
            if n < 0x80:
                pos += 1
            else:
                n, pos = _uvarint(buf, pos, end)
            records: Buffer | None = None
            if n:
                n -= 1
                if pos + n > end:
                    raise MalformedRequest(f"records of {n} bytes exceed the {end - pos} bytes left")
                records = buf[pos : pos + n]
                pos += n
            if buf[pos]:
                pos = _skip_tagged(buf, pos, end)
            else:
                pos += 1
            partitions.append(PartitionData(index, records))
        if buf[pos]:
            pos = _skip_tagged(buf, pos, end)
        else:
            pos += 1
        topics.append(TopicData(name, tuple(partitions)))
    if buf[pos]:
        _skip_tagged(buf, pos, end)
    return ProduceRequestData(version, txn, acks, timeout_ms, tuple(topics))
