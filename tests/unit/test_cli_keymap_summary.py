"""`skiff compact`'s summary reports the key map's use (entries and their bytes), with the
preallocated table beside it, not the preallocation as if it were the use (issue 25)."""

from __future__ import annotations

import io
import json

from rich.console import Console
from skiff.cli.compact_output import print_summary
from skiff.compactor.keymap import SLOT_BYTES, KeyMap, key_hash
from skiff.compactor.pass_summary import PassSummary
from skiff.compactor.plan import JobPlan, JobStats

ROW = "key map: entries / bytes used (allocated)"


def test_a_key_map_counts_the_bytes_of_its_entries() -> None:
    kmap = KeyMap(1 << 20)
    for i in range(200):
        kmap.put(key_hash(b"k%d" % (i % 150)), i)  # 150 distinct keys, some updated
    assert kmap.size == 150
    assert kmap.used_bytes == 150 * SLOT_BYTES < kmap.memory_bytes
    kmap.reset(0)
    assert kmap.used_bytes == 0


def test_the_summary_shows_entries_and_bytes_used_and_the_allocation() -> None:
    plan = JobPlan(job_id="j", files=(), partitions=(), now_ms=0)
    summary = PassSummary()
    for entries in (200, 150):
        summary.add_job(
            plan,
            JobStats(
                peak_keymap_entries=entries,
                peak_keymap_bytes=entries * SLOT_BYTES,
                keymap_allocated_bytes=128 << 20,
            ),
        )
    as_json = json.loads(json.dumps(summary.as_dict()))
    assert (as_json["peak_keymap_entries"], as_json["peak_keymap_bytes"]) == (200, 4000)
    assert as_json["keymap_allocated_bytes"] == 128 << 20
    console = Console(file=io.StringIO(), width=200, color_system=None, highlight=False)
    print_summary(summary, console)
    (line,) = [x for x in console.file.getvalue().splitlines() if ROW in x]  # type: ignore[attr-defined]
    assert line.split("│")[-2].strip() == "200 / 3.9 KiB (128.0 MiB)"
