"""Consumer groups' operations: committed offsets (written by the agents that coordinate, read by
every role), the coordinator leases that fence group state, and the operator's `skiff groups`
commands; declared as every metadata operation is (`metadata.wire.codec.operation`;
`metadata.wire.operations` joins them into the callers' roles)."""

from __future__ import annotations

from typing import Protocol

from skiff.metadata.groups.lease_types import LeaseGrant, LeaseToken
from skiff.metadata.types import (
    GroupOffset,
    OffsetCommitResult,
    StoredGroup,
)
from skiff.metadata.wire.bounds import (
    Id,
    Int32,
    Items,
    KafkaId,
    ManyItems,
    Name,
    NonNegInt64,
)
from skiff.metadata.wire.codec import Args, operation
from skiff.metadata.wire.roles import ADMIN, AGENT, READER

GroupIds = Items[KafkaId] | None
TopicPartitions = ManyItems[tuple[Name, Int32]]
LeaseList = Items[tuple[KafkaId, Int32]]


def _agent_id(a: Args) -> list[str]:
    return [a["agent_id"]]


def _lease_holder(a: Args) -> list[str]:
    lease = a.get("lease")
    return [] if lease is None else [lease.holder]


class GroupOffsets(Protocol):
    @operation("/v1/groups/commit-offsets", AGENT, acting_as=_lease_holder)
    async def commit_offsets(
        self, group_id: KafkaId, offsets: ManyItems[GroupOffset], lease: LeaseToken | None = None
    ) -> list[OffsetCommitResult]:
        """One answer per offset, same order; the valid ones are stored. With `lease`, every
        offset is refused with NOT_COORDINATOR unless it is current."""
        ...

    @operation("/v1/groups/delete-offsets", AGENT)
    async def delete_group_offsets(self, group_id: KafkaId) -> None:
        """Forget every committed offset of a group (DeleteGroups)."""
        ...

    @operation("/v1/groups/delete-partition-offsets", AGENT)
    async def delete_partition_offsets(self, group_id: KafkaId, partitions: TopicPartitions) -> None:
        """One transaction (OffsetDelete); (topic, partition)s without a commit ignored."""
        ...

    @operation("/v1/groups/touch", AGENT)
    async def touch_groups(self, group_ids: Items[KafkaId]) -> None:
        """These groups have members now (their offsets do not expire)."""
        ...


class GroupOffsetReads(Protocol):
    @operation("/v1/groups/fetch-offsets", AGENT, READER)
    async def fetch_offsets(self, group_id: KafkaId, topics: Items[Name] | None) -> list[GroupOffset]: ...

    @operation("/v1/groups/with-offsets", AGENT, READER)
    async def groups_with_offsets(self, group_ids: GroupIds) -> list[str]:
        """The group ids (of `group_ids`, or all when None) with committed offsets."""
        ...


class GroupLeases(Protocol):
    @operation("/v1/groups/lease/acquire", AGENT, acting_as=_agent_id)
    async def acquire_group_lease(self, group_id: KafkaId, agent_id: Id, ttl_ms: NonNegInt64) -> LeaseGrant:
        """Take (or re-take, with a new epoch) the lease on coordinating a group."""
        ...

    @operation("/v1/groups/lease/renew", AGENT, acting_as=_agent_id)
    async def renew_group_leases(self, agent_id: Id, leases: LeaseList, ttl_ms: NonNegInt64) -> list[str]:
        """Renew an agent's group leases in one transaction; answers the groups renewed."""
        ...

    @operation("/v1/groups/lease/release", AGENT, acting_as=_agent_id)
    async def release_group_leases(self, agent_id: Id, leases: LeaseList) -> None: ...

    @operation("/v1/groups/lease/holders", AGENT)
    async def group_lease_holders(self, group_ids: Items[KafkaId]) -> dict[str, str]:
        """The agent holding each group's unexpired lease (groups without one are absent)."""
        ...

    @operation("/v1/groups/lease/confirm-generation", AGENT, acting_as=_lease_holder)
    async def confirm_group_generation(
        self, group_id: KafkaId, lease: LeaseToken, ttl_ms: NonNegInt64, group_state: str
    ) -> None:
        """A new generation: renew the lease and store the group's state, or NOT_COORDINATOR."""
        ...


class GroupOperators(Protocol):
    """`skiff groups` (metadata.groups.admin); changes are refused with NON_EMPTY_GROUP while
    the group has active members."""

    @operation("/v1/admin/groups/stored", ADMIN)
    async def stored_groups(self, group_ids: GroupIds) -> list[StoredGroup]:
        """Groups (of `group_ids`, or all) with offsets or a stored generation."""
        ...

    @operation("/v1/admin/groups/reset-offsets", ADMIN)
    async def reset_group_offsets(
        self, group_id: KafkaId, offsets: ManyItems[GroupOffset]
    ) -> list[OffsetCommitResult]: ...

    @operation("/v1/admin/groups/delete", ADMIN)
    async def delete_group(self, group_id: KafkaId) -> None:
        """Forget a group: offsets and stored state (GROUP_ID_NOT_FOUND if it has neither)."""
        ...
