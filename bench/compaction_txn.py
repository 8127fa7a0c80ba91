"""Compaction of transactional data against the same data written without transactions.

    python bench/compaction_txn.py [--keys 200000] [--updates 3] [--txn-batches 10] [--repeat 2]

Builds, in memory (a memory:// bucket), one compacted partition three ways from the same
records (batches of 100 uncompressed 100-byte records: 12-byte key, 80-byte value; each
of KEYS keys written UPDATES times in random order), in agent-like 8 MiB segment files:

- plain: no producer id;
- committed: transactional batches of one producer, a COMMIT marker after every
  TXN_BATCHES batches;
- a third aborted: the same, every third transaction ended by an ABORT marker instead
  (the plan carries those as aborted: their batches are dropped and never keyed).

Then one clean of each (the first clean over everything: pass 1, pass 2, outputs written
to the bucket, a no-op swap), in turns (plain, committed, aborted, plain, ...) REPEAT
times, and prints the CPU time (`process_time`, one thread: per core) of each, the best
of each layout, and the ratios to plain measured in the same run.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import crc32c
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from skiff.compactor.job import run_job
from skiff.compactor.output import Checkpoint
from skiff.compactor.plan import InputChunk, InputFile, JobPlan, PartitionWork
from skiff.fileformat.chunk_reader import ChunkLocation
from skiff.fileformat.objectstore.memory import MemoryStore, drop_memory_bucket
from skiff.fileformat.record_build import build_batch, build_control_batch
from skiff.fileformat.record_decode import ControlRecordType, Record
from skiff.fileformat.segment import ChunkInput, build_segment
from skiff.metadata.types import FileSpec, OutputChunk

TOPIC = uuid.UUID(int=0xBF)
VALUE = b"v" * 80
RECORDS_PER_BATCH = 100
FILE_BYTES = 8 << 20
PID = 7
ATTR_TRANSACTIONAL = 0x10


def _template() -> tuple[np.ndarray, np.ndarray]:
    marks = [b"key-%08d" % (90_000_000 + d) for d in range(RECORDS_PER_BATCH)]
    batch = build_batch([Record(d, 1000, marks[d], VALUE, ()) for d in range(RECORDS_PER_BATCH)])
    return np.frombuffer(batch, np.uint8), np.array([batch.index(m) for m in marks], np.int64)


def encode(keys: np.ndarray, transactional: bool) -> list[bytes]:
    """Batches whose record d has key b"key-%08d" % keys[i, d]; transactional ones carry
    producer PID, epoch 0, consecutive sequences and the transactional attribute."""
    template, positions = _template()
    out = np.tile(template, (len(keys), 1))
    digits = (keys[:, :, None] // (10 ** np.arange(7, -1, -1))) % 10 + ord("0")
    out[:, positions[:, None] + 4 + np.arange(8)] = digits.astype(np.uint8)
    batches = []
    for i, row in enumerate(out):
        b = bytearray(row.tobytes())
        if transactional:
            b[21:23] = (int.from_bytes(b[21:23], "big") | ATTR_TRANSACTIONAL).to_bytes(2, "big")
            b[43:51] = PID.to_bytes(8, "big")
            b[51:53] = (0).to_bytes(2, "big")
            b[53:57] = (i * RECORDS_PER_BATCH % (1 << 31)).to_bytes(4, "big")
        b[17:21] = crc32c.crc32c(b[21:]).to_bytes(4, "big")
        batches.append(bytes(b))
    return batches


def layout(
    store: MemoryStore, name: str, batches: list[bytes], txn_batches: int, abort_every: int
) -> tuple[tuple[InputFile, ...], int, tuple[tuple[int, int, int], ...]]:
    """The batches (markers inserted when txn_batches > 0) in 8 MiB files: the plan's
    input files, the offset end, and the aborted transactions."""
    log: list[tuple[bytes, int]] = []  # (batch, offsets it takes)
    aborted: list[tuple[int, int, int]] = []
    offset = 0
    txn_first = 0
    for i, b in enumerate(batches):
        if txn_batches and i % txn_batches == 0:
            txn_first = offset
        log.append((b, RECORDS_PER_BATCH))
        offset += RECORDS_PER_BATCH
        if txn_batches and (i % txn_batches == txn_batches - 1 or i == len(batches) - 1):
            n = i // txn_batches
            abort = abort_every > 0 and n % abort_every == abort_every - 1
            marker = ControlRecordType.ABORT if abort else ControlRecordType.COMMIT
            log.append(
                (
                    build_control_batch(
                        marker, producer_id=PID, producer_epoch=0, coordinator_epoch=0, timestamp=1000
                    ),
                    1,
                )
            )
            if abort:
                aborted.append((PID, txn_first, offset))
            offset += 1
    files: list[InputFile] = []
    first = 0
    i = 0
    while i < len(log):
        part: list[bytes] = []
        size = count = offsets = 0
        while i < len(log) and size < FILE_BYTES:
            b, n = log[i]
            part.append(b)
            size += len(b)
            offsets += n
            count += n
            i += 1
        data, placements = build_segment([ChunkInput(TOPIC, 0, part, len(part), count)])
        key = f"{name}/{len(files):06d}"
        store.put(key, data)
        pl = placements[0]
        loc = ChunkLocation(
            len(files) + 1, key, pl.data_position, pl.byte_length, first, first + offsets - 1, count, 1000
        )
        files.append(InputFile(key, len(data), (InputChunk(TOPIC, 0, loc),)))
        first += offsets
    return tuple(files), offset, tuple(aborted)


def no_swap(
    inputs: Sequence[int], spec: FileSpec, outputs: Sequence[OutputChunk], checkpoints: Sequence[Checkpoint]
) -> None:
    pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=200_000)
    ap.add_argument("--updates", type=int, default=3)
    ap.add_argument("--txn-batches", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    store = MemoryStore(f"bench-txn-{uuid.uuid4().hex[:8]}")
    try:
        rng = np.random.default_rng(1)
        order = np.tile(np.arange(args.keys, dtype=np.int64), args.updates)
        rng.shuffle(order)
        whole = len(order) // RECORDS_PER_BATCH * RECORDS_PER_BATCH
        keys = order[:whole].reshape(-1, RECORDS_PER_BATCH)
        layouts = {
            "plain": layout(store, "plain", encode(keys, False), 0, 0),
            "committed": layout(store, "committed", encode(keys, True), args.txn_batches, 0),
            "third aborted": layout(store, "aborted", encode(keys, True), args.txn_batches, 3),
        }
        best: dict[str, float] = {}
        for rnd in range(args.repeat):
            for name, (files, end, aborted) in layouts.items():
                work = PartitionWork(TOPIC, 0, "bench", True, False, 0, end, 86_400_000, aborted)
                plan = JobPlan(f"{name}-{rnd}".replace(" ", "-"), files, (work,), 2_000_000)
                c0 = time.process_time()
                result = run_job(plan, store, no_swap, key_prefix=f"out-{rnd}-")
                cpu = time.process_time() - c0
                s = result.stats
                best[name] = min(best.get(name, cpu), cpu)
                print(
                    f"round={rnd} layout={name!r} records_in={s.records_in} records_out={s.records_out} "
                    f"MiB_in={s.bytes_in / 2**20:.1f} cpu_s={cpu:.2f} "
                    f"records_per_s_per_core={s.records_in / cpu:,.0f} "
                    f"gets_per_input_file={sorted(set(s.gets_per_input_file.values()))}",
                    flush=True,
                )
        base = best["plain"]
        for name, cpu in best.items():
            print(f"best layout={name!r} cpu_s={cpu:.2f} ratio_to_plain={cpu / base:.2f}")
    finally:
        drop_memory_bucket(store.name)


if __name__ == "__main__":
    main()
