"""Compaction dedup path: records/s and MiB/s per core, peak RSS, key-map bytes, GETs per file.

    python bench/compaction.py KEYS [UPDATES]      e.g. 1000000 3

Writes agent-like segment files (8 MiB, one compacted partition, batches of 100
uncompressed records of 100 bytes: a 12-byte key and an 80-byte value) holding each of
KEYS distinct keys UPDATES times in random order to a file:// bucket in a temp dir, then
runs one compaction job (first clean: everything dirty, 128 MiB key map) in a fresh
process so that its peak RSS is the job's alone. The swap is a no-op (metadata is not
on the measured path). One process, one thread: the rates are per core.
"""

from __future__ import annotations

import pickle
import random
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from compactor.job import run_job
from compactor.plan import InputChunk, InputFile, JobPlan, PartitionWork
from fileformat.chunk_reader import ChunkLocation
from fileformat.objectstore import open_store
from fileformat.records import Record, build_batch
from fileformat.segment import ChunkInput, build_segment

TOPIC = uuid.UUID(int=0xBE)
RECORDS_PER_BATCH = 100
FILE_BYTES = 8 << 20


def generate(root: Path, keys: int, updates: int) -> None:
    store = open_store(f"file://{root}", fsync=False)
    rng = random.Random(1)
    value = b"v" * 80
    order = [k for _ in range(updates) for k in range(keys)]
    rng.shuffle(order)
    files = []
    offset = 0
    batches: list[bytes] = []
    file_first = 0
    cid = 0

    def flush() -> None:
        nonlocal batches, file_first, cid
        count = offset - file_first
        data, placements = build_segment([ChunkInput(TOPIC, 0, batches, len(batches), count)])
        name = f"agent/{len(files):06d}"
        store.put(name, data)
        pl = placements[0]
        cid += 1
        loc = ChunkLocation(cid, name, pl.data_position, pl.byte_length, file_first, offset - 1, count, 0)
        files.append(InputFile(name, len(data), (InputChunk(TOPIC, 0, loc),)))
        batches = []
        file_first = offset

    size = 0
    for i in range(0, len(order), RECORDS_PER_BATCH):
        recs = [
            Record(d, 1000, b"key-%08d" % k, value, ())
            for d, k in enumerate(order[i : i + RECORDS_PER_BATCH])
        ]
        b = build_batch(recs)
        batches.append(b)
        size += len(b)
        offset += len(recs)
        if size >= FILE_BYTES:
            flush()
            size = 0
    if batches:
        flush()
    work = PartitionWork(TOPIC, 0, "bench", True, False, 0, offset, 86_400_000)
    plan = JobPlan("bench", tuple(files), (work,), 2_000_000)
    (root / "plan.pickle").write_bytes(pickle.dumps(plan))


def run(root: Path) -> None:
    plan: JobPlan = pickle.loads((root / "plan.pickle").read_bytes())
    store = open_store(f"file://{root}", fsync=False)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    c0 = time.process_time()
    result = run_job(plan, store, lambda *a: None, key_prefix="out/")
    cpu = time.process_time() - c0
    wall = time.perf_counter() - t0
    s = result.stats
    gets = set(s.gets_per_input_file.values())
    print(
        f"records_in={s.records_in} records_out={s.records_out} files_in={s.files_in} "
        f"MiB_in={s.bytes_in / 2**20:.1f} wall_s={wall:.1f} cpu_s={cpu:.1f} "
        f"records_per_s_per_core={s.records_in / cpu:,.0f} MiB_per_s_per_core={s.bytes_in / 2**20 / cpu:.1f} "
        f"peak_rss_MiB={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} "
        f"(before job {rss0 / 1024:.0f}) keymap_MiB={s.peak_keymap_bytes / 2**20:.0f} "
        f"map_full={bool(result.map_full)} gets_per_input_file={sorted(gets)}"
    )


def main() -> None:
    if sys.argv[1] == "--run":
        run(Path(sys.argv[2]))
        return
    keys = int(sys.argv[1])
    updates = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    with tempfile.TemporaryDirectory(prefix="skiff-bench-compaction-") as tmp:
        t0 = time.perf_counter()
        generate(Path(tmp), keys, updates)
        print(f"keys={keys} updates={updates} generated in {time.perf_counter() - t0:.0f}s", flush=True)
        subprocess.run([sys.executable, __file__, "--run", tmp], check=True)


if __name__ == "__main__":
    main()
