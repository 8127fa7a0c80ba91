"""The compactor's atomic swap (`replace_chunks`): input chunks out, an output file in.

Compare-and-set on the input chunk ids, under the same partition locks as commits, so a
swap racing a commit, a retention run, a topic deletion or another compactor either
applies whole or not at all. Offsets never change: outputs hold absolute offsets and
must lie within their partition's inputs, not overlap each other nor any chunk that
remains, and hold no more records than the inputs; their bitmaps (metadata.bitmaps)
must match their ranges and counts. Input files left without chunks become `deleting`.

Optionally (the compactor's planner passes them; older callers need not), in the same
transaction: the job's lease token is checked on every input partition (a lost or
expired lease refuses the swap) and cleaner checkpoints move (metadata.compaction.leases),
so a refused swap leaves the checkpoint where it was.

Also in the same transaction: the `txn_aborted` rows whose ABORT marker lay in the
swapped range and is present in no chunk any more are deleted (the cleaner removed the
marker, after every batch of its transaction; `metadata.transactions.cleanup`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from skiff.metadata import bitmaps
from skiff.metadata.commits.storage import Key
from skiff.metadata.commits.validation import check_output_chunk, file_error
from skiff.metadata.compaction.leases import check_lease, move_checkpoints
from skiff.metadata.compaction.types import CheckpointUpdate
from skiff.metadata.db import write_tx
from skiff.metadata.errors import CONFLICT, INVALID_REQUEST, ConflictError, MetadataError
from skiff.metadata.rows import IDS_PER_STATEMENT, Db, mark_orphan_files_deleting
from skiff.metadata.schema import FILE_DELETING, FILE_LIVE, chunks, files
from skiff.metadata.transactions.cleanup import drop_aborted_without_marker
from skiff.metadata.types import FileSpec, OutputChunk
from sqlalchemy import Connection, delete, insert, select
from sqlalchemy.exc import IntegrityError


class CompactionSwap:
    def __init__(self, db: Db) -> None:
        self._db = db

    def replace_chunks(
        self,
        input_chunk_ids: Sequence[int],
        file: FileSpec,
        outputs: Sequence[OutputChunk],
        checkpoints: Sequence[CheckpointUpdate] = (),
        lease_token: str | None = None,
    ) -> None:
        """The compactor's atomic swap: delete the input chunks and record `file` with the
        `outputs` chunks (absolute offsets), in one transaction.

        Compare-and-set: if any input chunk no longer exists (another compactor, retention
        or a topic deletion got there first) nothing changes and ConflictError (code 22,
        HTTP 409) is raised. Outputs must lie within the inputs' offset range of their
        partition, must not overlap each other nor any chunk that remains, must not hold
        more records than the inputs, and their bitmaps must match their ranges and counts;
        otherwise MetadataError(INVALID_REQUEST) and nothing changes. Offsets never change.
        Input files left without chunks become `deleting` (GC deletes them after a grace).

        `lease_token`: every input partition must be leased to it, unexpired, else
        ConflictError. `checkpoints`: cleaner checkpoints (first dirty offsets) of input
        partitions, set in the same transaction (each within [0, high watermark])."""
        ids = sorted(set(input_chunk_ids))
        if not ids:
            raise MetadataError(INVALID_REQUEST, "replace_chunks needs at least one input chunk")
        err = file_error(file)
        if err:
            raise MetadataError(INVALID_REQUEST, f"replace_chunks into {file.object_key!r}: {err}")
        spans: list[tuple[int, int]] = []
        for o in outputs:
            err = check_output_chunk(file, o)
            if err:
                raise MetadataError(INVALID_REQUEST, err)
            if o.last_offset - o.base_offset > bitmaps.MAX_RELATIVE_OFFSET:
                raise MetadataError(INVALID_REQUEST, "output chunk spans more than 2^32 offsets")
            err = bitmaps.check_chunk_bitmap(o.base_offset, o.last_offset, o.present_offsets, o.record_count)
            if err:
                raise MetadataError(INVALID_REQUEST, f"output chunk {o.topic_id}/{o.partition}: {err}")
            spans.append((o.byte_position, o.byte_position + o.byte_length))
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            if start < end:
                raise MetadataError(INVALID_REQUEST, f"two output chunks claim the bytes at {start}")
        now = self._db.clock()
        try:
            with write_tx(self._db.engine) as conn:
                self._replace_locked(conn, ids, file, outputs, now, checkpoints, lease_token)
        except IntegrityError as e:
            raise MetadataError(
                INVALID_REQUEST, f"replace_chunks refused by the database: {e.orig}"
            ) from None

    def _replace_locked(
        self,
        conn: Connection,
        ids: list[int],
        file: FileSpec,
        outputs: Sequence[OutputChunk],
        now: int,
        checkpoints: Sequence[CheckpointUpdate],
        lease_token: str | None,
    ) -> None:
        first = _read_inputs(conn, ids)
        locked = self._db.dialect.lock_partitions(conn, [(r.topic_id, r.partition) for r in first])
        rows = _read_inputs(conn, ids)  # again, under the partition locks
        if lease_token is not None:
            check_lease(self._db, conn, lease_token, locked.keys(), now)
        move_checkpoints(self._db, conn, checkpoints, locked)
        spans = _input_spans(rows)
        by_part = _outputs_within_inputs(outputs, spans)
        for i in range(0, len(ids), IDS_PER_STATEMENT):
            conn.execute(delete(chunks).where(chunks.c.id.in_(ids[i : i + IDS_PER_STATEMENT])))
        _check_no_remaining_overlap(conn, by_part)
        _insert_output_file(conn, file, outputs, now)
        mark_orphan_files_deleting(self._db, conn, {r.file_id for r in rows}, now)
        # aborted transactions whose ABORT marker this swap removed (metadata.transactions.cleanup)
        drop_aborted_without_marker(conn, {k: (lo, hi) for k, (lo, hi, _) in spans.items()})


def _read_inputs(conn: Connection, ids: list[int]) -> list[Any]:
    """The input chunks' rows; ConflictError when some of them no longer exist."""
    c = chunks.c
    sel = select(c.id, c.file_id, c.topic_id, c.partition, c.base_offset, c.last_offset, c.record_count)
    rows: list[Any] = []
    for i in range(0, len(ids), IDS_PER_STATEMENT):
        rows.extend(conn.execute(sel.where(c.id.in_(ids[i : i + IDS_PER_STATEMENT]))).all())
    if len(rows) != len(ids):
        raise ConflictError(CONFLICT, f"{len(ids) - len(rows)} input chunk(s) no longer exist")
    return rows


def _input_spans(rows: list[Any]) -> dict[Key, tuple[int, int, int]]:
    """Per partition of the inputs: (lowest base offset, highest last offset, records)."""
    spans: dict[Key, tuple[int, int, int]] = {}
    for r in rows:
        k = (r.topic_id, r.partition)
        lo, hi, n = spans.get(k, (r.base_offset, r.last_offset, 0))
        spans[k] = (min(lo, r.base_offset), max(hi, r.last_offset), n + r.record_count)
    return spans


def _outputs_within_inputs(
    outputs: Sequence[OutputChunk], spans: dict[Key, tuple[int, int, int]]
) -> dict[Key, list[OutputChunk]]:
    """The outputs per partition, sorted by base offset; MetadataError unless each lies
    within its partition's inputs, none overlap, and they hold no more records than the inputs."""
    by_part: dict[Key, list[OutputChunk]] = defaultdict(list)
    for o in outputs:
        k = (o.topic_id, o.partition)
        if k not in spans:
            raise MetadataError(INVALID_REQUEST, f"output chunk for {k[0]}/{k[1]}, which has no input chunk")
        lo, hi, _ = spans[k]
        if o.base_offset < lo or o.last_offset > hi:
            raise MetadataError(
                INVALID_REQUEST,
                f"output [{o.base_offset}, {o.last_offset}] of {k[0]}/{k[1]} is outside the inputs' [{lo}, {hi}]",
            )
        by_part[k].append(o)
    for k, outs in by_part.items():
        outs.sort(key=lambda o: o.base_offset)
        for a, b in zip(outs, outs[1:], strict=False):
            if b.base_offset <= a.last_offset:
                raise MetadataError(INVALID_REQUEST, f"output chunks of {k[0]}/{k[1]} overlap")
        if sum(o.record_count for o in outs) > spans[k][2]:
            raise MetadataError(
                INVALID_REQUEST, f"outputs of {k[0]}/{k[1]} hold more records than the inputs"
            )
    return by_part


def _check_no_remaining_overlap(conn: Connection, by_part: dict[Key, list[OutputChunk]]) -> None:
    """MetadataError if an output overlaps a chunk that remains (run after the inputs are deleted)."""
    c = chunks.c
    for k, outs in by_part.items():
        for o in outs:
            nxt = conn.execute(
                select(c.base_offset)
                .where(c.topic_id == k[0], c.partition == k[1], c.last_offset >= o.base_offset)
                .order_by(c.last_offset)
                .limit(1)
            ).scalar()
            if nxt is not None and nxt <= o.last_offset:
                raise MetadataError(
                    INVALID_REQUEST,
                    f"output [{o.base_offset}, {o.last_offset}] of {k[0]}/{k[1]} overlaps a remaining chunk",
                )


def _insert_output_file(conn: Connection, file: FileSpec, outputs: Sequence[OutputChunk], now: int) -> None:
    """The output file's row and its chunks; without outputs (everything was cleaned away)
    the file is born `deleting`."""
    state = FILE_LIVE if outputs else FILE_DELETING
    file_id = conn.execute(
        insert(files)
        .values(
            object_key=file.object_key,
            size_bytes=file.size_bytes,
            level=file.level,
            state=state,
            writer=file.writer,
            created_ms=now,
            committed_ms=now,
            deleting_since_ms=None if outputs else now,
        )
        .returning(files.c.id)
    ).scalar_one()
    if not outputs:
        return
    conn.execute(
        insert(chunks),
        [
            {
                "file_id": file_id,
                "topic_id": o.topic_id,
                "partition": o.partition,
                "byte_position": o.byte_position,
                "byte_length": o.byte_length,
                "base_offset": o.base_offset,
                "last_offset": o.last_offset,
                "record_count": o.record_count,
                "batch_count": o.batch_count,
                "max_timestamp": o.max_timestamp,
                "min_timestamp": o.min_timestamp,
                "offsets_absolute": True,
                "present_offsets": o.present_offsets,
            }
            for o in outputs
        ],
    )
