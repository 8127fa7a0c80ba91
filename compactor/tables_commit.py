"""One commit of the table materializer (`compactor.tables`): the rows of a batch of
committed records into one Iceberg transaction, with the offsets it covers, atomically.

Every snapshot the materializer makes carries `skiff.offsets` in its summary: JSON
{partition: next offset} of everything the table holds (`fileformat.tables_layout.offsets_summary`). The
transaction is one compare-and-swap of the table's metadata location in the SQL catalog,
so the rows and the offsets land together or not at all.

- **Append** (a `delete`-policy topic): the batch's rows are appended as they are.
- **Upsert** (a topic whose cleanup.policy has `compact`): the table holds one row per
  (partition, key), the latest. `latest_per_key` keeps each (partition, key)'s record of the
  highest offset in the batch; the transaction first deletes the table's rows of every key
  the batch names (`tx.delete` with the filter `partition = p AND key IN (...)` per
  partition: pyiceberg's copy-on-write, rewriting the data files holding such rows), then
  appends the latest records whose value is not null. A tombstone (null value) thus
  deletes its key's row; records with a null key are not in the table (Kafka's compacted
  topics refuse them). pyiceberg's own `upsert` was not used: it neither deletes on
  tombstones nor takes the snapshot properties through both of its snapshots.
  Cost: each commit rewrites every data file holding one of its keys (measured in
  docs/tables.md); the delete is skipped when the table is empty.

An empty batch (every record aborted, a gap) still appends an empty snapshot so that the
offsets move on.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import reduce
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from skiff.fileformat.tables_layout import offsets_summary

# pyiceberg warns when a delete matched no row: a key the table does not hold yet, normal here
_NO_MATCH = "Delete operation did not match any records"

Hook = Callable[[str, str], None]


def latest_per_key(data: pa.Table) -> tuple[pa.Table, dict[int, list[bytes]]]:
    """(the rows to append: each (partition, key)'s latest record unless it is a tombstone,
    {partition: every key the batch names}). Null keys are dropped."""
    keyed = data.filter(pc.is_valid(data.column("key")))
    if keyed.num_rows == 0:
        return keyed, {}
    # in (partition, offset) order a row's index grows with its offset: the latest of a key
    # is its largest index (Arrow cannot join tables with list columns such as headers)
    keyed = keyed.sort_by([("partition", "ascending"), ("offset", "ascending")])
    indexed = pa.table(
        {
            "partition": keyed.column("partition"),
            "key": keyed.column("key"),
            "row": pa.array(range(keyed.num_rows)),
        }
    )
    last = indexed.group_by(["partition", "key"], use_threads=False).aggregate([("row", "max")])
    rows = last.column("row_max")
    latest = keyed.take(pc.take(rows, pc.sort_indices(rows)))  # in (partition, offset) order
    latest = latest.filter(pc.is_valid(latest.column("value")))
    keys: dict[int, list[bytes]] = {}
    for p, k in zip(last.column("partition").to_pylist(), last.column("key").to_pylist(), strict=True):
        keys.setdefault(int(p), []).append(k)
    return latest, keys


def key_filter(keys: dict[int, list[bytes]]) -> Any:
    """`(partition = p AND key IN (...)) OR ...`, a pyiceberg expression."""
    import pyiceberg.expressions

    ex: Any = pyiceberg.expressions  # their pydantic signatures are beyond mypy's reading
    terms = [ex.And(ex.EqualTo("partition", p), ex.In("key", set(ks))) for p, ks in sorted(keys.items())]
    return reduce(ex.Or, terms)


def commit_batch(
    table: Any,
    data: pa.Table,
    offsets: dict[int, int],
    *,
    upsert: bool,
    evolve: bool = False,
    hook: Hook | None,
) -> int:
    """Write `data` (appended, or upserted by key) and commit it with `offsets` in the same
    transaction (refused if the table moved since it was loaded); `evolve`: first widen the
    table's schema to `data`'s (typed values, compactor.tables_values), so the change is in
    the snapshot of the first rows that need it. `hook` sees the stages of
    compactor.tables_pause. The rows appended."""
    tx = table.transaction()
    if evolve:
        with tx.update_schema() as update:  # no change, no schema update
            update.union_by_name(data.schema)
    props = offsets_summary(offsets)
    rows = data
    if upsert:
        rows, keys = latest_per_key(data)
        if keys and table.current_snapshot() is not None:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=_NO_MATCH)
                tx.delete(key_filter(keys), snapshot_properties=props)  # rewrites files here
    tx.append(rows, snapshot_properties=props)  # the Parquet files are written here
    _commit(table, tx, hook)
    return int(rows.num_rows)


def _commit(table: Any, tx: Any, hook: Hook | None) -> None:
    if hook is None:
        tx.commit_transaction()
        return
    name = table.name()[-1]
    hook("after_parquet", name)
    catalog = table.catalog
    write_metadata = catalog._write_metadata

    def write_then_pause(*args: Any, **kwargs: Any) -> None:
        # pyiceberg's commit writes the new metadata JSON, then swaps the location in SQL
        write_metadata(*args, **kwargs)
        hook("before_commit", name)

    catalog._write_metadata = write_then_pause
    try:
        tx.commit_transaction()
    finally:
        del catalog._write_metadata  # the static method again
    hook("after_commit", name)
