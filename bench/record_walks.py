"""Micro-bench of the record walks that read varints: decode, produce validation, cleaner scan.

    python bench/record_walks.py [--records 100] [--value-bytes 100] [--baseline DIR]

Times, per record, `record_decode.decode_records` (consumers, tools), the produce path's
`log_validator.validate_produced_batch`, and the cleaner's `scan_records` on one
uncompressed batch of records with a 10-byte key and a `--value-bytes` value (two-byte length
varints from 64 bytes on), without and with two headers a record.

With `--baseline DIR` (another checkout, e.g. main's), the same three functions are loaded
from DIR's files and timed interleaved with this checkout's, run for run, so that a busy
machine slows both alike; the table then gives both and their ratio (best of `--repeat`).
"""

from __future__ import annotations

import argparse
import importlib.util
import timeit
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from skiff.fileformat import log_validator, record_build, record_decode
from skiff.fileformat.batch_header import BATCH_HEADER_SIZE, parse_header
from skiff.fileformat.record_build import build_batch
from skiff.fileformat.varint import encode_varint


def _batch(records: int, value_bytes: int, headers: bool) -> bytes:
    hdrs = [("trace", b"x" * 16), ("origin", None)] if headers else []
    return build_batch(
        [(i, 1_700_000_000_000 + i, b"key-%06d" % i, b"v" * value_bytes, hdrs) for i in range(records)]
    )


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _functions(decode_mod: Any, validator_mod: Any, scan_mod: Any) -> dict[str, Callable[..., Any]]:
    return {
        "decode_records": decode_mod.decode_records,
        "validate_produced_batch": validator_mod.validate_produced_batch,
        "scan_records": scan_mod.scan_records,
    }


def _cases(fns: dict[str, Callable[..., Any]], buf: bytes, n: int) -> dict[str, Callable[[], Any]]:
    header = parse_header(buf)
    payload = buf[BATCH_HEADER_SIZE:]
    decode, validate, scan = fns["decode_records"], fns["validate_produced_batch"], fns["scan_records"]
    return {
        "decode_records": lambda: decode(buf),
        "validate_produced_batch": lambda: validate(buf, 0, header, now_ms=0),
        "scan_records": lambda: scan(payload, n),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=100)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--baseline", type=Path, default=None)
    args = ap.parse_args()
    n = args.records
    here = _functions(record_decode, log_validator, record_decode)
    base = None
    if args.baseline is not None:
        d = args.baseline
        # checkouts before fileformat.varint: their compactor/rebuild.py imports this name
        record_build.zigzag_varint = encode_varint  # type: ignore[attr-defined]
        base = _functions(
            _load(d / "fileformat/record_decode.py", "baseline_record_decode"),
            _load(d / "fileformat/log_validator.py", "baseline_log_validator"),
            _load(d / "compactor/rebuild.py", "baseline_rebuild"),
        )
    print("| walk | headers | ns/record | baseline ns/record | ratio |")
    loops = max(1, 20_000 // n)
    for headers in (False, True):
        buf = _batch(n, args.value_bytes, headers)
        now = _cases(here, buf, n)
        then = _cases(base, buf, n) if base is not None else None
        for name, fn in now.items():
            best_now = best_then = float("inf")
            for _ in range(args.repeat):  # interleaved: both see the same machine load
                best_now = min(best_now, timeit.timeit(fn, number=loops))
                if then is not None:
                    best_then = min(best_then, timeit.timeit(then[name], number=loops))
            ns_now = best_now / loops / n * 1e9
            if then is None:
                print(f"| {name} | {2 if headers else 0} | {ns_now:.0f} | | |")
            else:
                ns_then = best_then / loops / n * 1e9
                print(
                    f"| {name} | {2 if headers else 0} | {ns_now:.0f} | {ns_then:.0f} | {ns_now / ns_then:.2f} |"
                )


if __name__ == "__main__":
    main()
