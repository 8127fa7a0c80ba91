"""The chunk reader: a chunk's bytes plus its location give batches with absolute offsets.

Pure code (no I/O, no asyncio, no object store): the drivers `fileformat.read_async`
(the agent) and `fileformat.read_sync` (Spark executors, CLI tools) fetch the bytes and
call this module. Every reader of the bucket goes through these rules.

Offsets. A `ChunkLocation` (from metadata) names a run of whole RecordBatches of one
partition inside one object and the offsets `[base_offset, last_offset]` it holds.
Agent-written chunks (`offsets_absolute` False) store the producers' relative base
offsets: the first batch gets `base_offset`, each next batch the previous base +
lastOffsetDelta + 1 (`fileformat.batch_header.iter_assigned_offsets`). Compactor-written chunks
carry absolute offsets and may have holes (offsets removed by compaction, so a batch's
base may be above the previous batch's end). The 8-byte baseOffset lies outside the
CRC-32C range, so rewriting it in the copy sent to a client changes no checksum. A batch
ending past `last_offset`, or absolute offsets going backwards, is an error
(`ChunkReadError`, naming the object and the byte position): a reader never guesses.

Fetch selection (Kafka's rules, `select_batches` / `select_fetch`): batches wholly below
the fetch offset are skipped; a batch containing the fetch offset is returned whole
(clients skip the records before their position); batches are added while the byte budget
allows, whole batches only; the first batch of the first partition that returns data is
returned even when it alone is larger than the budget (KIP-74), so a consumer always makes
progress past a big batch. Across the partitions of one request the request's byte budget
is shared in request order: each partition gets min(its own max, what is left).

Planning (`plan_reads`, `plan_fetch`, `plan_readahead`, `coalesce_ranges`): which chunks
a fetch needs before any byte is read, so that a driver can read the chunks of one object
together (one ranged GET per run of ranges whose gaps are at most a coalescing gap).
`plan_reads` chooses what a multi-partition fetch serves object by object rather than
partition by partition: Kafka lets a broker return less than a partition's limit, and
serving, say, the first 7 files of 100 partitions costs 7 GETs where serving 20
partitions to their limit touches every file of the window (see its docstring).

Integrity: with `verify_crc`, every batch a selection returns has its CRC-32C checked
(in C, `crc32c`) before it is served, so a flipped bit in the bucket (or in memory)
becomes a `ChunkReadError` naming the object and byte position, never a silently wrong
record. It is checked when served rather than once when the bytes enter a cache: a
cache keeps whole spans, including gap bytes later served as chunks of their own.

ListOffsets (`first_record_at_or_after`, `max_timestamp_record`): metadata narrows a
timestamp query to one chunk; these find the exact record inside it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from skiff.fileformat.batch_header import BatchHeader, RecordBatchError, iter_batches, patch_base_offset
from skiff.fileformat.record_decode import decode_records, validate_batch

BytesLike = bytes | bytearray | memoryview
RangeKey = tuple[str, int, int]
"""(object key, byte position, byte length): one chunk's bytes in the bucket."""


@dataclass(frozen=True)
class ChunkLocation:
    """Where a run of batches lives, and which offsets it holds."""

    chunk_id: int
    object_key: str
    byte_position: int
    byte_length: int
    base_offset: int
    last_offset: int
    record_count: int
    max_timestamp: int
    # True for compactor output: batches carry absolute offsets already. False for
    # agent files: the reader rewrites each batch's baseOffset, starting at base_offset
    # and advancing by each batch's last_offset_delta + 1.
    offsets_absolute: bool = False
    # Serialized pyroaring BitMap of (offset - base_offset) still present, compacted
    # chunks only; None means every offset in [base_offset, last_offset] is present.
    present_offsets: bytes | None = None
    # ms: no record of the chunk is older (a lower bound); None for chunks written before
    # metadata kept it (unknown: a time-bounded scan must read them).
    min_timestamp: int | None = None

    @property
    def range_key(self) -> RangeKey:
        return (self.object_key, self.byte_position, self.byte_length)


class ChunkReadError(ValueError):
    """A chunk's bytes contradict its location (or are not valid batches, or fail a CRC).

    `object_key` and `position` (absolute byte position in the object) say where.
    """

    def __init__(self, object_key: str, position: int, message: str) -> None:
        super().__init__(f"{object_key}@{position}: {message}")
        self.object_key = object_key
        self.position = position


class ChunkBatch(NamedTuple):
    """One batch of a chunk: its position in the chunk's bytes, its header as stored, and
    its absolute base offset."""

    position: int
    header: BatchHeader
    base_offset: int

    @property
    def size(self) -> int:
        return self.header.size

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.header.last_offset_delta


def iter_chunk_batches(
    loc: ChunkLocation, data: BytesLike, *, verify_crc: bool = False
) -> Iterator[ChunkBatch]:
    """Walk the batches of one chunk with their absolute base offsets (see the module doc).

    With `verify_crc`, each batch's CRC-32C is checked too (corrupt bytes raise
    `ChunkReadError` naming the object and the batch's position).
    """
    if len(data) != loc.byte_length:
        raise ChunkReadError(
            loc.object_key, loc.byte_position, f"chunk is {loc.byte_length} bytes, got {len(data)}"
        )
    next_min = loc.base_offset  # the lowest base offset the next batch may have
    base = loc.base_offset
    pos = 0
    try:
        for pos, header in iter_batches(data):
            if verify_crc:
                validate_batch(data, pos)
            if loc.offsets_absolute:
                base = header.base_offset
                if base < next_min:
                    raise ChunkReadError(
                        loc.object_key,
                        loc.byte_position + pos,
                        f"batch base offset {base} is below {next_min} (offsets must increase)",
                    )
            last = base + header.last_offset_delta
            if last > loc.last_offset:
                raise ChunkReadError(
                    loc.object_key,
                    loc.byte_position + pos,
                    f"batches run past the chunk's last offset {loc.last_offset} (got {last})",
                )
            yield ChunkBatch(pos, header, base)
            next_min = last + 1
            base = next_min
    except RecordBatchError as exc:
        where = exc.position if exc.position is not None else pos
        raise ChunkReadError(loc.object_key, loc.byte_position + where, str(exc)) from exc


# ------------------------------------------------------------------------------ selection


@dataclass(frozen=True)
class FetchSelection:
    """What one partition returns: whole batches (offsets absolute), the offset after the
    last one returned (the fetch offset if none), and how many batches."""

    records: bytes
    next_offset: int
    batch_count: int


class PartitionSelector:
    """Kafka's selection rule for one partition, fed one chunk at a time in offset order."""

    def __init__(
        self,
        fetch_offset: int,
        max_bytes: int,
        *,
        first_batch_unbounded: bool = True,
        verify_crc: bool = False,
    ) -> None:
        self.fetch_offset = fetch_offset
        self.verify_crc = verify_crc
        self.max_bytes = max(max_bytes, 0)
        self.first_batch_unbounded = first_batch_unbounded
        self.total_bytes = 0
        self.next_offset = fetch_offset
        self.done = False
        # (chunk bytes, position in them, size, base offset to write or None)
        self._pieces: list[tuple[BytesLike, int, int, int | None]] = []

    def feed(self, loc: ChunkLocation, data: BytesLike) -> bool:
        """Take the next chunk's bytes; return True while more chunks could be used."""
        if self.done:
            return False
        for batch in iter_chunk_batches(loc, data):
            last = batch.last_offset
            if last < self.fetch_offset:
                continue
            size = batch.size
            if self.total_bytes + size > self.max_bytes and (self._pieces or not self.first_batch_unbounded):
                self.done = True
                return False
            if self.verify_crc:
                _verify(loc, data, batch.position)
            self._pieces.append(
                (data, batch.position, size, None if loc.offsets_absolute else batch.base_offset)
            )
            self.total_bytes += size
            self.next_offset = last + 1
            if self.total_bytes >= self.max_bytes:
                self.done = True
                return False
        return True

    def result(self) -> FetchSelection:
        out = bytearray(self.total_bytes)
        cursor = 0
        for data, pos, size, new_base in self._pieces:
            out[cursor : cursor + size] = data[pos : pos + size]
            if new_base is not None:
                patch_base_offset(out, cursor, new_base)
            cursor += size
        return FetchSelection(bytes(out), self.next_offset, len(self._pieces))


def _verify(loc: ChunkLocation, data: BytesLike, position: int) -> None:
    try:
        validate_batch(data, position)
    except RecordBatchError as exc:
        raise ChunkReadError(loc.object_key, loc.byte_position + position, str(exc)) from exc


def select_batches(
    chunks: Iterable[tuple[ChunkLocation, BytesLike]],
    fetch_offset: int,
    max_bytes: int,
    *,
    first_batch_unbounded: bool = True,
    verify_crc: bool = False,
) -> FetchSelection:
    """One partition's fetch answer from its chunks (in offset order) and their bytes;
    with `verify_crc` every batch returned has its CRC-32C checked (`ChunkReadError`)."""
    selector = PartitionSelector(
        fetch_offset, max_bytes, first_batch_unbounded=first_batch_unbounded, verify_crc=verify_crc
    )
    for loc, data in chunks:
        if not selector.feed(loc, data):
            break
    return selector.result()


@dataclass(frozen=True)
class PartitionRead:
    """One partition of a fetch: its chunk locations (offset order), fetch offset and
    byte limit (the partition's max bytes)."""

    locations: Sequence[ChunkLocation]
    fetch_offset: int
    max_bytes: int


@dataclass(frozen=True)
class FetchOutcome:
    """`select_fetch`'s answer. `missing` empty: `results` holds one entry per read (a
    selection, or the exception that made that partition unreadable). `missing` not
    empty: the chunks to load before calling again (results are then incomplete)."""

    results: list[FetchSelection | Exception]
    missing: list[ChunkLocation]


def select_fetch(
    reads: Sequence[PartitionRead],
    max_bytes: int,
    chunks: Mapping[RangeKey, BytesLike],
    failed: Mapping[RangeKey, Exception] | None = None,
    *,
    verify_crc: bool = False,
) -> FetchOutcome:
    """Run the selection for every partition in request order with the shared budget.

    `chunks` holds the bytes loaded so far, `failed` the chunks whose load failed (their
    partition's result is that exception and it takes nothing from the budget). Stops at
    the first partition that needs a chunk not loaded yet: later partitions' budgets
    depend on what it returns.
    """
    failed = failed or {}
    results: list[FetchSelection | Exception] = []
    total = 0
    for index, read in enumerate(reads):
        limit = min(read.max_bytes, max_bytes - total)
        if not read.locations or (limit <= 0 and total > 0):
            results.append(FetchSelection(b"", read.fetch_offset, 0))
            continue
        selector = PartitionSelector(
            read.fetch_offset, limit, first_batch_unbounded=total == 0, verify_crc=verify_crc
        )
        error: Exception | None = None
        for loc in read.locations:
            if loc.last_offset < read.fetch_offset:
                continue  # wholly below the fetch offset: its bytes are not needed
            key = loc.range_key
            if key in failed:
                error = failed[key]
                break
            data = chunks.get(key)
            if data is None:
                planned = plan_fetch(reads[index:], max_bytes - total, first_unbounded=total == 0)
                missing = [m for m in planned if m.range_key not in chunks]
                if key not in {m.range_key for m in missing}:
                    missing.insert(0, loc)
                return FetchOutcome(results, missing)
            try:
                if not selector.feed(loc, data):
                    break
            except ChunkReadError as exc:
                error = exc
                break
        if error is not None:
            results.append(error)
            continue
        selection = selector.result()
        total += len(selection.records)
        results.append(selection)
    return FetchOutcome(results, [])


# ------------------------------------------------------------------------------ planning


def plan_fetch(
    reads: Sequence[PartitionRead], max_bytes: int, *, first_unbounded: bool = True
) -> list[ChunkLocation]:
    """The chunks a fetch will need, before any byte is read.

    Per partition, chunks wholly below the fetch offset are left out; then its first
    chunk (it may hold bytes below the fetch offset, so it is not counted), then chunks while the bytes counted so far are below the partition's
    limit: the selection cannot go further, since every later chunk lies wholly at or
    after the fetch offset. The shared budget left for later partitions is estimated
    from those byte counts; when the estimate is off (whole batches end a partition a
    little short), `select_fetch` reports the chunks still missing.
    """
    out: list[ChunkLocation] = []
    used = 0
    for read in reads:
        limit = min(read.max_bytes, max_bytes - used)
        if not read.locations or (limit <= 0 and (used > 0 or not first_unbounded)):
            continue
        locations = [loc for loc in read.locations if loc.last_offset >= read.fetch_offset]
        if not locations:
            continue
        out.append(locations[0])
        counted = 0
        for loc in locations[1:]:
            if counted >= limit:
                break
            out.append(loc)
            counted += loc.byte_length
        used += min(counted, max(limit, 0))
    return out


def plan_reads(
    reads: Sequence[PartitionRead], max_bytes: int, *, first_unbounded: bool = True
) -> list[PartitionRead]:
    """What a fetch serves, chosen object by object: per read, a prefix of its chunks
    (those wholly below the fetch offset left out), as reads for `select_fetch`.

    Counting is `plan_fetch`'s for each partition's own limit (its first chunk, which may
    hold bytes below the fetch offset, is not counted; it takes chunks while its count
    is below its limit) and for the first partition with data, so for one partition the
    plan is exactly `plan_fetch`'s; the shared budget (chunks are taken while the total
    is below `max_bytes`) also counts the other partitions' first chunks, by the share of
    their offsets at or after the fetch offset. With many partitions the order differs:
    objects are taken oldest first (the object of the waiting chunk with the lowest
    `chunk_id`; metadata numbers chunks in commit order), and every partition whose next
    chunk lies in the object takes it (and its following chunks while they stay in that
    object). So each object a fetch reads is served as fully as its partitions'
    positions allow, and a fetch of N partitions whose files each hold a chunk of every
    partition reads about budget / file size files, each once, instead of every file of
    the window. Oldest first also means no partition waits for ever: the chunks older
    than a lagging partition's next one are finitely many and each fetch takes some.
    """
    pending = [[loc for loc in r.locations if loc.last_offset >= r.fetch_offset] for r in reads]
    taken = [0] * len(reads)
    counted = [0] * len(reads)
    used = 0

    def eligible(i: int) -> bool:
        return taken[i] < len(pending[i]) and (taken[i] == 0 or counted[i] < reads[i].max_bytes)

    def take(i: int) -> None:
        nonlocal used
        loc = pending[i][taken[i]]
        if taken[i] > 0:
            counted[i] += loc.byte_length
            used += loc.byte_length
        elif i != first:
            # Another partition's first chunk counts towards the shared budget by the
            # share of its offsets at or after the fetch offset (records are of similar
            # sizes): not counting it at all would let 100 partitions overrun the budget
            # by 100 chunks, i.e. read objects this fetch cannot serve.
            span = loc.last_offset - loc.base_offset + 1
            used += (
                loc.byte_length * (loc.last_offset - max(reads[i].fetch_offset, loc.base_offset) + 1) // span
            )
        taken[i] += 1

    # the first partition with data in request order: its first chunk is not counted
    # against the budget (as in plan_fetch; select_fetch gives it the KIP-74 first batch)
    first = next((i for i in range(len(reads)) if pending[i]), None)
    if first is None or (max_bytes <= 0 and not first_unbounded):
        return [PartitionRead((), read.fetch_offset, read.max_bytes) for read in reads]
    started = False
    while True:
        # the object of the oldest waiting chunk (metadata numbers chunks in commit order)
        next_chunks = [pending[i][taken[i]] for i in range(len(reads)) if eligible(i)]
        if not next_chunks:
            return _planned(reads, pending, taken)
        chosen = min(next_chunks, key=lambda loc: loc.chunk_id).object_key
        for i in range(len(reads)):
            while eligible(i) and pending[i][taken[i]].object_key == chosen:
                if used >= max_bytes and started:  # the budget is spent (KIP-74: not before one chunk)
                    return _planned(reads, pending, taken)
                take(i)
                started = True


def _planned(
    reads: Sequence[PartitionRead], pending: list[list[ChunkLocation]], taken: list[int]
) -> list[PartitionRead]:
    return [
        PartitionRead(pending[i][: taken[i]], read.fetch_offset, read.max_bytes)
        for i, read in enumerate(reads)
    ]


def group_by_object(locations: Iterable[ChunkLocation]) -> dict[str, list[tuple[int, int]]]:
    """Distinct (position, length) ranges per object, in first-seen order (one read
    request per object for a driver)."""
    out: dict[str, list[tuple[int, int]]] = {}
    seen: set[RangeKey] = set()
    for loc in locations:
        if loc.range_key not in seen:
            seen.add(loc.range_key)
            out.setdefault(loc.object_key, []).append((loc.byte_position, loc.byte_length))
    return out


class Span(NamedTuple):
    """One read covering several ranges of an object: [start, start + length)."""

    start: int
    length: int
    members: tuple[int, ...]  # indexes of the ranges it covers, in the order given

    @property
    def end(self) -> int:
        return self.start + self.length


def coalesce_ranges(
    ranges: Sequence[tuple[int, int]], gap_bytes: int, *, max_span_bytes: int | None = None
) -> list[Span]:
    """Group (start, length) ranges of one object into spans, one read each: ranges
    overlapping or at most `gap_bytes` apart share a span, unless the span would grow
    beyond `max_span_bytes` (a single range longer than that is a span of its own).
    Spans are in position order."""
    order = sorted(range(len(ranges)), key=lambda i: ranges[i][0])
    spans: list[Span] = []
    start = end = -1
    members: list[int] = []
    for i in order:
        s, length = ranges[i]
        if (
            members
            and s <= end + gap_bytes
            and (max_span_bytes is None or max(end, s + length) - start <= max_span_bytes)
        ):
            end = max(end, s + length)
            members.append(i)
            continue
        if members:
            spans.append(Span(start, end - start, tuple(members)))
        start, end, members = s, s + length, [i]
    if members:
        spans.append(Span(start, end - start, tuple(members)))
    return spans


def plan_readahead(
    reads: Sequence[PartitionRead],
    needed: Sequence[ChunkLocation],
    *,
    gap_bytes: int,
    max_bytes: int,
    is_cached: Callable[[RangeKey], bool] = lambda _k: False,
) -> list[ChunkLocation]:
    """Chunks worth reading now although this fetch does not need them: chunks of the
    request's partitions (beyond its byte budget) that lie in an object this fetch reads
    anyway and would join one of its reads (within `gap_bytes`), so that the next fetch,
    which will ask for them, finds them cached instead of costing another GET. At most
    `max_bytes` of them, objects in the order the fetch needs them."""
    if max_bytes <= 0 or not needed:
        return []
    needed_keys = {loc.range_key for loc in needed}
    by_object: dict[str, list[ChunkLocation]] = {}
    for loc in needed:
        if not is_cached(loc.range_key):
            by_object.setdefault(loc.object_key, []).append(loc)
    candidates: dict[str, list[ChunkLocation]] = {}
    seen: set[RangeKey] = set()
    for read in reads:
        for loc in read.locations:
            key = loc.range_key
            if loc.object_key in by_object and key not in needed_keys and key not in seen:
                seen.add(key)
                if not is_cached(key):
                    candidates.setdefault(loc.object_key, []).append(loc)
    out: list[ChunkLocation] = []
    budget = max_bytes
    for object_key, wanted in by_object.items():
        extra = candidates.get(object_key)
        if not extra:
            continue
        together = wanted + extra
        spans = coalesce_ranges([(c.byte_position, c.byte_length) for c in together], gap_bytes)
        for span in spans:
            if not any(i < len(wanted) for i in span.members):
                continue  # a run of extra chunks alone would cost a GET of its own now
            for i in span.members:
                if i >= len(wanted):
                    loc = together[i]
                    if loc.byte_length > budget:
                        return out
                    budget -= loc.byte_length
                    out.append(loc)
    return out


# ------------------------------------------------------------------------------ ListOffsets


def first_record_at_or_after(
    loc: ChunkLocation, data: BytesLike, timestamp_ms: int, *, min_offset: int = 0
) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record at or after `min_offset` whose timestamp is
    >= `timestamp_ms`, or None. Batches whose maxTimestamp is below it are not decoded."""
    for batch in iter_chunk_batches(loc, data):
        header = batch.header
        if header.max_timestamp < timestamp_ms or batch.last_offset < min_offset:
            continue
        for record in decode_records(data, batch.position, header=header):
            offset = batch.base_offset + record.offset_delta
            if offset >= min_offset and record.timestamp >= timestamp_ms:
                return offset, record.timestamp
    return None


def max_timestamp_record(
    loc: ChunkLocation, data: BytesLike, *, min_offset: int = 0
) -> tuple[int, int] | None:
    """(offset, timestamp) of the record with the largest timestamp at or after
    `min_offset` (the earliest such record on ties, as Kafka answers MAX_TIMESTAMP), or
    None. Only batches whose maxTimestamp could hold it are decoded."""
    batches = [b for b in iter_chunk_batches(loc, data) if b.last_offset >= min_offset]
    best: tuple[int, int] | None = None  # (timestamp, offset)
    for batch in sorted(batches, key=lambda b: -b.header.max_timestamp):
        if best is not None and batch.header.max_timestamp < best[0]:
            break
        for record in decode_records(data, batch.position, header=batch.header):
            offset = batch.base_offset + record.offset_delta
            if offset < min_offset:
                continue
            if (
                best is None
                or record.timestamp > best[0]
                or (record.timestamp == best[0] and offset < best[1])
            ):
                best = (record.timestamp, offset)
    return None if best is None else (best[1], best[0])
