"""Upkeep of a topic's Iceberg table after the materializer's commits (`compactor.tables`),
under the same lease: small files rewritten, old snapshots expired, orphan files deleted.

1. **Small files** (`rewrite_small_files`): in the current snapshot, the data files smaller
   than `small_file_bytes` are grouped by Iceberg partition (spec and partition value); a
   group of at least `min_small_files` is read and written again as one sorted
   (partition, offset) file set, in one overwrite snapshot that deletes the group's files
   and adds the new ones, with the table's `skiff.offsets` unchanged. Each commit adds at
   least one file per Iceberg partition it touches, so a table paced at one commit a
   minute gains some 1 440 files a day per partition without this.
2. **Snapshot expiry** (`expire_snapshots`): snapshots older than the topic's
   `skiff.table.snapshot.retention.ms` are expired (pyiceberg's ExpireSnapshots), never the
   current one. Expiry only edits the table's metadata; the files stay.
3. **Orphan files** (`delete_orphans`): every object under the table's prefix that no live
   snapshot needs (`live_files`: the current metadata file and its metadata log, each
   snapshot's manifest list, its manifests and their live data files) and that is older
   than `orphan_grace_ms` is deleted: the files of expired snapshots, of rewritten small
   files once no snapshot names them, and of crashed commits (after the Parquet write,
   before the catalog's swap). The grace keeps the files of a commit in flight elsewhere
   (a materializer whose lease ran out) and protects readers of a snapshot just expired.

The garbage collector's orphan scan (`compactor.gc`) leaves `tables/` alone: what a table
needs is known from its metadata only, which this module reads.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from skiff.fileformat.objectstore import ObjectStore
from skiff.fileformat.tables_layout import OFFSETS_PROPERTY

log = logging.getLogger(__name__)

DEFAULT_SMALL_FILE_BYTES = 32 * 1024 * 1024
DEFAULT_MIN_SMALL_FILES = 8


@dataclass
class UpkeepStats:
    files_rewritten: int = 0  # small data files replaced
    snapshots_expired: int = 0
    orphans_deleted: int = 0


def rewrite_small_files(table: Any, small_file_bytes: int, min_small_files: int) -> int:
    """Rewrite each Iceberg partition's small data files when there are `min_small_files`
    or more; the data files replaced."""
    from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files

    snap = table.current_snapshot()
    if snap is None:
        return 0
    groups: dict[tuple[int, str], list[Any]] = {}
    for task in table.scan().plan_files():
        f = task.file
        if f.file_size_in_bytes < small_file_bytes and not task.delete_files:
            groups.setdefault((f.spec_id, repr(f.partition)), []).append(task)
    groups = {k: g for k, g in groups.items() if len(g) >= min_small_files}
    if not groups:
        return 0
    offsets = snap.summary.additional_properties.get(OFFSETS_PROPERTY)
    props = {OFFSETS_PROPERTY: offsets} if offsets is not None else {}
    tx = table.transaction()
    replaced = 0
    with tx.update_snapshot(snapshot_properties=props).overwrite() as overwrite:
        for tasks in groups.values():
            scan = ArrowScan(table.metadata, table.io, table.schema(), _always_true())
            data: pa.Table = scan.to_table(tasks).sort_by(
                [("partition", "ascending"), ("offset", "ascending")]
            )
            for task in tasks:
                overwrite.delete_data_file(task.file)
            files = _dataframe_to_data_files(
                table_metadata=tx.table_metadata, write_uuid=overwrite.commit_uuid, df=data, io=table.io
            )
            for new in files:
                overwrite.append_data_file(new)
            replaced += len(tasks)
    tx.commit_transaction()
    return replaced


def _always_true() -> Any:
    from pyiceberg.expressions import AlwaysTrue

    return AlwaysTrue()


def expire_snapshots(table: Any, retention_ms: int, now_ms: int) -> int:
    """Expire the snapshots older than `retention_ms`, never the current one; how many."""
    current = table.current_snapshot()
    if current is None:
        return 0
    cutoff = now_ms - retention_ms
    old = [
        s.snapshot_id
        for s in table.snapshots()
        if s.timestamp_ms < cutoff and s.snapshot_id != current.snapshot_id
    ]
    if old:
        table.maintenance.expire_snapshots().by_ids(old).commit()
    return len(old)


def live_files(table: Any) -> set[str]:
    """Every file a live snapshot of the table's current metadata needs (full URLs)."""
    files = {table.metadata_location}
    files.update(entry.metadata_file for entry in table.metadata.metadata_log)
    for snap in table.snapshots():
        files.add(snap.manifest_list)
        for manifest in snap.manifests(table.io):
            files.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                files.add(entry.data_file.file_path)
    return files


def delete_orphans(table: Any, store: ObjectStore, bucket_url: str, grace_ms: int, now_ms: int) -> int:
    """Delete the objects under the table's location that `live_files` does not name and
    that are older than `grace_ms`; how many."""
    root = bucket_url.rstrip("/") + "/"
    location = table.location().rstrip("/") + "/"
    if not location.startswith(root):
        raise ValueError(f"table location {location} is not under the bucket {root}")
    live = {f[len(root) :] for f in live_files(table) if f.startswith(root)}
    cutoff = datetime.fromtimestamp((now_ms - grace_ms) / 1000, tz=UTC)
    orphans = [
        o.key for o in store.list(location[len(root) :]) if o.key not in live and o.last_modified < cutoff
    ]
    if orphans:
        store.delete_many(orphans)
        log.info("tables: deleted %d orphan file(s) of %s", len(orphans), ".".join(table.name()))
    return len(orphans)
