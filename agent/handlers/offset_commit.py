"""OffsetCommit (api key 8), v2-v9: consumer offsets, durable in metadata.

A commit with generation -1 and no member id is a "simple" commit (a consumer with
`assign()` and no group management, or an admin tool): always allowed. Otherwise the
member and generation must be the group's current ones (ILLEGAL_GENERATION,
UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, REBALANCE_IN_PROGRESS while assignments are being
handed out), as `GroupCoordinator.validate_commit` decides. In a consumer-protocol group
(KIP-848) the generation field is the member epoch: a member the group does not know gets
UNKNOWN_MEMBER_ID, an epoch other than the member's current one STALE_MEMBER_EPOCH (a
commit from before a revocation cannot land after it; an older epoch passes for partitions
the member has held since then, KIP-1251), a member committing below v9
UNSUPPORTED_VERSION, and a simple commit (no member) is refused while the group has members.
A group this agent does not coordinate gets NOT_COORDINATOR on every partition; so does a commit whose group lease
(`agent.groups.fencing`) metadata no longer confirms in the commit's own transaction. Unknown topics or partitions get
UNKNOWN_TOPIC_OR_PARTITION, metadata strings over 4096 bytes OFFSET_METADATA_TOO_LARGE;
the rest is written in one metadata call, which answers each partition and whose failure
is reported on every partition (REQUEST_TIMED_OUT when metadata is unreachable: retriable).
Offsets are stored as given, negative ones included, as Kafka's coordinator stores them
(it checks only the metadata size): KafkaJS's `resetOffsets({earliest: true})` commits
the sentinel -2 and expects OffsetFetch to return it.

Authorization (Kafka's ACLs), checked first: without READ on the group every partition
gets GROUP_AUTHORIZATION_FAILED; the partitions of topics the principal may not READ get
TOPIC_AUTHORIZATION_FAILED whatever else happens to the rest.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.offset_commit.v9.request import OffsetCommitRequest
from kio.schema.offset_commit.v9.response import (
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from kio.static.primitive import i32
from skiff.agent.context import AgentContext
from skiff.agent.groups.ownership import coordinator, ensure_coordinator
from skiff.agent.handlers import (
    METADATA_ERRORS,
    NO_THROTTLE,
    HandlerSpec,
    Op,
    Request,
    Resource,
    authorized,
    error_of,
)
from skiff.agent.handlers._access import GROUP_DENIED, RT, TOPIC_DENIED, item, on, request, requires
from skiff.agent.protocol import convert
from skiff.metadata.errors import MetadataError
from skiff.metadata.types import GroupOffset, Topic

API_KEY = 8
MIN_VERSION = 2
MAX_VERSION = 9

MAX_METADATA_BYTES = 4096


def _all(
    body: OffsetCommitRequest, code: ErrorCode, denied: frozenset[str] = frozenset()
) -> OffsetCommitResponse:
    return OffsetCommitResponse(
        throttle_time=NO_THROTTLE,
        topics=tuple(
            OffsetCommitResponseTopic(
                name=t.name,
                partitions=tuple(
                    OffsetCommitResponsePartition(
                        partition_index=p.partition_index,
                        error_code=ErrorCode.topic_authorization_failed if t.name in denied else code,
                    )
                    for p in t.partitions
                ),
            )
            for t in body.topics
        ),
    )


def _checked_offsets(
    body: OffsetCommitRequest, topics: dict[str, Topic], denied: frozenset[str]
) -> tuple[list[list[ErrorCode]], list[GroupOffset], list[tuple[int, int]]]:
    """(a code per requested partition, the offsets to commit, the (topic index, partition
    index) of each): refused when denied, unknown or with metadata over MAX_METADATA_BYTES."""
    codes: list[list[ErrorCode]] = []
    offsets: list[GroupOffset] = []
    where: list[tuple[int, int]] = []  # (topic index, partition index) of each offset
    for ti, t in enumerate(body.topics):
        topic = topics.get(t.name)
        row: list[ErrorCode] = []
        for p in t.partitions:
            if t.name in denied:
                row.append(ErrorCode.topic_authorization_failed)
            elif topic is None or not 0 <= p.partition_index < topic.partition_count:
                row.append(ErrorCode.unknown_topic_or_partition)
            elif p.committed_metadata is not None and len(p.committed_metadata.encode()) > MAX_METADATA_BYTES:
                row.append(ErrorCode.offset_metadata_too_large)
            else:
                row.append(ErrorCode.none)
                where.append((ti, len(row) - 1))
                offsets.append(
                    GroupOffset(
                        t.name,
                        int(p.partition_index),
                        int(p.committed_offset),
                        p.committed_metadata,
                        int(p.committed_leader_epoch),
                    )
                )
        codes.append(row)
    return codes, offsets, where


async def _commit(
    ctx: AgentContext,
    group_id: str,
    offsets: list[GroupOffset],
    where: list[tuple[int, int]],
    codes: list[list[ErrorCode]],
) -> list[list[ErrorCode]]:
    """Commit the offsets under the group's lease; the codes with each offset's outcome (a
    failed commit answers every offset with its error; NOT_COORDINATOR also loses the lease)."""
    fence = coordinator(ctx).fence
    lease = fence.token(group_id) if fence is not None else None
    try:
        if fence is not None and lease is None:  # not confirmed since the check above
            raise MetadataError(ErrorCode.not_coordinator, "group lease expired")
        results = await ctx.metadata.commit_offsets(group_id, offsets, lease)
    except METADATA_ERRORS as e:
        failed = error_of(e)[0]
        if failed == ErrorCode.not_coordinator and fence is not None:
            fence.lose(group_id, release=False)
        codes = [[failed if c == ErrorCode.none else c for c in row] for row in codes]
    else:  # metadata checks each offset too (the partition still exists)
        for (ti, pi), result in zip(where, results, strict=True):
            codes[ti][pi] = ErrorCode(result.error_code)
    return codes


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = convert(request.body, OffsetCommitRequest)
    if not authorized(ctx, request, Op.READ, Resource.GROUP, body.group_id):
        return _all(body, ErrorCode.group_authorization_failed)
    denied = frozenset(
        t.name for t in body.topics if not authorized(ctx, request, Op.READ, Resource.TOPIC, t.name)
    )
    code = await ensure_coordinator(ctx, body.group_id, request.connection.zone.zone)
    if code != ErrorCode.none:
        return _all(body, code, denied)
    instance_id = body.group_instance_id if request.api_version >= 7 else None
    code = coordinator(ctx).validate_commit(
        body.group_id,
        int(body.generation_id_or_member_epoch),
        body.member_id,
        instance_id,
        api_version=request.api_version,
        partitions=[(t.name, int(p.partition_index)) for t in body.topics for p in t.partitions],
    )
    if code != ErrorCode.none:
        return _all(body, code, denied)
    try:
        topics: dict[str, Topic] = await ctx.topics.get_by_name([t.name for t in body.topics])
    except METADATA_ERRORS as e:
        return _all(body, error_of(e)[0], denied)

    codes, offsets, where = _checked_offsets(body, topics, denied)
    if offsets:
        codes = await _commit(ctx, body.group_id, offsets, where, codes)
    return OffsetCommitResponse(
        throttle_time=NO_THROTTLE,
        topics=tuple(
            OffsetCommitResponseTopic(
                name=t.name,
                partitions=tuple(
                    OffsetCommitResponsePartition(partition_index=i32(p.partition_index), error_code=c)
                    for p, c in zip(t.partitions, row, strict=True)
                ),
            )
            for t, row in zip(body.topics, codes, strict=True)
        ),
    )


ACCESS = requires(
    request(on(RT.GROUP, Op.READ), GROUP_DENIED),
    item(on(RT.TOPIC, Op.READ), TOPIC_DENIED),
)

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
