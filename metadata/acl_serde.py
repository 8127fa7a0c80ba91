"""The HTTP/JSON wire format of the ACL routes (metadata.app's `/v1/acls/*`), and conversions.

Enums travel as Kafka's integer codes (metadata.acl_types). A code Kafka does not define
is refused by the model (422), not stored; a filter's UNKNOWN parts and a binding's
invalid combinations are the service's business (INVALID_REQUEST, 400).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field
from skiff.metadata.acl_types import (
    MAX_NAME_CHARS,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

Text = Annotated[str, Field(max_length=MAX_NAME_CHARS)]
MaxItems = 10_000


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AclBindingM(_M):
    resource_type: ResourceType
    resource_name: Text
    pattern_type: PatternType
    principal: Text
    host: Text
    operation: AclOperation
    permission: AclPermissionType


class AclFilterM(_M):
    resource_type: ResourceType = ResourceType.ANY
    resource_name: Text | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: Text | None = None
    host: Text | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY


class CreateAclsRequest(_M):
    bindings: Annotated[list[AclBindingM], Field(max_length=MaxItems)]


class DeleteAclsRequest(_M):
    filters: Annotated[list[AclFilterM], Field(max_length=MaxItems)]


class DescribeAclsRequest(_M):
    filter: AclFilterM


class AclVersionM(_M):
    version: int


class AclBindingsM(_M):
    version: int
    bindings: list[AclBindingM]


class DeletedAclsM(_M):
    version: int
    matched: list[list[AclBindingM]]


def binding_to_m(b: AclBinding) -> AclBindingM:
    return AclBindingM.model_construct(**b.__dict__)


def binding_from_m(m: AclBindingM) -> AclBinding:
    return AclBinding(
        ResourceType(m.resource_type),
        m.resource_name,
        PatternType(m.pattern_type),
        m.principal,
        m.host,
        AclOperation(m.operation),
        AclPermissionType(m.permission),
    )


def filter_to_m(f: AclBindingFilter) -> AclFilterM:
    return AclFilterM.model_construct(**f.__dict__)


def filter_from_m(m: AclFilterM) -> AclBindingFilter:
    return AclBindingFilter(
        ResourceType(m.resource_type),
        m.resource_name,
        PatternType(m.pattern_type),
        m.principal,
        m.host,
        AclOperation(m.operation),
        AclPermissionType(m.permission),
    )
