"""The member-epoch checks of OffsetCommit / TxnOffsetCommit / OffsetFetch in a
consumer-protocol group (Kafka's ConsumerGroup.validateOffsetCommit and
validateOffsetFetch), for `agent.groups.consumer_protocol.ConsumerGroups`. Pure.

- A simple commit (no member id, epoch -1) passes only while the group has no member.
- An unknown member: UNKNOWN_MEMBER_ID.
- A classic member of a mixed group (`agent.groups.mixed`), or a transactional commit: the
  generation must be the member epoch (ILLEGAL_GENERATION), with any OffsetCommit version.
- A consumer-protocol member commits with v9+ (UNSUPPORTED_VERSION below); its current
  epoch passes; an older one passes when the member still holds every committed
  partition, each since that epoch or before (KIP-1251's assignment epochs: a commit racing
  the heartbeat that moved the member on is not refused, one for a partition given up
  since is); otherwise STALE_MEMBER_EPOCH.
- OffsetFetch v9+: a member's fetch must carry its current epoch (STALE_MEMBER_EPOCH, or
  ILLEGAL_GENERATION for a classic member); an admin's (no member id, epoch -1) passes.
"""

from __future__ import annotations

from collections.abc import Sequence

from kio.schema.errors import ErrorCode
from skiff.agent.groups.consumer_model import ConsumerGroup


def validate_commit(
    group: ConsumerGroup,
    member_id: str,
    member_epoch: int,
    api_version: int,
    transactional: bool,
    partitions: Sequence[tuple[str, int]] = (),
) -> ErrorCode:
    if member_epoch < 0 and not member_id and not group.members:
        return ErrorCode.none
    member = group.members.get(member_id)
    if member is None:
        return ErrorCode.unknown_member_id
    if member.classic is not None or transactional:
        return ErrorCode.none if member_epoch == member.member_epoch else ErrorCode.illegal_generation
    if api_version < 9:
        return ErrorCode.unsupported_version
    if member_epoch == member.member_epoch:
        return ErrorCode.none
    if member_epoch > member.member_epoch or not partitions:
        return ErrorCode.stale_member_epoch
    for name, p in partitions:
        topic = group.topics.get(name)
        since = None if topic is None else member.assigned_at.get((topic[0], p))
        if since is None or since > member_epoch:
            return ErrorCode.stale_member_epoch
    return ErrorCode.none


def validate_fetch(group: ConsumerGroup, member_id: str | None, member_epoch: int) -> ErrorCode:
    if not member_id and member_epoch < 0:
        return ErrorCode.none
    member = group.members.get(member_id or "")
    if member is None:
        return ErrorCode.unknown_member_id
    if member_epoch != member.member_epoch:
        return ErrorCode.illegal_generation if member.classic is not None else ErrorCode.stale_member_epoch
    return ErrorCode.none
