"""CPU cost of checking produced batches (`agent.handlers.produce.validate_batches`), per GiB.

    python bench/produce_validation.py [--record-bytes 1024] [--mib 64]

Runs the agent's Produce validation in-process on batches of 1 KiB records as librdkafka
sends them (no key, no headers, uncompressed; also zstd), at several records per batch, and
prints process CPU seconds per GiB of batches and microseconds per batch. Run it with
PYTHONPATH pointing at another checkout to compare two versions of the code (the function's
signature is probed, so older checkouts without per-record validation run too).
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from skiff.agent.handlers import produce  # noqa: E402
from skiff.fileformat.batch_header import Compression  # noqa: E402
from skiff.fileformat.record_build import build_batch  # noqa: E402
from skiff.fileformat.record_decode import Record  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--record-bytes", type=int, default=1024)
    ap.add_argument("--mib", type=int, default=64)
    args = ap.parse_args()
    value = os.urandom(args.record_bytes)
    now_ms = int(time.time() * 1000)
    per_record = "now_ms" in inspect.signature(produce.validate_batches).parameters
    extra = {"now_ms": now_ms} if per_record else {}
    print(
        f"| codec | records/batch | CPU s/GiB | us/batch |  ({'per-record validation' if per_record else 'headers and CRC only'})"
    )
    print("|---|---|---|---|")
    for codec in (Compression.NONE, Compression.ZSTD):
        for per_batch in (1, 7, 100, 1000):
            batch = build_batch(
                [Record(i, now_ms + i, None, value, ()) for i in range(per_batch)], compression=codec
            )
            raw_bytes = per_batch * args.record_bytes
            n = max(1, (args.mib << 20) // raw_bytes)
            t = time.process_time()
            for _ in range(n):
                produce.validate_batches(batch, max_message_bytes=1 << 30, log_append_time_ms=None, **extra)
            cpu = time.process_time() - t
            print(
                f"| {codec.name.lower()} | {per_batch} | {cpu / (n * raw_bytes) * 2**30:.2f} | {cpu / n * 1e6:.1f} |"
            )


if __name__ == "__main__":
    main()
