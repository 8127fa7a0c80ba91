"""Idempotent-producer bookkeeping per (partition, producer), as Kafka's ProducerStateManager.

Pure: the service loads the entries of the partitions it has locked, runs every batch of a
commit through `check_and_update` in commit order (so a retry landing in the same file is
a duplicate of the first copy), and writes back the entries that changed.

Rules (Kafka 2.5+ / KIP-360, `ProducerAppendInfo.checkProducerEpoch` / `checkSequence` and
`ProducerStateEntry.findDuplicateBatch`):

1. A batch whose (first_seq, last_seq) and epoch equal one of the last 5 batches cached for
   its producer is a duplicate: success with the ORIGINAL base offset; nothing is stored.
2. Epoch lower than the known one: INVALID_PRODUCER_EPOCH (47), which is what Kafka
   returns to a producer (rather than PRODUCER_FENCED) since 2.7.
3. A higher epoch must start at sequence 0, else OUT_OF_ORDER_SEQUENCE_NUMBER (45). An
   accepted batch with a new epoch clears the cached batches.
4. Same epoch: first_seq must be last_seq + 1 of the latest cached batch (int32 wraps to
   0), else OUT_OF_ORDER_SEQUENCE_NUMBER (45).
5. Unknown producer (no state for this partition, e.g. expired or never seen): any
   sequence is accepted. This is Kafka's current behaviour (KIP-360: the broker no
   longer answers UNKNOWN_PRODUCER_ID once producer state has been removed by retention),
   so UNKNOWN_PRODUCER_ID (59) is never returned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from skiff.metadata.errors import INVALID_PRODUCER_EPOCH, OUT_OF_ORDER_SEQUENCE_NUMBER

INT32_MAX = 2**31 - 1
BATCHES_TO_RETAIN = 5
NO_PRODUCER_ID = -1


class CachedBatch(NamedTuple):
    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int
    append_time_ms: int = -1  # the commit time reported for LogAppendTime topics, else -1

    def to_json(self) -> list[int]:
        return list(self)

    @staticmethod
    def from_json(v: list[int]) -> CachedBatch:
        return CachedBatch._make(v) if len(v) == 5 else CachedBatch(v[0], v[1], v[2], v[3])


@dataclass
class ProducerEntry:
    epoch: int
    batches: list[CachedBatch] = field(default_factory=list)  # oldest first, at most 5


def increment_sequence(seq: int, delta: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: seq + delta wrapping past int32 max to 0."""
    if seq > INT32_MAX - delta:
        return delta - (INT32_MAX - seq) - 1
    return seq + delta


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


@dataclass(frozen=True)
class Verdict:
    """`error` != 0: rejected. `duplicate_of` set: already stored, answer with its offsets."""

    error: int = 0
    message: str | None = None
    duplicate_of: CachedBatch | None = None


def check(entry: ProducerEntry | None, epoch: int, first_seq: int, last_seq: int) -> Verdict:
    """Judge one batch against the producer's state; does not modify the state."""
    if entry is not None:
        if epoch == entry.epoch:
            for b in entry.batches:
                if b.first_seq == first_seq and b.last_seq == last_seq:
                    return Verdict(duplicate_of=b)
        if epoch < entry.epoch:
            return Verdict(
                INVALID_PRODUCER_EPOCH,
                f"Epoch of producer is {epoch}, which is smaller than the last seen epoch {entry.epoch}",
            )
        if epoch != entry.epoch:
            if first_seq != 0:
                return Verdict(
                    OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"Invalid sequence number for new epoch {epoch}: {first_seq} (request epoch), 0 (expected)",
                )
        elif entry.batches:
            last = entry.batches[-1].last_seq
            if not in_sequence(last, first_seq):
                return Verdict(
                    OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"Out of order sequence number: {first_seq} (incoming seq. number), {last} (current end "
                    "sequence number)",
                )
    return Verdict()


def record(entry: ProducerEntry | None, epoch: int, batch: CachedBatch) -> ProducerEntry:
    """The producer's state after accepting `batch` (a new object when entry is None)."""
    if entry is None:
        entry = ProducerEntry(epoch=epoch)
    if entry.epoch != epoch:
        entry.epoch = epoch
        entry.batches = []
    entry.batches.append(batch)
    if len(entry.batches) > BATCHES_TO_RETAIN:
        del entry.batches[: len(entry.batches) - BATCHES_TO_RETAIN]
    return entry
