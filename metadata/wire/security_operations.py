"""Security's operations: SCRAM users, Kafka ACL bindings and client quotas, stored in metadata
and cached by every agent; declared as every metadata operation is
(`metadata.wire.codec.operation`; `metadata.wire.operations` joins them into the callers' roles)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Protocol

from annotated_types import MaxLen
from skiff.metadata.security.acl_types import AclBinding, AclBindingFilter
from skiff.metadata.security.quota_types import ClientQuotaEntry, QuotaAlteration, QuotaFilterComponent
from skiff.metadata.security.scram_types import ScramCredential, ScramCredentialInfo
from skiff.metadata.wire.bounds import (
    Items,
    ShortName,
)
from skiff.metadata.wire.codec import operation
from skiff.metadata.wire.roles import AGENT


class ScramUsers(Protocol):
    """Credentials are salted, never passwords (metadata.security.scram_users). Agents read them to
    authenticate Kafka clients and change them for AlterUserScramCredentials (which the
    agent's ACLs guard: ALTER on CLUSTER)."""

    @operation("/v1/scram-users/upsert", AGENT)
    async def upsert_scram_credential(self, cred: ScramCredential) -> None: ...

    @operation("/v1/scram-users/delete", AGENT)
    async def delete_scram_credential(self, user: ShortName, mechanism: ShortName) -> None:
        """RESOURCE_NOT_FOUND if there is no such credential."""
        ...

    @operation("/v1/scram-users/describe", AGENT)
    async def describe_scram_users(self, users: Items[ShortName] | None) -> list[ScramCredentialInfo]:
        """Users' mechanisms and iteration counts (never salts or keys); None: all."""
        ...

    @operation("/v1/scram-users/credentials", AGENT)
    async def scram_credentials(self, user: ShortName) -> list[ScramCredential]:
        """One user's stored credentials, [] for an unknown user."""
        ...


class Acls(Protocol):
    """Kafka ACL bindings (metadata.security.acls); every change increments the version."""

    @operation("/v1/acls/version", AGENT, http_method="GET")
    async def acl_version(self) -> int:
        """Cheap: what agents poll."""
        ...

    @operation("/v1/acls", AGENT, http_method="GET")
    async def list_acls(self) -> tuple[int, list[AclBinding]]:
        """(version, every binding)."""
        ...

    @operation("/v1/acls/describe", AGENT)
    async def describe_acls(self, acl_filter: AclBindingFilter) -> tuple[int, list[AclBinding]]: ...

    @operation("/v1/acls/create", AGENT)
    async def create_acls(self, bindings: Items[AclBinding]) -> int:
        """The version after (bindings already present are kept)."""
        ...

    @operation("/v1/acls/delete", AGENT)
    async def delete_acls(self, filters: Items[AclBindingFilter]) -> tuple[int, list[list[AclBinding]]]:
        """(version after, per filter the bindings it matched and deleted)."""
        ...


class ClientQuotas(Protocol):
    """Kafka client quotas (metadata.security.quotas); every change increments the version."""

    @operation("/v1/client-quotas/version", AGENT, http_method="GET")
    async def client_quota_version(self) -> int:
        """Cheap: what agents poll."""
        ...

    @operation("/v1/client-quotas", AGENT, http_method="GET")
    async def list_client_quotas(self) -> tuple[int, list[ClientQuotaEntry]]:
        """(version, every entity with its quotas)."""
        ...

    @operation("/v1/client-quotas/describe", AGENT)
    async def describe_client_quotas(
        self, components: Annotated[Sequence[QuotaFilterComponent], MaxLen(8)], strict: bool
    ) -> list[ClientQuotaEntry]:
        """Kafka's DescribeClientQuotas filter; INVALID_REQUEST / UNSUPPORTED_VERSION as Kafka's."""
        ...

    @operation("/v1/client-quotas/alter", AGENT)
    async def alter_client_quotas(
        self, alterations: Items[QuotaAlteration], validate_only: bool
    ) -> tuple[int, list[str | None]]:
        """(version after, per alteration Kafka's INVALID_REQUEST message or None)."""
        ...
