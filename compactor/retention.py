"""Retention for every topic, and committed-offset expiry: the compactor's driver of
metadata.maintenance.retention (which holds the rules; see its docstring for Kafka's semantics).

`enforce_all` asks metadata to apply `retention.ms` / `retention.bytes` (delete-policy
topics, including compact,delete) and the log-start rule (all topics) to each topic,
repeating a topic while some partition hit the per-call chunk limit. Dropped chunks'
files become `deleting`; the garbage collector (compactor.gc) removes their objects
after its grace period. `expire_offsets` runs Kafka's `offsets.retention.minutes`
expiry. Each records its success time in metadata ("retention").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from skiff.metadata.types import RetentionResult
from skiff.metadata.wire.operations import CompactorClient

log = logging.getLogger(__name__)

MAX_CHUNKS_PER_CALL = 1000
DEFAULT_OFFSETS_RETENTION_MINUTES = 7 * 24 * 60  # Kafka's offsets.retention.minutes


@dataclass
class RetentionSummary:
    partitions_changed: int = 0
    chunks_deleted: int = 0
    bytes_deleted: int = 0


async def enforce_all(metadata: CompactorClient, topics: list[str] | None = None) -> RetentionSummary:
    names = topics if topics is not None else [t.name for t in await metadata.list_topics()]
    summary = RetentionSummary()
    for name in names:
        while True:
            results: list[RetentionResult] = await metadata.enforce_retention(name, MAX_CHUNKS_PER_CALL)
            for r in results:
                summary.partitions_changed += 1
                summary.chunks_deleted += r.chunks_deleted
                summary.bytes_deleted += r.bytes_deleted
                log.info(
                    "retention: %s-%d starts at %d (%d chunk(s), %d bytes dropped)",
                    r.topic,
                    r.partition,
                    r.log_start_offset,
                    r.chunks_deleted,
                    r.bytes_deleted,
                )
            if not any(r.chunks_deleted >= MAX_CHUNKS_PER_CALL for r in results):
                break
    await metadata.record_success("retention")
    return summary


async def expire_offsets(
    metadata: CompactorClient, offsets_retention_minutes: int = DEFAULT_OFFSETS_RETENTION_MINUTES
) -> int:
    """Delete committed offsets expired by `offsets.retention.minutes`; how many."""
    return await metadata.expire_group_offsets(offsets_retention_minutes * 60_000)
