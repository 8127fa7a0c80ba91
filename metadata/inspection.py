"""Read-only views of the metadata tables for operators and tests (not part of the
service API, not served over HTTP): row counts, file states, a partition's chunks."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from skiff.metadata.db import read_tx
from skiff.metadata.rows import LOC_COLS, location_of
from skiff.metadata.schema import agents, chunks, files, group_offsets, partitions, producer_state, topics
from skiff.metadata.types import ChunkLocation
from sqlalchemy import Engine, func, select


def partition_chunks(engine: Engine, topic_id: uuid.UUID, partition: int) -> list[ChunkLocation]:
    """Every chunk of a partition in offset order."""
    with read_tx(engine) as conn:
        rows = conn.execute(
            select(*LOC_COLS)
            .join(files, files.c.id == chunks.c.file_id)
            .where(chunks.c.topic_id == topic_id, chunks.c.partition == partition)
            .order_by(chunks.c.last_offset)
        ).all()
    return [location_of(r) for r in rows]


def file_states(engine: Engine, object_keys: Sequence[str]) -> dict[str, str]:
    """object key -> live | deleting, for the keys that are recorded."""
    with read_tx(engine) as conn:
        rows = conn.execute(
            select(files.c.object_key, files.c.state).where(files.c.object_key.in_(list(object_keys)))
        ).all()
    return {r.object_key: r.state for r in rows}


def count_rows(engine: Engine) -> dict[str, int]:
    """Rows per table."""
    out = {}
    with read_tx(engine) as conn:
        for t in (topics, partitions, files, chunks, producer_state, group_offsets, agents):
            out[t.name] = int(conn.execute(select(func.count()).select_from(t)).scalar_one())
    return out
