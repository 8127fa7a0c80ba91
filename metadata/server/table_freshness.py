"""How far each topic's Iceberg table is behind its topic: for /metrics and the console.

For every topic with `skiff.table.enabled=true` (at most `MAX_TABLES`, by name) the table's
current snapshot is found from the SQL catalog's row in the metadata database and its
metadata JSON in the bucket (metadata.server.iceberg_rest.CatalogRows; a metadata file never
changes, so its parsed summary is cached by location: a bucket GET only when the
materializer has committed a new snapshot), and compared with the topic's partitions:

- `behind_offsets`: the offsets committed to the topic but not in the table, summed over
  partitions (high watermark minus the snapshot's `skiff.offsets`, from the log start for a
  partition the table has not reached; transaction markers count, as the table never holds
  them);
- `freshness_s`: how old the oldest of those is: now minus the commit time of the file
  holding the first offset the table lacks (0 when the table is caught up): the "seconds
  between commit and table" that a reader of the table does not see;
- `snapshot_age_s`: since the table's last snapshot (None: no table yet).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from skiff.fileformat.tables_layout import NAMESPACE, covered_offsets, table_name_for
from skiff.metadata import configs
from skiff.metadata.db import read_tx
from skiff.metadata.errors import MetadataError
from skiff.metadata.schema import chunks, files, partitions
from skiff.metadata.server.iceberg_rest import CatalogRows, IcebergError
from skiff.metadata.types import Topic
from sqlalchemy import case, func, select

MAX_TABLES = 200
_CACHED_SNAPSHOTS = 256


@dataclass(frozen=True)
class TableState:
    topic: str
    table: str
    snapshot_ms: int | None
    behind_offsets: int
    freshness_s: float
    snapshot_age_s: float | None


class TableFreshness:
    def __init__(self, rows: CatalogRows) -> None:
        self.rows = rows
        self._snapshots: OrderedDict[str, tuple[int | None, dict[int, int]]] = OrderedDict()
        self._lock = threading.Lock()

    def states(self, now_ms: int, only: str | None = None) -> list[TableState]:
        service = self.rows.bucket.service
        topics = [t for t in service.list_topics() if configs.table_enabled(t.configs)]
        if only is not None:
            topics = [t for t in topics if t.name == only]
        return [self.state(t, now_ms) for t in sorted(topics, key=lambda t: t.name)[:MAX_TABLES]]

    def state(self, topic: Topic, now_ms: int) -> TableState:
        name = table_name_for(topic.name, configs.config_value(topic.configs, configs.TABLE_NAME) or None)
        snapshot_ms, covered = self._snapshot(name)
        behind, oldest_ms = self._behind(topic, covered)
        return TableState(
            topic=topic.name,
            table=f"{NAMESPACE}.{name}",
            snapshot_ms=snapshot_ms,
            behind_offsets=behind,
            freshness_s=0.0 if oldest_ms is None else max(0.0, (now_ms - oldest_ms) / 1000),
            snapshot_age_s=None if snapshot_ms is None else max(0.0, (now_ms - snapshot_ms) / 1000),
        )

    def _snapshot(self, table: str) -> tuple[int | None, dict[int, int]]:
        """(current snapshot's time, its covered offsets); (None, {}) without a table."""
        try:
            location = self.rows.metadata_location(NAMESPACE, table)
        except IcebergError:
            return None, {}
        with self._lock:
            hit = self._snapshots.get(location)
            if hit is not None:
                self._snapshots.move_to_end(location)
                return hit
        try:
            metadata = self.rows.metadata(location)
        except (IcebergError, MetadataError):  # gone, or the bucket is not known here
            return None, {}
        current = metadata.get("current-snapshot-id")
        found: tuple[int | None, dict[int, int]] = (None, {})
        for snap in metadata.get("snapshots") or ():
            if snap.get("snapshot-id") == current:
                found = (int(snap["timestamp-ms"]), covered_offsets(snap.get("summary") or {}))
        with self._lock:
            self._snapshots[location] = found
            while len(self._snapshots) > _CACHED_SNAPSHOTS:
                self._snapshots.popitem(last=False)
        return found

    def _behind(self, topic: Topic, covered: dict[int, int]) -> tuple[int, int | None]:
        """(offsets not in the table, commit time of the oldest file holding one)."""
        engine = self.rows.bucket.service.engine
        p = partitions.c
        with read_tx(engine) as conn:
            parts = conn.execute(
                select(p.partition, p.log_start_offset, p.high_watermark).where(p.topic_id == topic.topic_id)
            ).all()
            behind = sum(max(0, hw - max(start, covered.get(part, 0))) for part, start, hw in parts)
            if not behind:
                return 0, None
            wanted = case(
                {part: max(start, covered.get(part, 0)) for part, start, _ in parts},
                value=chunks.c.partition,
                else_=0,
            )
            oldest = conn.execute(
                select(func.min(files.c.committed_ms))
                .select_from(chunks.join(files, files.c.id == chunks.c.file_id))
                .where(chunks.c.topic_id == topic.topic_id, chunks.c.last_offset >= wanted)
            ).scalar_one()
        return behind, None if oldest is None else int(oldest)
