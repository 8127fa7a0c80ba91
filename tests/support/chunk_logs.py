"""Partition logs laid out as chunks in segment files, for the chunk reader's tests.

`build_log` makes one partition's batches (agent-written: relative offsets, contiguous;
or compactor-written: absolute offsets with holes inside and between batches), splits
them into chunks, writes the chunks into one or more segment files (with other
partitions' chunks between them, as in real files) and returns the files' bytes, the
chunk locations metadata would hold, and the model (each batch's absolute offsets,
record offsets and timestamps) to check answers against.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from skiff.fileformat.batch_header import iter_batches
from skiff.fileformat.chunk_reader import ChunkLocation
from skiff.fileformat.record_build import build_batch
from skiff.fileformat.record_decode import Record, decode_records, validate_batch
from skiff.fileformat.segment import ChunkInput, build_segment

TID = uuid.UUID(int=7)


@dataclass(frozen=True)
class ModelBatch:
    base_offset: int  # absolute
    last_offset: int
    size: int
    offsets: tuple[int, ...]  # absolute offsets of its records
    timestamps: tuple[int, ...]


@dataclass(frozen=True)
class Log:
    files: dict[str, bytes]
    locations: list[ChunkLocation]
    batches: list[ModelBatch]  # in offset order


def build_log(
    batch_shapes: list[tuple[int, int, tuple[int, ...]]],
    chunk_sizes: list[int],
    *,
    absolute: bool,
    start_offset: int = 0,
    files: int = 1,
    filler_bytes: int = 0,
    timestamps: list[int] | None = None,
    key_prefix: str = "obj",
) -> Log:
    """`batch_shapes`: per batch (gap before it, value size, offset deltas of its records);
    agent logs ignore the gap and use deltas 0..n-1. `chunk_sizes`: batches per chunk
    (cycled until every batch is placed). Chunk i goes to file i % `files`; each file also
    holds a filler chunk of `filler_bytes` between ours when > 0."""
    model: list[ModelBatch] = []
    stored: list[bytes] = []
    next_offset = start_offset
    ts_iter = iter(timestamps or [])
    for gap, size, deltas in batch_shapes:
        if not absolute:
            deltas = tuple(range(len(deltas)))
            gap = 0
        base = next_offset + gap
        recs = [Record(d, next(ts_iter, 1_000 + d), f"k{base + d}".encode(), b"v" * size) for d in deltas]
        last_delta = max(deltas)
        data = build_batch(recs, base_offset=base if absolute else 0, last_offset_delta=last_delta)
        model.append(
            ModelBatch(
                base,
                base + last_delta,
                len(data),
                tuple(base + d for d in deltas),
                tuple(r.timestamp for r in recs),
            )
        )
        stored.append(data)
        next_offset = base + last_delta + 1
    # split into chunks
    runs: list[list[int]] = []
    i = 0
    k = 0
    while i < len(stored):
        n = max(1, chunk_sizes[k % len(chunk_sizes)])
        runs.append(list(range(i, min(i + n, len(stored)))))
        i += n
        k += 1
    per_file: dict[int, list[tuple[int, list[int]]]] = {}
    for c, run in enumerate(runs):
        per_file.setdefault(c % files, []).append((c, run))
    out_files: dict[str, bytes] = {}
    locs: dict[int, ChunkLocation] = {}
    for f, chunks in per_file.items():
        inputs = []
        for c, run in chunks:
            batches = [stored[j] for j in run]
            inputs.append(
                ChunkInput(TID, 2 * c + 1, batches, batch_count=len(batches), record_count=1, base_offset=-1)
            )
            if filler_bytes:
                filler = build_batch([Record(0, 0, None, b"f" * filler_bytes)])
                inputs.append(ChunkInput(TID, 2 * c + 2, [filler], batch_count=1, record_count=1))
        blob, placements = build_segment(inputs)
        key = f"{key_prefix}/{f}"
        out_files[key] = blob
        by_partition = {p.partition: p for p in placements}
        for c, run in chunks:
            p = by_partition[2 * c + 1]
            first, last = model[run[0]], model[run[-1]]
            locs[c] = ChunkLocation(
                chunk_id=c,
                object_key=key,
                byte_position=p.data_position,
                byte_length=p.byte_length,
                base_offset=first.base_offset,
                last_offset=last.last_offset,
                record_count=sum(len(model[j].offsets) for j in run),
                max_timestamp=max(max(model[j].timestamps) for j in run),
                offsets_absolute=absolute,
            )
    return Log(out_files, [locs[c] for c in range(len(runs))], model)


def returned_batches(records: bytes) -> list[tuple[int, int, tuple[int, ...]]]:
    """(base offset, size, record offsets) of each batch in a fetch answer; CRCs checked."""
    out = []
    for pos, header in iter_batches(records):
        validate_batch(records, pos)  # the CRC still holds after the base offset rewrite
        offsets = tuple(header.base_offset + r.offset_delta for r in decode_records(records, pos))
        out.append((header.base_offset, header.size, offsets))
    return out


def expected_selection(
    log: Log, fetch_offset: int, max_bytes: int, first_batch_unbounded: bool = True
) -> list[ModelBatch]:
    """Kafka's rule, stated over the model: skip batches wholly below the offset, then
    whole batches while they fit, the first one even if it does not (KIP-74)."""
    out: list[ModelBatch] = []
    total = 0
    for b in log.batches:
        if b.last_offset < fetch_offset:
            continue
        if total + b.size > max_bytes and (out or not first_batch_unbounded):
            break
        out.append(b)
        total += b.size
        if total >= max_bytes:
            break
    return out
