"""Compaction benchmarks: the dedup path (compacted topics) and the delete-policy merge.

    python bench/compaction.py dedup KEYS [UPDATES] [--dir DIR]   e.g. dedup 5000000 3
    python bench/compaction.py merge [--mib 256] [--partitions 16] [--file-mib 8]

dedup: writes agent-like segment files (8 MiB, one compacted partition, batches of 100
uncompressed records of 100 bytes: a 12-byte key and an 80-byte value) holding each of
KEYS distinct keys UPDATES times in random order to a file:// bucket in a temp dir, then
runs compaction jobs (128 MiB key map) in a fresh process so that its peak RSS is the
jobs' alone. The first clean covers everything dirty; when the key map fills (more
distinct keys than it holds) the clean stops at the offset where it filled, as Kafka's
does, and the next clean starts there over the first clean's output files, until the
whole log is clean. The swap is a no-op that keeps the output chunk rows (metadata is
not on the measured path). One process, one thread: the rates are per core.

merge: a delete-policy topic of PARTITIONS partitions in a SQLite metadata and a
file:// bucket, written as an agent writes keyed data: every 8 MiB file holds a chunk of
every partition (batches of 16 records of 1 KiB). Then, twice (level 0, then after one
maintenance pass has merged level 0 into level 1): chunk rows per partition, and a cold
consume of everything through the synchronous read path (`fileformat.read_sync`, a
fresh store: no cache), fetches of 55 MiB with 4 MiB per partition, counting ranged GETs.
"""

from __future__ import annotations

import argparse
import asyncio
import pickle
import subprocess
import sys
import tempfile
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
from skiff.compactor.runner import RunnerConfig, run_pass
from skiff.fileformat.chunk_reader import ChunkLocation, PartitionRead
from skiff.fileformat.objectstore import ObjectStore, open_store
from skiff.fileformat.read_sync import read_fetch
from skiff.fileformat.record_build import build_batch
from skiff.fileformat.record_decode import Record
from skiff.fileformat.segment import ChunkInput, build_segment
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService
from skiff.metadata.types import BatchSpec, ChunkSpec, FetchQuery, FileSpec, OutputChunk

TOPIC = uuid.UUID(int=0xBE)
VALUE = b"v" * 80
RECORDS_PER_BATCH = 100
FILE_BYTES = 8 << 20
MAX_CLEANS = 5

# ------------------------------------------------------------------ dedup


def _template() -> tuple[np.ndarray, np.ndarray]:
    """One batch of RECORDS_PER_BATCH records as `build_batch` encodes it, and the byte
    positions of its keys: every generated batch is this one with other keys (and CRC)."""
    marks = [b"key-%08d" % (90_000_000 + d) for d in range(RECORDS_PER_BATCH)]
    batch = build_batch([Record(d, 1000, marks[d], VALUE, ()) for d in range(RECORDS_PER_BATCH)])
    positions = np.array([batch.index(m) for m in marks], np.int64)
    return np.frombuffer(batch, np.uint8), positions


def encode_batches(keys: np.ndarray, template: np.ndarray, positions: np.ndarray) -> list[bytes]:
    """Batches whose record d has key b"key-%08d" % keys[i, d] (vectorised build_batch)."""
    n = len(keys)
    out = np.tile(template, (n, 1))
    digits = (keys[:, :, None] // (10 ** np.arange(7, -1, -1))) % 10 + ord("0")
    cols = positions[:, None] + 4 + np.arange(8)  # after b"key-"
    out[:, cols] = digits.astype(np.uint8)
    batches = []
    for row in out:
        b = bytearray(row.tobytes())
        b[17:21] = crc32c.crc32c(b[21:]).to_bytes(4, "big")
        batches.append(bytes(b))
    return batches


def generate(root: Path, keys: int, updates: int) -> None:
    store = open_store(f"file://{root}", fsync=False)
    rng = np.random.default_rng(1)
    order = np.tile(np.arange(keys, dtype=np.int64), updates)
    rng.shuffle(order)
    template, positions = _template()
    per_file = -(-FILE_BYTES // len(template))  # the agent flushes once a file reaches 8 MiB
    records_per_file = per_file * RECORDS_PER_BATCH
    files: list[InputFile] = []
    for first in range(0, len(order), records_per_file):
        part = order[first : first + records_per_file]
        whole = len(part) // RECORDS_PER_BATCH * RECORDS_PER_BATCH
        batches = encode_batches(part[:whole].reshape(-1, RECORDS_PER_BATCH), template, positions)
        if whole < len(part):
            tail = part[whole:].tolist()
            batches.append(
                build_batch([Record(d, 1000, b"key-%08d" % k, VALUE, ()) for d, k in enumerate(tail)])
            )
        count = len(part)
        data, placements = build_segment([ChunkInput(TOPIC, 0, batches, len(batches), count)])
        name = f"agent/{len(files):06d}"
        store.put(name, data)
        pl = placements[0]
        loc = ChunkLocation(
            len(files) + 1, name, pl.data_position, pl.byte_length, first, first + count - 1, count, 0
        )
        files.append(InputFile(name, len(data), (InputChunk(TOPIC, 0, loc),)))
    (root / "plan.pickle").write_bytes(pickle.dumps((tuple(files), len(order))))


class KeepOutputs:
    """The swap: keeps each output file's chunk rows (the next clean's inputs)."""

    def __init__(self) -> None:
        self.files: list[InputFile] = []
        self._ids = 1_000_000

    def __call__(
        self,
        inputs: Sequence[int],
        spec: FileSpec,
        outputs: Sequence[OutputChunk],
        checkpoints: Sequence[Checkpoint],
    ) -> None:
        chunks = []
        for o in outputs:
            self._ids += 1
            loc = ChunkLocation(
                self._ids,
                spec.object_key,
                o.byte_position,
                o.byte_length,
                o.base_offset,
                o.last_offset,
                o.record_count,
                o.max_timestamp,
                offsets_absolute=True,
                present_offsets=o.present_offsets,
            )
            chunks.append(InputChunk(o.topic_id, o.partition, loc))
        self.files.append(InputFile(spec.object_key, spec.size_bytes, tuple(chunks)))


def peak_rss_mib(reset: bool = False) -> float:
    """This process's peak RSS (VmHWM; `ru_maxrss` would include the parent's from before
    exec). With `reset`, the peak is reset to the current RSS first (Linux clear_refs)."""
    if reset:
        Path("/proc/self/clear_refs").write_text("5")
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def run_cleans(root: Path) -> None:
    files, end = pickle.loads((root / "plan.pickle").read_bytes())
    store = open_store(f"file://{root}", fsync=False)
    first_dirty = 0
    for clean in range(1, MAX_CLEANS + 1):
        work = PartitionWork(TOPIC, 0, "bench", True, False, first_dirty, end, 86_400_000)
        plan = JobPlan(f"bench{clean}", tuple(files), (work,), 2_000_000)
        swap = KeepOutputs()
        rss0 = peak_rss_mib(reset=True)
        t0 = time.perf_counter()
        c0 = time.process_time()
        result = run_job(plan, store, swap, key_prefix=f"out{clean}/")
        cpu = time.process_time() - c0
        wall = time.perf_counter() - t0
        s = result.stats
        (cp,) = result.checkpoints
        gets = sorted(set(s.gets_per_input_file.values()))
        print(
            f"clean={clean} first_dirty={first_dirty} checkpoint={cp.first_dirty_offset} "
            f"records_in={s.records_in} records_out={s.records_out} files_in={s.files_in} "
            f"MiB_in={s.bytes_in / 2**20:.1f} wall_s={wall:.1f} cpu_s={cpu:.1f} "
            f"records_per_s_per_core={s.records_in / cpu:,.0f} MiB_per_s_per_core={s.bytes_in / 2**20 / cpu:.1f} "
            f"peak_rss_MiB={peak_rss_mib():.0f} "
            f"(before {rss0:.0f}) keymap_MiB={s.peak_keymap_bytes / 2**20:.0f} "
            f"map_full={bool(result.map_full)} gets_per_input_file={gets}",
            flush=True,
        )
        if cp.first_dirty_offset >= end:
            return
        first_dirty = cp.first_dirty_offset
        files = swap.files


def dedup(keys: int, updates: int, directory: str | None) -> None:
    with tempfile.TemporaryDirectory(prefix="skiff-bench-compaction-") as tmp:
        root = Path(directory or tmp)
        if not (root / "plan.pickle").exists():
            t0 = time.perf_counter()
            generate(root, keys, updates)
            print(f"keys={keys} updates={updates} generated in {time.perf_counter() - t0:.0f}s", flush=True)
        else:
            print(f"reusing the input files in {root}", flush=True)
        subprocess.run([sys.executable, __file__, "--run-cleans", str(root)], check=True)


# ------------------------------------------------------------------ merge

VALUE_BYTES = 1024
MERGE_BATCH_RECORDS = 16
FETCH_MAX_BYTES = 55 << 20
PARTITION_MAX_BYTES = 4 << 20


def write_level0(
    svc: MetadataService, store: ObjectStore, topic_id: uuid.UUID, partitions: int, mib: int, file_mib: int
) -> int:
    """Agent-style files, each with a chunk of every partition; returns the file count."""
    per_chunk = (file_mib << 20) // partitions
    batches_per_chunk = max(1, per_chunk // (MERGE_BATCH_RECORDS * (VALUE_BYTES + 20)))
    value = b"x" * VALUE_BYTES
    files = max(1, mib // file_mib)
    for f in range(files):
        chunks = []
        for p in range(partitions):
            batches = [
                build_batch([Record(d, 1000 + f, b"k%d" % d, value) for d in range(MERGE_BATCH_RECORDS)])
                for _ in range(batches_per_chunk)
            ]
            chunks.append(ChunkInput(topic_id, p, batches, len(batches), MERGE_BATCH_RECORDS * len(batches)))
        data, placements = build_segment(chunks)
        key = f"agent/{f:06d}.seg"
        store.put(key, data)
        specs = []
        for pl, ch in zip(placements, chunks, strict=True):
            specs.append(
                ChunkSpec(
                    topic_id,
                    pl.partition,
                    tuple(
                        BatchSpec(pos, len(b), MERGE_BATCH_RECORDS, MERGE_BATCH_RECORDS, 1000 + f)
                        for pos, b in zip(pl.batch_positions, ch.batches, strict=True)
                    ),
                )
            )
        for r in svc.commit_file(FileSpec(key, len(data), 0, "bench-agent"), specs):
            assert r.error_code == 0, r
    return files


def chunk_rows(svc: MetadataService, topic_id: uuid.UUID, partitions: int) -> list[int]:
    infos = svc.find_chunks([FetchQuery(topic_id, p, 0, 1 << 50) for p in range(partitions)])
    return [len(i.chunks) for i in infos]


def cold_consume(
    svc: MetadataService, url: str, topic_id: uuid.UUID, partitions: int
) -> tuple[int, int, int, float]:
    """(bytes consumed, ranged GETs, fetches, cpu s) of reading everything from offset 0."""
    store = open_store(url, fsync=False)
    offsets = [0] * partitions
    hwm = [
        i.high_watermark for i in svc.find_chunks([FetchQuery(topic_id, p, 0, 1) for p in range(partitions)])
    ]
    consumed = fetches = 0
    c0 = time.process_time()
    while any(o < h for o, h in zip(offsets, hwm, strict=True)):
        active = [p for p in range(partitions) if offsets[p] < hwm[p]]
        infos = svc.find_chunks([FetchQuery(topic_id, p, offsets[p], PARTITION_MAX_BYTES) for p in active])
        reads = [
            PartitionRead(i.chunks, offsets[p], PARTITION_MAX_BYTES)
            for p, i in zip(active, infos, strict=True)
        ]
        fetches += 1
        for p, sel in zip(active, read_fetch(store, reads, FETCH_MAX_BYTES), strict=True):
            if isinstance(sel, Exception):
                raise sel
            consumed += len(sel.records)
            offsets[p] = sel.next_offset
    cpu = time.process_time() - c0
    gets = store.stats.snapshot().requests.get("get_range", 0)
    store.close()
    return consumed, gets, fetches, cpu


def merge(mib: int, partitions: int, file_mib: int) -> None:
    with tempfile.TemporaryDirectory(prefix="skiff-bench-merge-") as tmp:
        svc = MetadataService.from_url(f"sqlite:///{tmp}/md.db")
        url = f"file://{tmp}/bucket"
        store = open_store(url, fsync=False)
        topic = svc.create_topic("bench-merge", partitions, {"retention.ms": "-1"})
        files = write_level0(svc, store, topic.topic_id, partitions, mib, file_mib)
        print(f"level 0: {files} files of ~{file_mib} MiB, {partitions} partitions", flush=True)
        for stage in ("level 0", "after merge"):
            if stage == "after merge":
                md = LocalMetadataClient(svc)
                cfg = RunnerConfig(topic="bench-merge", retention=False, gc=False, expire_offsets=False)
                c0 = time.process_time()
                summary = asyncio.run(run_pass(md, store, cfg))
                print(
                    f"merge: jobs={summary.jobs} files_in={summary.files_in} files_out={summary.files_out} "
                    f"max_gets_per_input_file={summary.max_gets_per_input_file} "
                    f"cpu_s={time.process_time() - c0:.1f}",
                    flush=True,
                )
            rows = chunk_rows(svc, topic.topic_id, partitions)
            consumed, gets, fetches, cpu = cold_consume(svc, url, topic.topic_id, partitions)
            gib = consumed / 2**30
            print(
                f"{stage}: chunk_rows_per_partition={min(rows)}-{max(rows)} consumed_MiB={consumed / 2**20:.0f} "
                f"fetches={fetches} ranged_gets={gets} ranged_gets_per_GiB={gets / gib:.0f} "
                f"consume_MiB_per_s_cpu={consumed / 2**20 / cpu:.0f}",
                flush=True,
            )
        store.close()
        svc.close()


def main() -> None:
    if sys.argv[1] == "--run-cleans":
        run_cleans(Path(sys.argv[2]))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dedup")
    d.add_argument("keys", type=int)
    d.add_argument("updates", type=int, nargs="?", default=3)
    d.add_argument("--dir", help="keep the generated input here (reused when present)")
    m = sub.add_parser("merge")
    m.add_argument("--mib", type=int, default=256)
    m.add_argument("--partitions", type=int, default=16)
    m.add_argument("--file-mib", type=int, default=8)
    args = ap.parse_args()
    if args.cmd == "dedup":
        dedup(args.keys, args.updates, args.dir)
    else:
        merge(args.mib, args.partitions, args.file_mib)


if __name__ == "__main__":
    main()
