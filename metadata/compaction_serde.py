"""The HTTP/JSON wire format of compaction planning (see metadata.serde for the rules):
pydantic models mirroring `metadata.compaction_types`, and conversions."""

from __future__ import annotations

import uuid
from typing import Annotated

from pydantic import Field
from skiff.metadata import compaction_types as ct
from skiff.metadata.serde import (
    _M,
    ChunkLocationM,
    Int32,
    Int64,
    Name,
    NonNegInt32,
    NonNegInt64,
    PartitionKeyM,
    location_from_m,
    location_to_m,
)

PositiveInt64 = Annotated[int, Field(ge=1, le=2**63 - 1)]


class MergeRulesM(_M):
    target_chunk_bytes: PositiveInt64 = ct.DEFAULT_TARGET_CHUNK_BYTES
    min_level0_bytes: NonNegInt64 = ct.DEFAULT_MIN_LEVEL0_BYTES
    min_level0_chunks: NonNegInt32 = ct.DEFAULT_MIN_LEVEL0_CHUNKS
    max_level0_delay_ms: NonNegInt64 = ct.DEFAULT_MAX_LEVEL0_DELAY_MS


class CandidatesRequest(_M):
    topic: Name | None = None
    rules: MergeRulesM = MergeRulesM()
    limit: Annotated[int, Field(ge=0, le=100_000)] = 1000


class CandidateChunkM(_M):
    location: ChunkLocationM
    file_size_bytes: Int64
    file_level: Int32


class CompactionCandidateM(_M):
    topic_id: uuid.UUID
    partition: Int32
    topic_name: str
    compact: bool
    delete: bool
    delete_retention_ms: Int64
    log_start_offset: Int64
    high_watermark: Int64
    first_dirty_offset: Int64
    cleanable_end_offset: Int64
    clean_bytes: Int64
    cleanable_bytes: Int64
    dirty_ratio: float
    forced: bool
    reason: str
    chunks: list[CandidateChunkM]
    aborted: list[tuple[Int64, Int64, Int64]] = []  # (producer id, first offset, marker offset)


class ClaimRequest(_M):
    partitions: list[PartitionKeyM]
    holder: Annotated[str, Field(max_length=255)]
    lease_ms: Int64
    input_chunk_ids: list[Int64] = []


class LeaseM(_M):
    token: str
    holder: str
    expires_ms: Int64


class ClaimResponse(_M):
    lease: LeaseM | None = None  # None: some partition is leased elsewhere, or an input chunk is gone


class RenewRequest(_M):
    token: Annotated[str, Field(max_length=64)]
    lease_ms: Int64


class ReleaseRequest(_M):
    token: Annotated[str, Field(max_length=64)]


def rules_to_m(x: ct.MergeRules) -> MergeRulesM:
    return MergeRulesM(**x.__dict__)


def rules_from_m(m: MergeRulesM) -> ct.MergeRules:
    return ct.MergeRules(**m.__dict__)


def candidate_to_m(x: ct.CompactionCandidate) -> CompactionCandidateM:
    d = dict(x.__dict__)
    d["chunks"] = [
        CandidateChunkM.model_construct(
            location=location_to_m(c.location), file_size_bytes=c.file_size_bytes, file_level=c.file_level
        )
        for c in x.chunks
    ]
    d["aborted"] = [tuple(a) for a in x.aborted]
    return CompactionCandidateM.model_construct(**d)


def candidate_from_m(m: CompactionCandidateM) -> ct.CompactionCandidate:
    d = dict(m.__dict__)
    d["chunks"] = tuple(
        ct.CandidateChunk(location_from_m(c.location), c.file_size_bytes, c.file_level) for c in m.chunks
    )
    d["aborted"] = tuple((int(a), int(b), int(c)) for a, b, c in m.aborted)
    return ct.CompactionCandidate(**d)


def lease_to_m(x: ct.CompactionLease) -> LeaseM:
    return LeaseM.model_construct(**x.__dict__)


def lease_from_m(m: LeaseM) -> ct.CompactionLease:
    return ct.CompactionLease(**m.__dict__)
