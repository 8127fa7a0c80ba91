"""OffsetFetch (api key 9), v1-v9: committed offsets of a group, from metadata.

v1-v7 ask about one group; v8+ (KIP-709) about a batch of groups, answered per group.
`topics` null (v2+) means every partition the group has committed; a requested
partition without a commit gets offset -1 and no error, as in Kafka. A group this agent
does not coordinate gets NOT_COORDINATOR (top-level in v2+, per group in v8+, per
partition in v1, which has no top-level error).

`require_stable` (v7+, KIP-447; the Java consumer and librdkafka set it with
isolation.level=read_committed): a partition for which an unfinished transaction holds
offsets staged by TxnOffsetCommit (`metadata.transactions.offsets`) gets UNSTABLE_OFFSET_COMMIT
(88) with offset -1, at partition level only, in v8+ as in v7 (Kafka's
GroupMetadataManager.getOffsets and OffsetMetadataManager.fetchOffsets; the group's error
stays NONE); clients retry until the transaction completes. With `topics` null only
partitions with a committed offset are listed, as in Kafka. Without require_stable the
staged offsets stay invisible: the committed offset is returned. With require_stable the
committed offsets and the pending partitions come from one metadata call, read in one
database transaction (`fetch_stable_offsets`): no extra round trip, and a transaction
that completes meanwhile is seen either pending or committed, never half.

Authorization (Kafka's ACLs): without READ on a group, that group gets
GROUP_AUTHORIZATION_FAILED; as in Kafka, topics are checked for DESCRIBE (not READ): a
requested partition of a topic the principal may not DESCRIBE gets
TOPIC_AUTHORIZATION_FAILED, and with `topics` null such topics are left out.

v9 (KIP-848): a member of a consumer-protocol group sends its member id and epoch; one the
group does not know gets UNKNOWN_MEMBER_ID, an epoch that is not the member's current one
STALE_MEMBER_EPOCH (`ConsumerGroups.validate_fetch`); no member id and epoch -1 (admin
clients, classic members) is not checked.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.offset_fetch.v7.response import (
    OffsetFetchResponse as OffsetFetchResponseV7,
)
from kio.schema.offset_fetch.v7.response import (
    OffsetFetchResponsePartition as PartitionV7,
)
from kio.schema.offset_fetch.v7.response import (
    OffsetFetchResponseTopic as TopicV7,
)
from kio.schema.offset_fetch.v9.response import (
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartitions,
    OffsetFetchResponseTopics,
)
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i64
from skiff.agent.context import AgentContext
from skiff.agent.groups.ownership import coordinator, owns_group
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
from skiff.agent.handlers._access import GROUP_DENIED, RT, TOPIC_DENIED, filtered, item, on, requires
from skiff.metadata.types import GroupOffset

API_KEY = 9
MIN_VERSION = 1
MAX_VERSION = 9

Requested = list[tuple[str, list[int]]] | None


def _partition(
    index: int, offset: int = -1, meta: str | None = "", epoch: int = -1, code: ErrorCode = ErrorCode.none
) -> OffsetFetchResponsePartitions:
    return OffsetFetchResponsePartitions(
        partition_index=i32(index),
        committed_offset=i64(offset),
        committed_leader_epoch=i32(epoch),
        metadata=meta,
        error_code=code,
    )


def _topic_offsets(
    name: str,
    parts: list[int],
    may_describe: bool,
    by_key: dict[tuple[str, int], GroupOffset],
    unstable: set[tuple[str, int]],
) -> OffsetFetchResponseTopics:
    """One topic's committed offsets (none: -1), UNSTABLE_OFFSET_COMMIT for partitions with
    a pending transactional commit, TOPIC_AUTHORIZATION_FAILED without DESCRIBE on it."""
    if not may_describe:
        out = [_partition(p, code=ErrorCode.topic_authorization_failed) for p in parts]
        return OffsetFetchResponseTopics(name=TopicName(name), partitions=tuple(out))
    out = []
    for p in parts:
        c = by_key.get((name, p))
        if (name, p) in unstable:
            out.append(_partition(p, code=ErrorCode.unstable_offset_commit))
        elif c is None:
            out.append(_partition(p))
        else:
            out.append(_partition(p, c.offset, c.metadata, c.leader_epoch))
    return OffsetFetchResponseTopics(name=TopicName(name), partitions=tuple(out))


async def _refusal(
    ctx: AgentContext, request: Request, group_id: str, member: tuple[str | None, int]
) -> ErrorCode:
    """Why the group's offsets are not served here (NONE: they are)."""
    if not authorized(ctx, request, Op.READ, Resource.GROUP, group_id):
        return ErrorCode.group_authorization_failed
    if not await owns_group(ctx, group_id, request.connection.zone.zone):
        return ErrorCode.not_coordinator
    # v9+: a consumer-protocol member's fetch carries its member epoch
    return coordinator(ctx).consumer.validate_fetch(group_id, *member)


async def _fetch_group(
    ctx: AgentContext,
    request: Request,
    group_id: str,
    requested: Requested,
    require_stable: bool,
    member: tuple[str | None, int] = (None, -1),
) -> OffsetFetchResponseGroup:
    def fail(code: ErrorCode) -> OffsetFetchResponseGroup:
        topics = tuple(
            OffsetFetchResponseTopics(
                name=TopicName(name), partitions=tuple(_partition(p, code=code) for p in parts)
            )
            for name, parts in requested or []
        )
        return OffsetFetchResponseGroup(group_id=GroupId(group_id), topics=topics, error_code=code)

    refused = await _refusal(ctx, request, group_id, member)
    if refused != ErrorCode.none:
        return fail(refused)

    def may_describe(topic: str) -> bool:
        return authorized(ctx, request, Op.DESCRIBE, Resource.TOPIC, topic)

    names_asked = None if requested is None else [name for name, _ in requested]
    try:
        if require_stable:
            found, unstable = await ctx.metadata.fetch_stable_offsets(group_id, names_asked)
        else:
            found, unstable = await ctx.metadata.fetch_offsets(group_id, names_asked), set()
    except METADATA_ERRORS as e:
        return fail(error_of(e)[0])
    if requested is None:  # every topic with offsets that the principal may describe
        names: dict[str, list[int]] = {}
        for o in found:
            if may_describe(o.topic):
                names.setdefault(o.topic, []).append(o.partition)
        requested = list(names.items())
    by_key: dict[tuple[str, int], GroupOffset] = {(o.topic, o.partition): o for o in found}
    topics = [_topic_offsets(name, parts, may_describe(name), by_key, unstable) for name, parts in requested]
    return OffsetFetchResponseGroup(
        group_id=GroupId(group_id), topics=tuple(topics), error_code=ErrorCode.none
    )


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = request.body
    if request.api_version >= 8:
        groups = []
        for g in body.groups:
            req: Requested = (
                None
                if g.topics is None
                else [(t.name, [int(p) for p in t.partition_indexes]) for t in g.topics]
            )
            member = (g.member_id, int(g.member_epoch)) if request.api_version >= 9 else (None, -1)
            groups.append(
                await _fetch_group(ctx, request, g.group_id, req, bool(body.require_stable), member)
            )
        return OffsetFetchResponse(throttle_time=NO_THROTTLE, groups=tuple(groups))
    req1: Requested = (
        None
        if body.topics is None
        else [(t.name, [int(p) for p in t.partition_indexes]) for t in body.topics]
    )
    stable = request.api_version >= 7 and bool(body.require_stable)
    g = await _fetch_group(ctx, request, body.group_id, req1, stable)
    return OffsetFetchResponseV7(
        throttle_time=NO_THROTTLE,
        error_code=g.error_code,
        topics=tuple(
            TopicV7(
                name=t.name,
                partitions=tuple(
                    PartitionV7(
                        partition_index=p.partition_index,
                        committed_offset=p.committed_offset,
                        committed_leader_epoch=p.committed_leader_epoch,
                        metadata=p.metadata,
                        # v2+: a group's error is top-level only; partition errors stay
                        error_code=p.error_code
                        if request.api_version < 2 or g.error_code == ErrorCode.none
                        else ErrorCode.none,
                    )
                    for p in t.partitions
                ),
            )
            for t in g.topics
        ),
    )


ACCESS = requires(
    item(on(RT.GROUP, Op.READ), GROUP_DENIED, when="per group (the request's one group before v8)"),
    item(on(RT.TOPIC, Op.DESCRIBE), TOPIC_DENIED, when="named partitions"),
    filtered(on(RT.TOPIC, Op.DESCRIBE), when="all partitions"),
)

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
