"""Compaction output streamed to the bucket: a partition larger than the spool goes through
local disk, the file is uploaded in parts (a multipart upload on S3, the same code path),
every byte and chunk row is right, and a failed job leaves no upload or temp file."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from pyroaring import BitMap
from skiff.compactor.dedup import OutBatch
from skiff.compactor.output import Checkpoint, OutputFiles
from skiff.fileformat.objectstore import ObjectStore, open_store
from skiff.fileformat.objectstore.base import MIN_PART_BYTES
from skiff.fileformat.record_build import build_batch
from skiff.fileformat.record_decode import Record
from skiff.fileformat.segment import iter_chunks_stream, read_footer_from_bytes
from skiff.metadata.types import FileSpec, OutputChunk

from tests.support.s3servers import S3Bucket

TOPIC = uuid.UUID(int=0xAB)


@pytest.fixture(params=["file", pytest.param("moto", marks=pytest.mark.s3)])
def store(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ObjectStore]:
    if request.param == "file":
        s = open_store(f"file://{tmp_path}/bucket", fsync=False)
    else:
        bucket: S3Bucket = request.getfixturevalue("moto_s3")
        bucket.setenv(monkeypatch)
        s = open_store(bucket.url("out"))
    yield s
    s.close()


def _batches(first_offset: int, count: int, value_bytes: int) -> list[OutBatch]:
    out = []
    for i in range(count):
        base = first_offset + i * 10
        data = build_batch(
            [
                Record(d, 1000 + i, b"k%d-%d" % (i, d), bytes([i % 251]) * value_bytes)
                for d in range(0, 10, 2)
            ],
            base_offset=base,
        )
        out.append(OutBatch(data, base, base + 9, BitMap(range(0, 10, 2)), 5, 1000 + i))
    return out


class Swaps:
    def __init__(self) -> None:
        self.calls: list[tuple[list[int], FileSpec, list[OutputChunk], list[Checkpoint]]] = []

    def __call__(
        self, inputs: Sequence[int], file: FileSpec, outputs: Sequence[OutputChunk], cps: Sequence[Checkpoint]
    ) -> None:
        self.calls.append((list(inputs), file, list(outputs), list(cps)))


def test_partition_larger_than_spool_and_part_streams_in_pieces(store: ObjectStore) -> None:
    swaps = Swaps()
    out = OutputFiles(
        store, swaps, key_prefix="job", writer_id="t", part_bytes=MIN_PART_BYTES, spool_bytes=256 * 1024
    )
    batches = _batches(1000, 1200, 2000)  # ~12 MiB: the spool spills to disk, 3 parts on S3
    out.begin_partition(TOPIC, 0)
    for i, b in enumerate(batches):
        out.add(b)
        if i % 100 == 99:
            out.end_input(i // 100)
    cp = Checkpoint(TOPIC, 0, 13_000)
    out.end_partition(cp)
    out.finish()

    assert out.object_keys == ["job-0000.seg"] and len(swaps.calls) == 1
    inputs, spec, chunks, cps = swaps.calls[0]
    assert inputs == list(range(12)) and cps == [cp]
    body = store.get("job-0000.seg")
    assert spec.size_bytes == len(body) == out.bytes_out
    [(header, data)] = list(iter_chunks_stream(iter([body]), "job"))
    assert data == b"".join(b.data for b in batches)
    [chunk] = chunks
    assert (chunk.byte_position, chunk.byte_length) == (header.data_position, len(data))
    assert (chunk.base_offset, chunk.last_offset, chunk.batch_count, chunk.record_count) == (
        1000,
        12_999,
        1200,
        6000,
    )
    assert BitMap.deserialize(chunk.present_offsets) == BitMap(
        o - 1000 for b in batches for o in range(b.base_offset, b.base_offset + 10, 2)
    )
    _, [entry] = read_footer_from_bytes(body)
    assert (entry.base_offset, entry.last_offset, entry.record_count) == (1000, 12_999, 6000)
    requests = store.stats.snapshot().requests
    if store.url.startswith("s3://"):
        assert requests["create_multipart_upload"] == 1 and requests["upload_part"] == 3
        assert requests["complete_multipart_upload"] == 1 and "put" not in requests
    else:
        assert requests["put"] == 1


def test_roll_splits_a_partition_over_files_swapped_in_steps(store: ObjectStore) -> None:
    swaps = Swaps()
    out = OutputFiles(
        store,
        swaps,
        key_prefix="roll",
        writer_id="t",
        roll_bytes=3 << 20,
        part_bytes=MIN_PART_BYTES,
        spool_bytes=64 * 1024,
    )
    batches = _batches(0, 800, 2000)  # ~8 MiB over 3 MiB files
    out.begin_partition(TOPIC, 3)
    for i, b in enumerate(batches):
        out.add(b)
        if i % 50 == 49:
            out.end_input(i // 50)
    out.end_partition(Checkpoint(TOPIC, 3, 8000))
    out.finish()
    assert len(out.object_keys) == len(swaps.calls) >= 3
    seen_inputs = [i for call in swaps.calls for i in call[0]]
    assert seen_inputs == list(range(16))
    assert [len(call[3]) for call in swaps.calls] == [0] * (len(swaps.calls) - 1) + [1]
    joined = b""
    for key, (_, spec, chunks, _) in zip(out.object_keys, swaps.calls, strict=True):
        body = store.get(key)
        assert spec.size_bytes == len(body)
        [(header, data)] = list(iter_chunks_stream(iter([body]), key))
        assert chunks[0].byte_length == len(data)
        joined += data
    assert joined == b"".join(b.data for b in batches)


def test_a_failed_swap_aborts_the_next_files_upload(store: ObjectStore, tmp_path: Path) -> None:
    """abort() after a partition began in a new file: no object, no multipart upload, no temp file."""
    out = OutputFiles(
        store, Swaps(), key_prefix="fail", writer_id="t", part_bytes=MIN_PART_BYTES, spool_bytes=64 * 1024
    )
    out.begin_partition(TOPIC, 0)
    for b in _batches(0, 700, 2000):  # ~7 MiB: a part is uploaded (S3) before the failure
        out.add(b)
    out.end_partition(None)
    out.begin_partition(TOPIC, 1)
    for b in _batches(0, 10, 100):
        out.add(b)
    out.abort()
    assert list(store.list()) == []
    if store.url.startswith("s3://"):
        assert store.stats.snapshot().requests.get("abort_multipart_upload") == 1
    else:
        assert [p for p in (tmp_path / "bucket").rglob("*") if p.is_file()] == []


def test_run_job_failing_midway_aborts_the_open_upload(
    store: ObjectStore, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Partition 0 (9 MB of distinct keys) is written into the open output file (on S3 a
    multipart upload with one 8 MiB part done), then partition 1's input file is missing:
    the job raises, the upload is aborted, nothing is left in the bucket but the input."""
    from skiff.compactor.job import run_job
    from skiff.compactor.plan import InputChunk, InputFile, JobPlan, PartitionWork
    from skiff.fileformat.chunk_reader import ChunkLocation
    from skiff.fileformat.objectstore import ObjectNotFound
    from skiff.fileformat.segment import ChunkInput, build_segment

    batches = [
        build_batch([Record(d, 1000, b"key-%d" % (i * 10 + d), b"v" * 3000) for d in range(10)])
        for i in range(300)
    ]
    data, [pl] = build_segment([ChunkInput(TOPIC, 0, batches, len(batches), 3000)])
    store.put("agent/1", data)
    loc0 = ChunkLocation(1, "agent/1", pl.data_position, pl.byte_length, 0, 2999, 3000, 0)
    loc1 = ChunkLocation(2, "agent/missing", 16, 100, 0, 9, 10, 0)
    plan = JobPlan(
        "j",
        (
            InputFile("agent/1", len(data), (InputChunk(TOPIC, 0, loc0),)),
            InputFile("agent/missing", 1000, (InputChunk(TOPIC, 1, loc1),)),
        ),
        (
            PartitionWork(TOPIC, 0, "t", True, False, 0, 3000, 1000),
            PartitionWork(TOPIC, 1, "t", True, False, 0, 10, 1000),
        ),
        0,
    )
    swaps = Swaps()
    with pytest.raises(ObjectNotFound):
        run_job(plan, store, swaps, key_prefix="out/")
    assert swaps.calls == []
    assert [i.key for i in store.list()] == ["agent/1"]
    if store.url.startswith("s3://"):
        requests = store.stats.snapshot().requests
        assert requests["upload_part"] == 1 and requests["abort_multipart_upload"] == 1
        bucket: S3Bucket = request.getfixturevalue("moto_s3")
        assert bucket.client().list_multipart_uploads(Bucket=bucket.name).get("Uploads", []) == []
    else:
        assert [p.name for p in (tmp_path / "bucket").rglob(".*")] == []


def test_output_chunks_carry_the_smallest_input_min_timestamp_or_unknown(tmp_path: Path) -> None:
    """A compactor only drops records, so the smallest min_timestamp of the inputs a chunk's
    batches came from bounds its records (Spark prunes upper time bounds with it); one input
    without a min (NULL) makes the output's unknown, and each rolled file has its own."""
    store = open_store(f"file://{tmp_path}/bucket", fsync=False)
    swaps = Swaps()
    out = OutputFiles(store, swaps, key_prefix="mins", writer_id="t", roll_bytes=1 << 20)
    batches = _batches(0, 40, 30_000)  # ~6 MiB: several files
    mins = [500 - i for i in range(40)]  # input i (4 batches each) has min 500 - 4i
    out.begin_partition(TOPIC, 0)
    for i, b in enumerate(batches):
        out.add(b, mins[i - i % 4])
        if i % 4 == 3:
            out.end_input(i // 4)
    out.end_partition(None)
    out.begin_partition(TOPIC, 1)
    out.add(batches[0], 7)
    out.add(batches[1], None)  # an input written before metadata kept mins
    out.end_input(10)
    out.end_partition(None)
    out.finish()
    store.close()
    chunks = [c for call in swaps.calls for c in call[2]]
    first_files = [c for c in chunks if c.partition == 0]
    assert len(first_files) >= 2
    for c in first_files:
        inputs = [i for i, b in enumerate(batches) if c.base_offset <= b.base_offset <= c.last_offset]
        assert c.min_timestamp == min(mins[i - i % 4] for i in inputs)
    assert [c.min_timestamp for c in chunks if c.partition == 1] == [None]
    # the files' footers say the same (-1: unknown)
    store = open_store(f"file://{tmp_path}/bucket", fsync=False)
    footer_mins = [
        e.min_timestamp for key in out.object_keys for e in read_footer_from_bytes(store.get(key))[1]
    ]
    store.close()
    assert footer_mins == [-1 if c.min_timestamp is None else c.min_timestamp for c in chunks]
