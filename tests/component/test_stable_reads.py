"""The last stable offset metadata answers belongs to the high watermark it answers with,
even when a commit of markers lands between the statements that read them (PostgreSQL's
READ COMMITTED gives each statement its own snapshot; simulated here over SQLite by a
dialect whose watermark read sees the commit and a transaction read that sees it closed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from metadata import reads
from metadata.service import MetadataService
from metadata.types import FetchQuery, PartitionKey


def test_a_markers_commit_between_the_reads_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc = MetadataService.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    try:
        topic = svc.create_topic("t", 1, {})
        key = (topic.topic_id, 0)
        # the world: a transaction open from offset 4 at watermark 10; its commit markers
        # (offset 10) land right after the first watermark read
        world = {"hwm": 10, "open": {key: 4}}
        dialect = svc.reads._db.dialect

        def read_partitions(conn: Any, pairs: Any) -> dict:
            seen = {k: (0, world["hwm"]) for k in pairs if k == key}
            if world["hwm"] == 10:
                world["hwm"], world["open"] = 11, {}  # the markers commit
            return seen

        def stable_state(conn: Any, keys: Any) -> dict:
            return {k: v for k, v in world["open"].items() if k in keys}

        monkeypatch.setattr(dialect, "read_partitions", read_partitions)
        monkeypatch.setattr(reads.transactions, "stable_state", stable_state)
        (state,) = svc.partition_states([PartitionKey(*key)])
        # never (10, 10): at watermark 10 the transaction was open (its LSO was 4)
        assert (state.high_watermark, state.last_stable_offset) == (11, 11)

        world["hwm"], world["open"] = 10, {key: 4}
        (info,) = svc.find_chunks([FetchQuery(topic.topic_id, 0, 0, 1 << 20, 1)])
        assert (info.high_watermark, info.last_stable_offset) == (11, 11)
    finally:
        svc.close()
