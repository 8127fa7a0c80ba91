"""Raw Kafka wire access for tests: send one request built with kio, get the response's bytes.

Used to capture a broker's exact response bytes, e.g. to feed `JavaClient.api_oracle` (Kafka's
own Java message classes as a strict parser). Nothing here is clever on purpose: it is the
smallest correct client framing (size prefix, request header v1/v2 as the request type says,
response header v0/v1 stripped by hand) so that the bytes under test are the broker's own.

    with KafkaWire("127.0.0.1:9092") as wire:
        raw = wire.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    raw.body        # response body bytes: no size prefix, no header
    raw.parse()     # the kio response entity
    raw.oracle_item # (api_key, api_version, body) for JavaClient.api_oracle

`send_request(bootstrap, request)` is the one-shot form; `fetch_request` and
`produce_request` build the two data requests tests send most, `list_offsets_request` the
offset queries.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import socket
import ssl
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, cast

from kio.index import load_response_schema
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.list_offsets.v10.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import BrokerId, TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records, i8, i16, i32, i32Timedelta, i64

DEFAULT_CLIENT_ID = "skiff-wire"


@dataclass(frozen=True)
class RawResponse:
    api_key: int
    api_version: int
    correlation_id: int
    header: bytes
    """The response header bytes (correlation id, plus tagged fields for header v1)."""
    body: bytes
    """The response body: what follows the header (no size prefix)."""

    @property
    def oracle_item(self) -> tuple[int, int, bytes]:
        return (self.api_key, self.api_version, self.body)

    def parse(self) -> Any:
        """The body parsed with kio's schema for this API and version (must consume every byte)."""
        schema = load_response_schema(self.api_key, self.api_version)
        entity, used = entity_reader(cast(Any, schema))(self.body, 0)
        if used != len(self.body):
            raise ValueError(f"kio consumed {used} of {len(self.body)} response bytes")
        return entity


def _read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated unsigned varint")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 35:
            raise ValueError("unsigned varint too long")


def response_header_size(frame: bytes, header_version: int) -> int:
    """Bytes taken by the response header at the start of `frame` (v0: 4; v1: 4 + tagged fields)."""
    if header_version == 0:
        return 4
    count, pos = _read_uvarint(frame, 4)
    for _ in range(count):
        _tag, pos = _read_uvarint(frame, pos)
        size, pos = _read_uvarint(frame, pos)
        pos += size
    if pos > len(frame):
        raise ValueError("truncated response header tagged fields")
    return pos


def encode_request(request: Any, *, correlation_id: int, client_id: str | None = DEFAULT_CLIENT_ID) -> bytes:
    """The request with its header (v1 or v2, as the kio request type says), size prefix included."""
    header_type = type(request).__header_schema__
    names = {f.name for f in dataclasses.fields(header_type)}
    kwargs: dict[str, Any] = {
        "request_api_key": i16(type(request).__api_key__),
        "request_api_version": i16(type(request).__version__),
        "correlation_id": i32(correlation_id),
    }
    if "client_id" in names:
        kwargs["client_id"] = client_id
    buf = io.BytesIO()
    entity_writer(header_type)(buf, header_type(**kwargs))
    entity_writer(type(request))(buf, request)
    payload = buf.getvalue()
    return struct.pack(">i", len(payload)) + payload


def expects_response(request: Any) -> bool:
    """False only for a Produce request with acks=0 (the broker sends nothing back)."""
    return not (int(type(request).__api_key__) == 0 and int(getattr(request, "acks", -1)) == 0)


class KafkaWire:
    """One TCP connection to a broker; requests are sent one at a time."""

    def __init__(
        self,
        bootstrap: str,
        *,
        timeout_s: float = 10.0,
        client_id: str | None = DEFAULT_CLIENT_ID,
        ssl_context: ssl.SSLContext | None = None,
    ):
        host, _, port = bootstrap.rpartition(":")
        self.sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s)
        if ssl_context is not None:  # TLS listeners: the handshake happens here
            self.sock = ssl_context.wrap_socket(self.sock, server_hostname=host.strip("[]"))
        self.client_id = client_id
        self._correlation_id = 0

    def __enter__(self) -> KafkaWire:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def _recv_exact(self, n: int) -> bytes:
        chunks: list[bytes] = []
        while n:
            chunk = self.sock.recv(min(n, 1 << 20))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def send_frame(self, frame: bytes) -> None:
        """Send pre-encoded bytes as they are (for malformed-request tests)."""
        self.sock.sendall(frame)

    def recv_frame(self) -> bytes:
        """One response frame: everything after the 4-byte size prefix (header + body)."""
        (size,) = struct.unpack(">i", self._recv_exact(4))
        if size < 4:
            raise ValueError(f"response size {size} is too small")
        return self._recv_exact(size)

    def request(self, request: Any) -> RawResponse:
        """Send `request` (a kio request entity) and return the raw response."""
        if not expects_response(request):
            raise ValueError("a Produce request with acks=0 gets no response; use send_only()")
        self._correlation_id += 1
        cid = self._correlation_id
        self.sock.sendall(encode_request(request, correlation_id=cid, client_id=self.client_id))
        frame = self.recv_frame()
        (got,) = struct.unpack_from(">i", frame)
        if got != cid:
            raise ValueError(f"correlation id {got} in the response, expected {cid}")
        api_key, version = int(type(request).__api_key__), int(type(request).__version__)
        header_version = int(load_response_schema(api_key, version).__header_schema__.__version__)
        hsize = response_header_size(frame, header_version)
        return RawResponse(api_key, version, cid, frame[:hsize], frame[hsize:])

    def send_only(self, request: Any) -> None:
        self._correlation_id += 1
        self.sock.sendall(
            encode_request(request, correlation_id=self._correlation_id, client_id=self.client_id)
        )


def send_request(bootstrap: str, request: Any, *, timeout_s: float = 10.0) -> RawResponse:
    """One request on a fresh connection."""
    with KafkaWire(bootstrap, timeout_s=timeout_s) as wire:
        return wire.request(request)


def fetch_request(
    topic: str,
    partitions: Sequence[tuple[int, int, int]],
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    max_bytes: int = 50 << 20,
) -> FetchRequest:
    """A sessionless Fetch v12 of `topic`'s (partition, fetch offset, partition max bytes)."""
    return FetchRequest(
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=max_wait_ms)),
        min_bytes=i32(min_bytes),
        max_bytes=i32(max_bytes),
        isolation_level=i8(0),
        topics=(
            FetchTopic(
                topic=TopicName(topic),
                partitions=tuple(
                    FetchPartition(partition=i32(p), fetch_offset=i64(o), partition_max_bytes=i32(limit))
                    for p, o, limit in partitions
                ),
            ),
        ),
        forgotten_topics_data=(),
    )


def list_offsets_request(
    topic: str, queries: Sequence[tuple[int, int]], *, isolation: int = 0, timeout_ms: int = 0
) -> ListOffsetsRequest:
    """A consumer's ListOffsets v10 of `topic`'s (partition, timestamp) queries (timestamp -1:
    the latest offset, -2: the earliest); `isolation` 1 (read_committed): the latest is the LSO."""
    return ListOffsetsRequest(
        replica_id=BrokerId(-1),
        isolation_level=i8(isolation),
        timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=timeout_ms)),
        topics=(
            ListOffsetsTopic(
                name=TopicName(topic),
                partitions=tuple(
                    ListOffsetsPartition(partition_index=i32(p), timestamp=i64(ts)) for p, ts in queries
                ),
            ),
        ),
    )


def produce_request(topic: str, batches: Mapping[int, bytes], *, acks: int = -1) -> ProduceRequest:
    """A Produce v9 of one record batch per partition of `topic` (30 s timeout)."""
    return ProduceRequest(
        transactional_id=None,
        acks=i16(acks),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        topic_data=(
            TopicProduceData(
                name=TopicName(topic),
                partition_data=tuple(
                    PartitionProduceData(index=i32(p), records=Records.parse(b)) for p, b in batches.items()
                ),
            ),
        ),
    )
