"""What verifying CRC-32C costs the fetch path: select the same 64 MiB with and without it.

    python bench/fetch_verify_crc.py [--mib 64] [--batch-kib 1024] [--record-bytes 1024]

Builds one partition's log of uncompressed batches (like the produce/consume benchmark's
librdkafka batches), places it in chunks of an in-memory object, and times
`fileformat.chunk_reader.select_fetch` over all of it (selection, offset rewrite, copy),
with `verify_crc` off and on. Prints MiB/s for both and the CPU the check adds per GiB.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from skiff.fileformat.chunk_reader import ChunkLocation, PartitionRead, select_fetch  # noqa: E402
from skiff.fileformat.record_build import build_batch  # noqa: E402
from skiff.fileformat.record_decode import Record  # noqa: E402

MiB = 1 << 20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--batch-kib", type=int, default=1024)
    ap.add_argument("--record-bytes", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    per_batch = max(1, args.batch_kib * 1024 // (args.record_bytes + 20))
    value = os.urandom(args.record_bytes)
    batch = build_batch([Record(i, 1_000 + i, None, value) for i in range(per_batch)])
    n_batches = max(1, args.mib * MiB // len(batch))
    blob = batch * n_batches
    chunk_batches = 8  # batches per chunk (one partition's run in one file)
    locs, chunks = [], {}
    for c in range(0, n_batches, chunk_batches):
        k = min(chunk_batches, n_batches - c)
        loc = ChunkLocation(
            c, "obj", c * len(batch), k * len(batch), c * per_batch, (c + k) * per_batch - 1, k * per_batch, 0
        )
        locs.append(loc)
        chunks[loc.range_key] = memoryview(blob)[loc.byte_position : loc.byte_position + loc.byte_length]
    reads = [PartitionRead(locs, 0, len(blob))]
    results = {}
    for verify in (False, True):
        best = float("inf")
        for _ in range(args.repeat):
            t0 = time.process_time()
            out = select_fetch(reads, len(blob), chunks, verify_crc=verify)
            best = min(best, time.process_time() - t0)
            assert not out.missing and len(out.results[0].records) == len(blob)  # type: ignore[union-attr]
        results[verify] = best
    size_mib = len(blob) / MiB
    print(
        f"{size_mib:.0f} MiB in {n_batches} batches of {len(batch) / 1024:.0f} KiB ({per_batch} records each)"
    )
    for verify, secs in results.items():
        print(
            f"verify_crc={verify}: {size_mib / secs:,.0f} MiB/s of fetch selection ({secs * 1000:.1f} ms CPU)"
        )
    extra = (results[True] - results[False]) * 1024 / size_mib
    print(f"CRC-32C check adds {extra * 1000:.0f} ms CPU per GiB served")


if __name__ == "__main__":
    main()
