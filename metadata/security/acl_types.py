"""Kafka ACLs as values: bindings, filters, and the rules for matching and validating them.

A binding (Kafka's `AclBinding`) is a resource pattern (resource type, name, pattern type
LITERAL or PREFIXED) plus an entry (principal `Type:name`, host, operation, permission
ALLOW or DENY). The enum values are Kafka's wire codes (`org.apache.kafka.common.acl`,
`org.apache.kafka.common.resource`), so they go into and come out of the protocol as is.

A filter (Kafka's `AclBindingFilter`) selects bindings for DescribeAcls and DeleteAcls:
- resource type ANY, or equal;
- pattern type ANY (any type, name compared exactly), MATCH (the bindings that would
  apply to the named resource: a LITERAL of that name or `*`, or a PREFIXED that is a
  prefix of it), or LITERAL / PREFIXED (that type, name compared exactly);
- resource name, principal, host: None matches anything, else equal;
- operation and permission: ANY, or equal (ALL in a filter is the ALL entry, not "every").

`ResourcePatternFilter.matches` and `AccessControlEntryFilter.matches` are ported line by
line. Pure: the metadata service stores bindings, the agent's authorizer reads them, both
import this module, and it imports nothing of the project.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Annotated, TypeVar

from annotated_types import MaxLen


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
CLUSTER_NAME = "kafka-cluster"  # the one name of the CLUSTER resource

# Bounds on what is stored (the wire allows 32 KiB strings; nothing real comes close).
MAX_NAME_CHARS = 1024
Text = Annotated[str, MaxLen(MAX_NAME_CHARS)]


@dataclass(frozen=True, order=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: Text
    pattern_type: PatternType
    principal: Text
    host: Text
    operation: AclOperation
    permission: AclPermissionType


@dataclass(frozen=True)
class AclBindingFilter:
    resource_type: ResourceType = ResourceType.ANY
    resource_name: Text | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: Text | None = None
    host: Text | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def matches(self, b: AclBinding) -> bool:
        return self.matches_pattern(b) and self.matches_entry(b)

    def matches_pattern(self, b: AclBinding) -> bool:
        """Kafka's ResourcePatternFilter.matches."""
        if self.resource_type != ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        if (
            self.pattern_type not in (PatternType.ANY, PatternType.MATCH)
            and self.pattern_type != b.pattern_type
        ):
            return False
        if self.resource_name is None:
            return True
        if self.pattern_type in (PatternType.ANY, b.pattern_type):
            return self.resource_name == b.resource_name
        if b.pattern_type == PatternType.LITERAL:
            return self.resource_name == b.resource_name or b.resource_name == WILDCARD_RESOURCE
        return self.resource_name.startswith(b.resource_name)  # PREFIXED

    def matches_entry(self, b: AclBinding) -> bool:
        """Kafka's AccessControlEntryFilter.matches."""
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != b.operation:
            return False
        return self.permission == AclPermissionType.ANY or self.permission == b.permission


MATCH_ALL = AclBindingFilter()


E = TypeVar("E", bound=enum.IntEnum)


def _enum_or_unknown(cls: type[E], value: int) -> E:
    try:
        return cls(value)
    except ValueError:
        return cls(0)  # every Kafka ACL enum has UNKNOWN = 0


def binding_of(
    resource_type: int,
    resource_name: str,
    pattern_type: int,
    principal: str,
    host: str,
    operation: int,
    permission: int,
) -> AclBinding:
    """A binding from wire values; codes Kafka does not define become UNKNOWN (then refused
    by `binding_error`)."""
    return AclBinding(
        _enum_or_unknown(ResourceType, resource_type),
        resource_name,
        _enum_or_unknown(PatternType, pattern_type),
        principal,
        host,
        _enum_or_unknown(AclOperation, operation),
        _enum_or_unknown(AclPermissionType, permission),
    )


def filter_of(
    resource_type: int,
    resource_name: str | None,
    pattern_type: int,
    principal: str | None,
    host: str | None,
    operation: int,
    permission: int,
) -> AclBindingFilter:
    return AclBindingFilter(
        _enum_or_unknown(ResourceType, resource_type),
        resource_name,
        _enum_or_unknown(PatternType, pattern_type),
        principal,
        host,
        _enum_or_unknown(AclOperation, operation),
        _enum_or_unknown(AclPermissionType, permission),
    )


def binding_error(b: AclBinding) -> str | None:
    """Why Kafka refuses to create this binding (INVALID_REQUEST), or None. The checks of
    Kafka's AclControlManager.validateNewAcl and AclApis.handleCreateAcls, in their order."""
    if b.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {b.resource_type.name}"
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {b.pattern_type.name}"
    if b.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {b.operation.name}"
    if b.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"Invalid permissionType {b.permission.name}"
    if not b.resource_name:
        return "Resource name should not be empty"
    if ":" not in b.principal:
        return (
            f"Could not parse principal from `{b.principal}` (no colon is present separating the "
            "principal type from the principal name)"
        )
    if b.resource_type == ResourceType.CLUSTER and b.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not b.host:
        return "Invalid empty host"
    for what, value in (("resource name", b.resource_name), ("principal", b.principal), ("host", b.host)):
        if len(value) > MAX_NAME_CHARS:
            return f"The {what} is longer than {MAX_NAME_CHARS} characters"
        if "\x00" in value:
            return f"The {what} contains a NUL character"
    return None


def filter_error(f: AclBindingFilter) -> str | None:
    """Why Kafka refuses this filter (INVALID_REQUEST), or None: it has UNKNOWN parts."""
    if f.resource_type == ResourceType.UNKNOWN or f.pattern_type == PatternType.UNKNOWN:
        return "Unknown patternFilter."
    if f.operation == AclOperation.UNKNOWN or f.permission == AclPermissionType.UNKNOWN:
        return "Unknown entryFilter."
    return None
