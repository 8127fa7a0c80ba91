"""What `kafka.isolation.level=read_committed` costs the Spark source's executors.

One in-memory chunk (absolute offsets, as compactor output) of transactional data: 4
producers interleave transactions of 2 batches each followed by their marker, every
`--abort-every`-th transaction aborted, and non-transactional batches in between. The
same chunk is decoded by `spark.decode.RecordBatchBuilder` three ways, interleaved and
best-of-N:

- `uncommitted`: no aborted list (read_uncommitted; markers skipped);
- `committed`: the chunk's aborted transactions given (read_committed): their batches
  are masked out before decoding (`spark.aborted`);
- `mask`: the batch-level mask alone (`AbortedTransactions.mask` over the chunk's batch
  headers), to show the bookkeeping per batch.

Printed: input records per second for each (records in the chunk / time), rows out, and
the ratio committed/uncommitted measured in the same run. No bucket, no Spark: the
decoder is what read_committed changes.

    python bench/spark_read_committed.py [--records 400000] [--per-batch 500] [--repeat 5]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from skiff.fileformat.chunk_reader import ChunkLocation, iter_chunk_batches  # noqa: E402
from skiff.fileformat.record_build import build_batch, build_control_batch  # noqa: E402
from skiff.fileformat.record_decode import ControlRecordType  # noqa: E402
from skiff.fileformat.segment import ChunkInput, build_segment  # noqa: E402
from skiff.spark.aborted import AbortedTransactions  # noqa: E402
from skiff.spark.decode import RecordBatchBuilder  # noqa: E402

VALUE = b"v" * 100


def make_chunk(
    records: int, per_batch: int, abort_every: int
) -> tuple[ChunkLocation, bytes, list[tuple[int, int]]]:
    batches: list[bytes] = []
    aborted: list[tuple[int, int]] = []
    offset = txn = 0
    open_txn: dict[int, tuple[int, int]] = {}  # pid -> (first offset, batches written)
    data_records = 0
    step = 0
    while data_records < records:
        step += 1
        pid = 1 + step % 4
        if step % 5 == 0:  # a non-transactional batch
            recs = [(i, 0, None, VALUE, ()) for i in range(per_batch)]
            batches.append(build_batch(recs, base_offset=offset, base_timestamp=1))
            offset += per_batch
            data_records += per_batch
            continue
        first, written = open_txn.get(pid, (offset, 0))
        if written == 2:
            txn += 1
            abort = txn % abort_every == 0
            kind = ControlRecordType.ABORT if abort else ControlRecordType.COMMIT
            batches.append(
                build_control_batch(
                    kind,
                    producer_id=pid,
                    producer_epoch=0,
                    coordinator_epoch=0,
                    timestamp=1,
                    base_offset=offset,
                )
            )
            if abort:
                aborted.append((pid, first))
            offset += 1
            del open_txn[pid]
            continue
        recs = [(i, 0, None, VALUE, ()) for i in range(per_batch)]
        batches.append(
            build_batch(
                recs,
                base_offset=offset,
                producer_id=pid,
                producer_epoch=0,
                is_transactional=True,
                base_timestamp=1,
            )
        )
        open_txn[pid] = (first, written + 1)
        offset += per_batch
        data_records += per_batch
    chunk = ChunkInput(uuid.uuid4(), 0, batches, len(batches), offset, 1, 1, 0, offset - 1)
    data, (placement,) = build_segment([chunk], offsets_absolute=True)
    loc = ChunkLocation(
        1,
        "bench",
        placement.data_position,
        placement.byte_length,
        0,
        offset - 1,
        offset,
        1,
        offsets_absolute=True,
    )
    return loc, data[placement.data_position : placement.data_position + placement.byte_length], aborted


def decode(loc: ChunkLocation, data: bytes, aborted: list[tuple[int, int]]) -> int:
    builder = RecordBatchBuilder("t", 0, 0, loc.last_offset + 1, aborted=aborted)
    rows = sum(b.num_rows for b in builder.add_chunk(loc, data))
    last = builder.flush()
    return rows + (last.num_rows if last is not None else 0)


def mask_only(loc: ChunkLocation, data: bytes, aborted: list[tuple[int, int]]) -> int:
    batches = list(iter_chunk_batches(loc, memoryview(data)))
    n = len(batches)
    attrs = np.fromiter((b.header.attributes for b in batches), np.int64, n)
    drop = AbortedTransactions(aborted).mask(
        np.fromiter((b.header.producer_id for b in batches), np.int64, n),
        np.fromiter((b.base_offset for b in batches), np.int64, n),
        (attrs & 0x20) != 0,
        (attrs & 0x10) != 0,
    )
    return int(drop.sum())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--per-batch", type=int, default=500)
    ap.add_argument("--abort-every", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    loc, data, aborted = make_chunk(args.records, args.per_batch, args.abort_every)
    cases: dict[str, Callable[[], int]] = {
        "uncommitted": lambda: decode(loc, data, []),
        "committed": lambda: decode(loc, data, aborted),
        "mask": lambda: mask_only(loc, data, aborted),
    }
    for fn in cases.values():  # warm-up (numba compile / cache load)
        fn()
    best = dict.fromkeys(cases, float("inf"))
    out: dict[str, int] = {}
    for _ in range(args.repeat):
        for name, fn in cases.items():
            t0 = time.perf_counter()
            out[name] = fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    print(
        f"chunk: {loc.record_count} offsets, {len(data) / 2**20:.1f} MiB, {len(aborted)} aborted transactions"
    )
    for name in cases:
        unit = "batches dropped" if name == "mask" else "rows out"
        print(
            f"{name:12s} {loc.record_count / best[name] / 1e6:8.2f} M offsets/s  {best[name] * 1e3:8.1f} ms  {out[name]} {unit}"
        )
    print(f"committed/uncommitted time ratio: {best['committed'] / best['uncommitted']:.2f}")


if __name__ == "__main__":
    main()
