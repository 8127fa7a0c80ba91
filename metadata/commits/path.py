"""The commit path: recording a file an agent wrote, assigning offsets to its batches.

`commit_file` records, in ONE transaction, the file, the offsets of its accepted batches
(contiguous per partition, in commit order) and one chunk row per contiguous run of
accepted batches; its answer carries, per chunk spec, the batches' offsets and the
locations of the chunk rows written (`ChunkResult.locations`).

Steps of the transaction (`_commit_tx`): lock the partitions of every file (sorted
(topic id, partition) order), read their state, their producers' state and the records
of the transactional ids of their transactional batches (one statement for the whole
group: `transactions.load_for_commit`), plan each file in order (pure:
`metadata.commits.plan`), write. The commit is the one place that decides whether a
transactional batch may be stored (its transaction ongoing, with its producer id and
epoch, holding the partition): checked in the transaction that assigns its offsets, so a
transaction that ends (EndTxn, a timeout, a fencing InitProducerId) between the Produce
request and the commit cannot be reopened by a late batch. The statements are the dialect's
(`metadata.commits.storage.CommitSql`: PostgreSQL or SQLite); the logic here is written once.

Group commit: commits that arrive while another is running (other threads of this
process) are committed together in the next transaction (`metadata.commits.batching`), in
arrival order, each with exactly the outcome it would have had alone.

The object check (`metadata.commits.object_check`, when the service knows its bucket): before a
commit joins a group, ONE HEAD checks that its object exists with the stated size; a
missing or wrong-sized object refuses the commit (KAFKA_STORAGE_ERROR) and nothing is
stored. It runs in the caller's thread with no transaction open and no lock held. A
missing object whose key is already recorded (a retry after a lost answer, the object
since collected) is answered from what was recorded, as any re-commit.

Commit of a file whose chunks all fail: the file row is still recorded, as `deleting`,
so that garbage collection removes the object like any other unreferenced file.
Committing an object key that is already recorded (a retry after a lost answer)
changes nothing and answers from what was recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from skiff.metadata.commits import idempotence
from skiff.metadata.commits.batching import GroupCommitter
from skiff.metadata.commits.feed import CommitFeed
from skiff.metadata.commits.object_check import ObjectCheck
from skiff.metadata.commits.plan import (
    CommitPlan,
    PartitionRow,
    PKey,
    ProducerStates,
    RecordedChunk,
    TKey,
    TopicIndex,
    TxnRecords,
    answer_recommit,
    plan_commit,
    producer_keys,
    transactional_ids,
    with_locations,
)
from skiff.metadata.commits.validation import check_commit
from skiff.metadata.db import read_tx, write_tx
from skiff.metadata.errors import KAFKA_STORAGE_ERROR, MetadataError
from skiff.metadata.rows import LOC_COLS, Db, allocate_producer_id, location_of
from skiff.metadata.schema import chunks, files
from skiff.metadata.transactions.store import apply_commit_events, load_for_commit
from skiff.metadata.types import ChunkResult, ChunkSpec, FileSpec
from sqlalchemy import Connection, select
from sqlalchemy.exc import IntegrityError

CommitItem = tuple[FileSpec, Sequence[ChunkSpec]]


class CommitPath:
    def __init__(
        self, db: Db, feed: CommitFeed, *, group_commit: bool = True, object_check: ObjectCheck | None = None
    ) -> None:
        self._db = db
        self._feed = feed
        # None: no bucket known (or the check turned off): commits are not checked.
        self.object_check = object_check
        # Public for tests and benchmarks (how many commits were grouped).
        self.combiner: GroupCommitter[CommitItem, list[ChunkResult]] | None = None
        if group_commit:
            self.combiner = GroupCommitter(self.commit_group, max_items=64, max_weight=20_000)

    def commit_file(self, file: FileSpec, chunk_specs: Sequence[ChunkSpec]) -> list[ChunkResult]:
        """Commit a file just written to the bucket: in ONE transaction, record the file,
        assign offsets to its accepted batches (contiguous per partition, in commit order)
        and insert one chunk row per contiguous run of accepted batches.

        Per batch: unknown topic/partition -> the whole chunk fails with 3 (the others
        commit); a batch larger than the topic's max.message.bytes -> 10; idempotence
        failures -> 45/47 (see metadata.commits.idempotence); a transactional data batch whose
        transactional id's record does not show its producer id and epoch with an ongoing
        transaction holding the partition -> 47/48 (metadata.transactions.state.check_produce);
        a duplicate of a cached batch ->
        success with its original offsets, not stored again (its bytes stay in the file,
        no chunk row points at them). If no batch is stored, the file row is recorded as
        `deleting` (GC removes the object). If the object key was already committed (a
        retry whose first answer was lost), nothing changes and the answer is rebuilt
        from the recorded chunk rows (commit_plan.answer_recommit).

        Group commit: commits that arrive while another is running (other threads of this
        process) are committed together in the next transaction, in arrival order, each
        with exactly the outcome it would have had alone; they share the partition locks,
        the statements and the fsync. A database error fails every file of the group
        (none of them is recorded; each caller may retry)."""
        check_commit(file, chunk_specs)
        self.verify_object(file)  # before any transaction or lock (one HEAD)
        if self.combiner is None:
            return self.commit_group([(file, chunk_specs)])[0]
        return self.combiner.submit((file, chunk_specs), sum(len(c.batches) for c in chunk_specs))

    def verify_object(self, file: FileSpec) -> None:
        """Refuse (MetadataError KAFKA_STORAGE_ERROR) a file whose object is not in the
        bucket with its stated size; a no-op without an object check. A missing object
        whose key is already recorded passes: its commit is answered as a re-commit."""
        if self.object_check is None:
            return
        problem = self.object_check.problem(file)
        if problem is None:
            return
        if problem.outcome == "missing" and self._recorded(file.object_key):
            return
        raise MetadataError(KAFKA_STORAGE_ERROR, problem.message)

    def object_check_metrics_lines(self) -> list[str]:
        return [] if self.object_check is None else self.object_check.metrics_lines()

    def _recorded(self, object_key: str) -> bool:
        with read_tx(self._db.engine) as conn:
            return (
                conn.execute(select(files.c.id).where(files.c.object_key == object_key)).first() is not None
            )

    def commit_group(self, items: list[CommitItem]) -> list[list[ChunkResult]]:
        """Commit several files in one transaction; files already recorded (or a key twice
        in the group) make it fall back to one transaction per file."""
        if len({f.object_key for f, _ in items}) == len(items):
            try:
                out = self._commit_tx(items)
            except IntegrityError as e:
                # A concurrent commit of one of the object keys (another replica) won the
                # unique index: this transaction rolled back; go on file by file.
                if "object_key" not in str(e.orig):
                    raise
                out = None
            if out is not None:
                return out
        results = []
        for item in items:
            try:
                one = self._commit_tx([item])
            except IntegrityError as e:
                if "object_key" not in str(e.orig):
                    raise
                one = self._commit_tx([item])  # now it is recorded: answered as a re-commit
            assert one is not None
            results.extend(one)
        return results

    def _commit_tx(self, items: list[CommitItem]) -> list[list[ChunkResult]] | None:
        """One transaction: lock the partitions of all files (sorted (topic id, partition)
        order), read their state and their producers' state, plan each file in order,
        write everything. None (nothing written) if some object key is already recorded
        and there are several files; with one file, the answer of a re-commit."""
        now = self._db.clock()
        tindex = TopicIndex({c.topic_id for _, specs in items for c in specs})
        spec_keys = [[(tindex.index[c.topic_id], c.partition) for c in specs] for _, specs in items]
        keys = sorted(
            {k for ks in spec_keys for k in ks}
        )  # (topic index, partition) sorts as (id, partition)
        object_keys = [f.object_key for f, _ in items]
        with write_tx(self._db.engine) as conn:
            locked, existing = self._db.dialect.lock_for_commit(conn, tindex, keys, object_keys)
            all_specs = [c for _, specs in items for c in specs]
            all_keys = [k for ks in spec_keys for k in ks]
            pkeys = producer_keys(all_specs, all_keys, locked)
            pstate = self._db.dialect.load_producer_state(conn, tindex, pkeys)
            if existing and len(items) > 1:
                return None
            # Read once for the group: a file of the group can only complete a transaction
            # that is already PREPARE_* here (its markers were written after EndTxn), which
            # refuses that transaction's data batches as COMPLETE_* would.
            txn_ids = transactional_ids(all_specs, all_keys, locked)
            txns: TxnRecords = load_for_commit(conn, txn_ids) if txn_ids else {}
            if existing:
                file, specs = items[0]
                return [self._answer_recommit(conn, file, specs, spec_keys[0], tindex, locked, pstate, txns)]
            plans = []
            for (_, specs), ks in zip(items, spec_keys, strict=True):
                plan = plan_commit(specs, ks, locked, pstate, now, txns)
                for k, hwm in plan.hwms.items():  # the next file of the group goes on from here
                    locked[k].high_watermark = hwm
                plans.append(plan)
            hwms, entries = _writes_of(plans, pstate)
            chunk_ids = self._db.dialect.write_commit(
                conn, [f for f, _ in items], plans, tindex, hwms, entries, now
            )
            apply_commit_events(
                conn,
                [
                    (tindex.ids[e.key[0]], e.key[1], e.key[2], e.control_type, e.offset)
                    for p in plans
                    for e in p.txn_events
                ],
                [c for f, _ in items for c in f.completes],
                now,
            )
            moved = [(tindex.ids[k[0]], k[1]) for p in plans for k in p.hwms]
            self._db.dialect.notify_committed(conn, moved)
        self._feed.publish(moved)
        return [
            with_locations(p, f.object_key, ids)
            for p, (f, _), ids in zip(plans, items, chunk_ids, strict=True)
        ]

    def _answer_recommit(
        self,
        conn: Connection,
        file: FileSpec,
        chunk_specs: Sequence[ChunkSpec],
        spec_keys: Sequence[TKey],
        tindex: TopicIndex,
        locked: dict[TKey, PartitionRow],
        pstate: ProducerStates,
        txns: TxnRecords,
    ) -> list[ChunkResult]:
        rows = conn.execute(
            select(chunks.c.topic_id, chunks.c.partition, *LOC_COLS)
            .join(files, files.c.id == chunks.c.file_id)
            .where(files.c.object_key == file.object_key)
            .order_by(chunks.c.last_offset)
        ).all()
        recorded = {
            (tindex.index[r.topic_id], r.partition, r.byte_position): RecordedChunk(
                r.byte_position, r.byte_length, r.base_offset
            )
            for r in rows
            if r.topic_id in tindex.index
        }
        results = answer_recommit(file.object_key, chunk_specs, spec_keys, locked, pstate, recorded, txns)
        # The chunks still recorded for each spec (the first answer, lost, carried them).
        out = []
        for spec, result in zip(chunk_specs, results, strict=True):
            starts = {b.byte_offset for b in spec.batches}
            locs = tuple(
                location_of(r)
                for r in rows
                if r.topic_id == spec.topic_id and r.partition == spec.partition and r.byte_position in starts
            )
            out.append(replace(result, locations=locs) if locs else result)
        return out

    def init_producer_id(self) -> tuple[int, int]:
        """A fresh producer id with epoch 0, from the `producer_id` counter row."""
        with write_tx(self._db.engine) as conn:
            return allocate_producer_id(conn), 0


def _writes_of(
    plans: list[CommitPlan], pstate: ProducerStates
) -> tuple[dict[TKey, int], list[tuple[PKey, idempotence.ProducerEntry]]]:
    """The new high watermarks and the changed producer entries of a group's plans."""
    hwms: dict[TKey, int] = {}
    changed: dict[PKey, None] = {}
    for plan in plans:
        hwms.update(plan.hwms)
        changed.update(dict.fromkeys(plan.changed))
    entries = []
    for k in changed:
        e = pstate[k]
        assert e is not None
        entries.append((k, e))
    return hwms, entries
