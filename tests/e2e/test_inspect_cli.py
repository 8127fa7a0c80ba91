"""`skiff inspect` on files the agent really wrote, and on damaged copies of them."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Producer

from tests.e2e.test_clients_roundtrip import create_topic
from tests.support.agents import SkiffProcess, skiff_command, wait_for_port
from tests.support.s3servers import free_port


def _inspect(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*skiff_command(), "inspect", *args], capture_output=True, text=True, timeout=60)


def test_inspect_shows_chunks_and_pinpoints_damage(
    spawn_skiff: Callable[..., SkiffProcess], tmp_path: Path
) -> None:
    data = tmp_path / "data"
    pg = spawn_skiff("playground", "--data-dir", str(data), "--port", "{port}", "--metadata-port", "0")
    topic = f"insp-{uuid.uuid4().hex[:6]}"
    create_topic(pg.bootstrap, topic, partitions=3)
    p = Producer({"bootstrap.servers": pg.bootstrap, "linger.ms": 50, "compression.codec": "zstd"})
    for i in range(300):
        p.produce(topic, key=f"k{i}".encode(), value=b"v" * 100, partition=i % 3)
    assert p.flush(30) == 0
    files = sorted((data / "bucket" / "segments").glob("*.seg"))
    assert files

    out = _inspect(str(files[0]), "--json", "--verify")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["problems"] == [] and not report["offsets_absolute"]
    assert {c["partition"] for c in report["chunks"]} <= {0, 1, 2}
    total = sum(c["records"] for f in files for c in json.loads(_inspect(str(f), "--json").stdout)["chunks"])
    assert total == 300

    table = _inspect(f"file://{files[0]}")
    assert table.returncode == 0 and "assigned by metadata" in table.stdout

    # a truncated copy: an error naming the file and the byte position, exit status 1
    raw = files[0].read_bytes()
    cut = tmp_path / "cut.seg"
    cut.write_bytes(raw[: len(raw) - 10])
    bad = _inspect(str(cut))
    assert bad.returncode == 1 and str(cut) in bad.stderr and "at byte" in bad.stderr

    # a flipped byte inside a batch: the footer is fine, --verify finds the batch
    report = json.loads(_inspect(str(files[0]), "--json").stdout)
    flipped = bytearray(raw)
    flipped[report["chunks"][0]["position"] + 40] ^= 0xFF
    broken = tmp_path / "flip.seg"
    broken.write_bytes(bytes(flipped))
    assert _inspect(str(broken)).returncode == 0
    verified = _inspect(str(broken), "--verify", "--json")
    assert verified.returncode == 1
    problems = json.loads(verified.stdout)["problems"]
    assert problems and "CRC" in " ".join(problems)


def test_inspect_with_metadata_shows_topic_names_and_assigned_offsets(
    spawn_skiff: Callable[..., SkiffProcess], tmp_path: Path
) -> None:
    """`--metadata URL`: each agent-file chunk gets its topic name and the offsets metadata
    assigned; over all files every partition's offsets are covered exactly once."""
    data = tmp_path / "data"
    mport = free_port()
    pg = spawn_skiff("playground", "--data-dir", str(data), "--port", "{port}", "--metadata-port", str(mport))
    wait_for_port(mport, pg.proc, pg.log)
    topic = f"inspm-{uuid.uuid4().hex[:6]}"
    create_topic(pg.bootstrap, topic, partitions=3)
    p = Producer({"bootstrap.servers": pg.bootstrap, "linger.ms": 20})
    for i in range(300):
        p.produce(topic, key=f"k{i}".encode(), value=b"v" * 100, partition=i % 3)
        if i % 50 == 49:
            assert p.flush(30) == 0  # several files
    assert p.flush(30) == 0
    files = sorted((data / "bucket" / "segments").glob("*.seg"))
    assert len(files) >= 2

    url = f"http://127.0.0.1:{mport}"
    seen: dict[int, list[tuple[int, int]]] = {0: [], 1: [], 2: []}
    for f in files:
        out = _inspect(str(f), "--json", "--metadata", url)
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout)
        assert report["metadata"]["state"] == "live"
        assert report["metadata"]["object_key"] == f"segments/{f.name}"
        for c in report["chunks"]:
            assert c["topic"] == topic and c["assigned"], c
            seen[c["partition"]] += [(a["base_offset"], a["last_offset"]) for a in c["assigned"]]
    for runs in seen.values():
        covered = sorted(o for base, last in runs for o in range(base, last + 1))
        assert covered == list(range(100))

    table = _inspect(str(files[0]), "--metadata", url)
    assert table.returncode == 0, table.stderr
    assert topic in table.stdout and "assigned by metadata" not in table.stdout

    # a file metadata does not know: said so, offsets shown as missing
    stray = data / "bucket" / "segments" / "stray.seg"
    stray.write_bytes(files[0].read_bytes())
    report = json.loads(_inspect(str(stray), "--json", "--metadata", url).stdout)
    assert report["metadata"]["state"] is None and all(c["assigned"] == [] for c in report["chunks"])
