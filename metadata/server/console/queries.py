"""The console's own read-only SQL: what the service's operations do not answer.

Every query runs in one `metadata.db.read_tx` snapshot and returns plain values; every list
is bounded by a `limit` the caller passes (the pages cap it again). What they read:

- `committed_files_series`: files committed over a window, per time bucket and level
  (`files.committed_ms`, `size_bytes`): the overview's throughput and files-per-second
  charts. Level 0 is what agents wrote (one PUT each), 1+ what the compactor wrote. A file
  the garbage collector has forgotten (compacted away, then deleted after its grace period)
  drops out of the series, so the older end of a window under heavy compaction reads low.
- `file_totals`: live and deleting files and bytes by level (storage, the GC queue).
- `topic_sizes` / `partition_sizes`: live chunk bytes and counts per topic, per partition.
- `topic_files`: the files holding a topic's chunks, with their level, size and chunk count.
- `compaction_rows`: the `compaction_state` rows: cleaner checkpoints and job leases.
- `gc_queue`: the files waiting for the garbage collector (`deleting`), oldest first.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from skiff.metadata.db import read_tx
from skiff.metadata.schema import FILE_DELETING, FILE_LIVE, chunks, compaction_state, files
from sqlalchemy import Engine, func, select

# No list the console shows holds more rows than this, whatever a caller asks.
MAX_ROWS = 1000


def _cap(limit: int) -> int:
    return max(0, min(int(limit), MAX_ROWS))


@dataclass(frozen=True)
class FileBucket:
    """Files committed in [start_ms, start_ms + bucket width): agents' (level 0) and the
    compactor's (level 1+), counts and bytes."""

    start_ms: int
    level0_files: int = 0
    level0_bytes: int = 0
    compacted_files: int = 0
    compacted_bytes: int = 0


def committed_files_series(engine: Engine, now_ms: int, window_ms: int, bucket_ms: int) -> list[FileBucket]:
    """One bucket per `bucket_ms` over the last `window_ms` (oldest first, empty buckets
    included): at most window_ms / bucket_ms buckets."""
    assert bucket_ms > 0 and 0 < window_ms // bucket_ms <= MAX_ROWS, (window_ms, bucket_ms)
    n = window_ms // bucket_ms
    start = now_ms - n * bucket_ms
    slot = ((files.c.committed_ms - start) // bucket_ms).label("slot")  # integer division
    level0 = (files.c.level == 0).label("level0")
    q = (
        select(slot, level0, func.count(), func.coalesce(func.sum(files.c.size_bytes), 0))
        .where(files.c.committed_ms >= start, files.c.committed_ms < start + n * bucket_ms)
        .group_by(slot, level0)
    )
    with read_tx(engine) as conn:
        rows = conn.execute(q).all()
    acc = [[0, 0, 0, 0] for _ in range(n)]
    for s, is_level0, count, size in rows:
        i = int(s)
        if not 0 <= i < n:  # a row on the window's edge under a clock step: not ours
            continue
        base = 0 if is_level0 else 2
        acc[i][base] += int(count)
        acc[i][base + 1] += int(size)
    return [FileBucket(start + i * bucket_ms, *a) for i, a in enumerate(acc)]


@dataclass(frozen=True)
class FileTotals:
    """Files by state and level: (count, bytes) each."""

    live_by_level: dict[int, tuple[int, int]]
    deleting: tuple[int, int]

    @property
    def live_files(self) -> int:
        return sum(c for c, _ in self.live_by_level.values())

    @property
    def live_bytes(self) -> int:
        return sum(b for _, b in self.live_by_level.values())


def file_totals(engine: Engine) -> FileTotals:
    q = select(
        files.c.state, files.c.level, func.count(), func.coalesce(func.sum(files.c.size_bytes), 0)
    ).group_by(files.c.state, files.c.level)
    live: dict[int, tuple[int, int]] = {}
    deleting = [0, 0]
    with read_tx(engine) as conn:
        for state, level, count, size in conn.execute(q):
            if state == FILE_LIVE:
                live[int(level)] = (int(count), int(size))
            else:
                deleting[0] += int(count)
                deleting[1] += int(size)
    return FileTotals(dict(sorted(live.items())), (deleting[0], deleting[1]))


@dataclass(frozen=True)
class Size:
    """Live chunk bytes and chunk rows."""

    bytes: int = 0
    chunks: int = 0


def topic_sizes(engine: Engine) -> dict[uuid.UUID, Size]:
    """Per topic: the bytes and count of its chunk rows (one index scan of `chunks`)."""
    q = select(chunks.c.topic_id, func.sum(chunks.c.byte_length), func.count()).group_by(chunks.c.topic_id)
    with read_tx(engine) as conn:
        return {r[0]: Size(int(r[1] or 0), int(r[2])) for r in conn.execute(q)}


def partition_sizes(engine: Engine, topic_id: uuid.UUID) -> dict[int, Size]:
    q = (
        select(chunks.c.partition, func.sum(chunks.c.byte_length), func.count())
        .where(chunks.c.topic_id == topic_id)
        .group_by(chunks.c.partition)
    )
    with read_tx(engine) as conn:
        return {int(r[0]): Size(int(r[1] or 0), int(r[2])) for r in conn.execute(q)}


@dataclass(frozen=True)
class TopicFile:
    """A file holding chunks of one topic: its row, and its chunks of that topic."""

    object_key: str
    level: int
    size_bytes: int
    state: str
    writer: str
    committed_ms: int
    chunks: int  # chunk rows of this topic in the file
    chunk_bytes: int
    partitions: int


def topic_files(
    engine: Engine, topic_id: uuid.UUID, *, limit: int, offset: int
) -> tuple[list[TopicFile], int]:
    """The newest files first, `limit` of them from `offset`, and how many there are."""
    c, f = chunks.c, files.c
    per_file = (
        select(
            c.file_id,
            func.count().label("n"),
            func.sum(c.byte_length).label("b"),
            func.count(func.distinct(c.partition)).label("p"),
        )
        .where(c.topic_id == topic_id)
        .group_by(c.file_id)
        .subquery()
    )
    q = (
        select(f.object_key, f.level, f.size_bytes, f.state, f.writer, f.committed_ms, per_file)
        .join(per_file, per_file.c.file_id == f.id)
        .order_by(f.committed_ms.desc(), f.id.desc())
        .limit(_cap(limit))
        .offset(max(0, offset))
    )
    with read_tx(engine) as conn:
        total = int(conn.execute(select(func.count()).select_from(per_file)).scalar_one())
        rows = conn.execute(q).all()
    out = [
        TopicFile(
            r.object_key, r.level, r.size_bytes, r.state, r.writer, r.committed_ms, r.n, int(r.b or 0), r.p
        )
        for r in rows
    ]
    return out, total


@dataclass(frozen=True)
class CompactionRow:
    """One `compaction_state` row: the cleaner checkpoint, and the job lease if any."""

    topic_id: uuid.UUID
    partition: int
    first_dirty_offset: int | None
    lease_holder: str | None
    lease_expires_ms: int | None


def compaction_rows(engine: Engine, *, topic_id: uuid.UUID | None = None, limit: int) -> list[CompactionRow]:
    """Rows with a lease first (the running jobs), then the others."""
    s = compaction_state.c
    q = select(s.topic_id, s.partition, s.first_dirty_offset, s.lease_holder, s.lease_expires_ms)
    if topic_id is not None:
        q = q.where(s.topic_id == topic_id)
    q = q.order_by(s.lease_expires_ms.desc().nulls_last(), s.topic_id, s.partition).limit(_cap(limit))
    with read_tx(engine) as conn:
        return [CompactionRow(*r) for r in conn.execute(q)]


@dataclass(frozen=True)
class DeletingFile:
    object_key: str
    size_bytes: int
    deleting_since_ms: int | None
    claimed_until_ms: int | None


def gc_queue(engine: Engine, *, limit: int) -> list[DeletingFile]:
    """The `deleting` files, those waiting longest first."""
    f = files.c
    q = (
        select(f.object_key, f.size_bytes, f.deleting_since_ms, f.gc_claimed_until_ms)
        .where(f.state == FILE_DELETING)
        .order_by(f.deleting_since_ms, f.id)
        .limit(_cap(limit))
    )
    with read_tx(engine) as conn:
        return [DeletingFile(*r) for r in conn.execute(q)]
