"""The pod writer's wire format (agent.workers.wire) and the workers' configuration."""

from __future__ import annotations

import uuid

import pytest
from skiff.agent.config import AgentConfig
from skiff.agent.produce_buffer import PendingBatch
from skiff.agent.workers.kept_runs import KeptRuns
from skiff.agent.workers.ring import Ring
from skiff.agent.workers.supervisor import check_worker_ports, worker_config
from skiff.agent.workers.wire import (
    APPEND,
    FILE,
    FLUSH,
    RESULTS,
    CommittedFileNews,
    FileChunk,
    PlacedBatch,
    WireError,
    decode_appends,
    decode_file,
    decode_id,
    decode_results,
    encode_appends,
    encode_file,
    encode_id,
    encode_results,
    frame_header,
)
from skiff.fileformat.chunk_reader import ChunkLocation
from skiff.metadata.types import BatchResult

T = uuid.UUID(int=7)


def split(frame: bytes) -> tuple[int, memoryview]:
    length, kind = frame_header(frame[:5])
    assert len(frame) == 5 + length
    return kind, memoryview(frame[5:])


def test_appends_round_trip_every_field() -> None:
    plain = PendingBatch(b"a" * 70, 3, 3, 10, 20)
    txn = PendingBatch(b"b" * 61, 1, 1, -1, 5, 42, 7, 9, 1, True, "tx-é")
    no_id = PendingBatch(b"c" * 64, 2, 2, 0, 0, 1, 0, 0, 0, True, None)
    kind, payload = split(b"".join(encode_appends([(5, T, 3, [plain, txn], None), (6, T, 0, [no_id], None)])))
    assert kind == APPEND
    a, b = decode_appends(payload)
    assert (a.append_id, a.topic_id, a.partition) == (5, T, 3)
    assert [(bytes(x.data), *x[1:]) for x in a.batches] == [(bytes(p.data), *p[1:]) for p in (plain, txn)]
    assert (b.append_id, b.partition, b.batches[0].transactional_id) == (6, 0, None)


def test_batches_in_the_ring_travel_as_positions_and_come_back_as_views_of_it() -> None:
    ring = Ring(4096)
    try:
        a, b = PendingBatch(b"a" * 100, 1, 1, 0, 0), PendingBatch(b"b" * 5000, 1, 1, 0, 0)
        ra = ring.put(a.data)
        assert ra is not None and ring.put(b.data) is None  # larger than the ring: inline
        frame = b"".join(encode_appends([(1, T, 0, [a, b], [ra.start, -1])]))
        assert len(frame) < 5000 + 200  # a's bytes are not in the frame, b's are
        view = memoryview(ring._map)
        (got,) = decode_appends(split(frame)[1], view)
        assert bytes(got.batches[0].data) == a.data and bytes(got.batches[1].data) == b.data
        with pytest.raises(WireError, match="ring"):
            decode_appends(split(frame)[1], None)
        far = b"".join(encode_appends([(1, T, 0, [a], [4090])]))
        with pytest.raises(WireError, match="outside"):
            decode_appends(split(far)[1], view)
        del got  # its views of the ring
        view.release()
    finally:
        ring.close()


def test_the_ring_reuses_regions_once_freed_in_any_order() -> None:
    ring = Ring(1000)
    try:
        r1, r2, r3 = ring.put(b"1" * 400), ring.put(b"2" * 400), ring.put(b"3" * 150)
        assert r1 is not None and r2 is not None and r3 is not None
        assert (r1.start, r2.start, r3.start) == (0, 400, 800)
        assert ring.put(b"4" * 100) is None  # 50 left at the end, nothing free before the head
        ring.free(r2)  # behind a live head: not reclaimed yet
        assert ring.used_bytes == 950 and ring.put(b"4" * 100) is None
        ring.free(r1)  # the head moves past r1 and r2
        assert ring.used_bytes == 150
        r4 = ring.put(b"4" * 700)  # wraps to the start: [0, 700) before the head at 800
        assert r4 is not None and r4.start == 0
        assert ring.put(b"5" * 101) is None  # [700, 800) holds 100
        r5 = ring.put(b"5" * 100)
        assert r5 is not None and r5.start == 700
        assert ring.put(b"6") is None  # full: tail met the head
        for r in (r3, r4, r5):
            ring.free(r)
        assert ring.used_bytes == 0
        again = ring.put(b"7" * 1000)
        assert again is not None and again.start == 0
        assert bytes(ring._map[:3]) == b"777"
    finally:
        ring.close()


def test_file_news_round_trip() -> None:
    loc = ChunkLocation(9, "segments/f.seg", 64, 200, 10, 12, 3, 99, min_timestamp=None)
    loc2 = ChunkLocation(10, "segments/f.seg", 300, 70, 13, 13, 1, 100, min_timestamp=50)
    news = CommittedFileNews(
        "segments/f.seg",
        0.125,
        (
            FileChunk(T, 1, True, False, (loc, loc2), (PlacedBatch(10, 64, 120), PlacedBatch(13, 300, 70))),
            FileChunk(T, 2, False, True, (), ()),
        ),
    )
    kind, payload = split(encode_file(news))
    assert kind == FILE
    assert decode_file(payload) == news


def test_file_news_refuses_rows_of_another_file() -> None:
    loc = ChunkLocation(9, "segments/other.seg", 64, 200, 10, 12, 3, 99)
    with pytest.raises(ValueError, match="plain rows of that file"):
        encode_file(CommittedFileNews("segments/f.seg", 0.0, (FileChunk(T, 1, True, False, (loc,), ()),)))


def test_results_and_ids_round_trip() -> None:
    ok = BatchResult(0, 10, -1, 0)
    dup = BatchResult(0, 4, 1234, 0, None, True)
    bad = BatchResult(56, error_message="too old ü")
    kind, payload = split(encode_results([(1, [ok, dup]), (2, [bad])]))
    assert kind == RESULTS
    assert decode_results(payload) == [(1, [ok, dup]), (2, [bad])]
    kind, payload = split(encode_id(FLUSH, 2**63))
    assert (kind, decode_id(payload)) == (FLUSH, 2**63)


@pytest.mark.parametrize("cut", [1, 5, 20, 60])
def test_truncated_or_padded_frames_raise_wire_error(cut: int) -> None:
    _, payload = split(b"".join(encode_appends([(1, T, 0, [PendingBatch(b"x" * 70, 1, 1, 0, 0)], None)])))
    with pytest.raises(WireError):
        decode_appends(payload[:-cut])
    with pytest.raises(WireError):
        decode_appends(memoryview(bytes(payload) + b"\0"))
    _, results = split(encode_results([(1, [BatchResult(0, 1)])]))
    with pytest.raises(WireError):
        decode_results(results[: len(results) - min(cut, len(results) - 1)])


def test_frame_length_is_bounded() -> None:
    with pytest.raises(WireError, match="at most"):
        frame_header(b"\xff\xff\xff\xff\x01")
    with pytest.raises(WireError):
        frame_header(b"\x00\x00\x00\x00\x01")


def test_worker_config_moves_every_port_and_names_the_worker() -> None:
    base = AgentConfig(
        agent_id="pod-3",
        port=9092,
        listeners="PLAINTEXT://0.0.0.0:9092,SASL_PLAINTEXT://0.0.0.0:9192",
        advertised_listeners="PLAINTEXT://pod-3.skiff:9092,SASL_PLAINTEXT://pod-3.skiff:9192",
        metrics_port=9100,
        workers=4,
    )
    w2 = worker_config(base, 2, "/tmp/x/writer.sock")
    assert w2.agent_id == "pod-3-w2"
    assert (w2.port, w2.metrics_port, w2.workers, w2.pod_writer_socket) == (
        9094,
        9103,
        1,
        "/tmp/x/writer.sock",
    )
    assert w2.listeners == "PLAINTEXT://0.0.0.0:9094,SASL_PLAINTEXT://0.0.0.0:9194"
    assert w2.advertised_listeners == "PLAINTEXT://pod-3.skiff:9094,SASL_PLAINTEXT://pod-3.skiff:9194"
    any_port = worker_config(
        base.replace(port=0, listeners=None, advertised_listeners=None, metrics_port=0), 1, "s"
    )
    assert (any_port.port, any_port.metrics_port) == (0, 0)


def test_ports_that_two_workers_would_share_are_refused() -> None:
    check_worker_ports(AgentConfig(port=9092, metrics_port=9100, workers=4))  # 9092-9095, 9100-9104
    with pytest.raises(ValueError, match="port 9100 is taken by the writer's metrics and worker"):
        check_worker_ports(AgentConfig(port=9092, metrics_port=9100, workers=9))
    with pytest.raises(ValueError, match="port 9094 is taken by worker 0 and worker 2"):
        check_worker_ports(
            AgentConfig(listeners="PLAINTEXT://:9092,SASL_PLAINTEXT://:9094", metrics_port=0, workers=3)
        )


def test_kept_runs_hand_the_cache_each_chunk_row_whole_once_every_batch_of_it_is_back() -> None:
    kept: dict[tuple[str, int], bytes] = {}
    runs = KeptRuns(lambda key, start, data: kept.__setitem__((key, start), data), max_files=2)
    row = ChunkLocation(1, "f1", 100, 30, 0, 2, 3, 9)  # offsets 0-2 at bytes 100-129
    other = ChunkLocation(2, "f1", 130, 20, 0, 1, 2, 9)  # partition 2: another worker's batch in it
    placed = (PlacedBatch(0, 100, 10), PlacedBatch(1, 110, 5), PlacedBatch(2, 115, 15))
    runs.learn(
        CommittedFileNews(
            "f1",
            0.0,
            (
                FileChunk(T, 1, True, False, (row,), placed),
                FileChunk(T, 2, True, False, (other,), (PlacedBatch(0, 130, 10), PlacedBatch(1, 140, 10))),
            ),
        )
    )
    runs.stored(T, 1, 2, b"c" * 15)  # out of order
    runs.stored(T, 1, 0, b"a" * 10)
    assert kept == {}
    runs.stored(T, 1, 1, b"bad")  # not the 5 bytes stored there: ignored
    runs.stored(T, 2, 0, b"x" * 10)  # the other half of partition 2's row never comes
    assert kept == {}
    runs.learn(CommittedFileNews("f2", 0.0, (FileChunk(T, 1, True, False, (), ()),)))
    runs.stored(T, 1, 1, b"b" * 5)  # place already claimed by the bad one: nothing
    assert kept == {}

    fresh = KeptRuns(lambda key, start, data: kept.__setitem__((key, start), data), max_files=1)
    fresh.learn(CommittedFileNews("f1", 0.0, (FileChunk(T, 1, True, False, (row,), placed),)))
    for base, data in ((1, b"b" * 5), (0, b"a" * 10), (2, b"c" * 15)):
        fresh.stored(T, 1, base, data)
    assert kept == {("f1", 100): b"a" * 10 + b"b" * 5 + b"c" * 15} and fresh.runs_kept == 1
    fresh.learn(CommittedFileNews("f3", 0.0, ()))  # f1 forgotten (max_files 1)
    fresh.learn(CommittedFileNews("f1", 0.0, ()))
    fresh.stored(T, 1, 0, b"a" * 10)
    assert fresh.runs_kept == 1
