"""Kafka's ACL authorizer, pure: given the bindings and the settings, may this principal
from this host do this operation on this resource?

The rules are those of Kafka's `AclAuthorizer` / `StandardAuthorizer`:

1. a super user (`super_users`, e.g. `User:admin;User:ops`, compared exactly) may do
   everything;
2. the bindings that apply to a resource are the LITERAL ones with its name, the
   LITERAL ones named `*`, and the PREFIXED ones whose name is a prefix of its name;
   if there are none (for any principal), the answer is `allow_everyone_if_no_acl_found`
   (Kafka's `allow.everyone.if.no.acl.found`, default false);
3. a binding concerns the request when its principal is the request's or `User:*`, and
   its host is the client's address or `*`;
4. DENY beats ALLOW: a concerned DENY binding whose operation is the requested one or
   ALL refuses;
5. else a concerned ALLOW binding whose operation is the requested one, ALL, or one that
   implies it allows: DESCRIBE is implied by READ, WRITE, DELETE and ALTER;
   DESCRIBE_CONFIGS by ALTER_CONFIGS;
6. else refused.

`authorize_by_resource_type` is Kafka's `Authorizer.authorizeByResourceType` (KIP-679:
"may this principal WRITE some topic?"), ported from its default implementation.
`authorized_operations` is the bit field Metadata and DescribeGroups report.

Cost: the bindings are indexed once per ACL version by (resource type, literal name) and
(resource type, prefix length, prefix), so a decision is a few dict lookups plus one per
distinct prefix length; decisions are memoised per authorizer (it is rebuilt, with an
empty memo, whenever the ACLs change), in a dict bounded to `MEMO_MAX_ENTRIES`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from skiff.metadata.security.acl_types import (
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

Op = AclOperation
RT = ResourceType

# Which allowed operations grant the requested one (besides itself and ALL).
IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    Op.DESCRIBE: frozenset({Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}),
    Op.DESCRIBE_CONFIGS: frozenset({Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}),
}

# The operations each resource type supports (Kafka's AclEntry.supportedOperations): what
# the "authorized operations" bit fields are computed over.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    RT.TOPIC: (
        Op.READ,
        Op.WRITE,
        Op.CREATE,
        Op.DESCRIBE,
        Op.DELETE,
        Op.ALTER,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
    ),
    RT.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE),
    RT.CLUSTER: (
        Op.CREATE,
        Op.CLUSTER_ACTION,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
        Op.IDEMPOTENT_WRITE,
        Op.ALTER,
        Op.DESCRIBE,
    ),
    RT.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE),
    RT.DELEGATION_TOKEN: (Op.DESCRIBE,),
    RT.USER: (Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS),
}

MEMO_MAX_ENTRIES = 65_536


def parse_super_users(text: str) -> frozenset[str]:
    """`User:admin;User:ops` -> {"User:admin", "User:ops"} (Kafka's `super.users` format)."""
    return frozenset(p.strip() for p in text.split(";") if p.strip())


@dataclass(frozen=True)
class _Entry:
    principal: str
    host: str
    operation: AclOperation
    allow: bool


class Authorizer:
    """Decisions over one set of bindings (immutable: build a new one when ACLs change)."""

    def __init__(
        self,
        bindings: Iterable[AclBinding],
        *,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
    ) -> None:
        self.bindings: tuple[AclBinding, ...] = tuple(sorted(set(bindings)))
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._literal: dict[tuple[ResourceType, str], list[_Entry]] = {}
        self._prefixed: dict[tuple[ResourceType, int, str], list[_Entry]] = {}
        self._prefix_lengths: dict[ResourceType, list[int]] = {}
        for b in self.bindings:
            entry = _Entry(b.principal, b.host, b.operation, b.permission == AclPermissionType.ALLOW)
            if b.pattern_type == PatternType.LITERAL:
                self._literal.setdefault((b.resource_type, b.resource_name), []).append(entry)
            elif b.pattern_type == PatternType.PREFIXED:
                n = len(b.resource_name)
                self._prefixed.setdefault((b.resource_type, n, b.resource_name), []).append(entry)
                lengths = self._prefix_lengths.setdefault(b.resource_type, [])
                if n not in lengths:
                    lengths.append(n)
        self._memo: dict[tuple[str, str, AclOperation, ResourceType, str], bool] = {}

    # ------------------------------------------------------------------ decisions

    def _applicable(self, rtype: ResourceType, name: str) -> list[list[_Entry]]:
        found = []
        exact = self._literal.get((rtype, name))
        if exact:
            found.append(exact)
        if name != WILDCARD_RESOURCE:
            wildcard = self._literal.get((rtype, WILDCARD_RESOURCE))
            if wildcard:
                found.append(wildcard)
        for n in self._prefix_lengths.get(rtype, ()):
            if n <= len(name):
                prefixed = self._prefixed.get((rtype, n, name[:n]))
                if prefixed:
                    found.append(prefixed)
        return found

    def authorize(
        self, principal: str, host: str, operation: AclOperation, rtype: ResourceType, name: str
    ) -> bool:
        key = (principal, host, operation, rtype, name)
        memo = self._memo.get(key)
        if memo is not None:
            return memo
        result = self._decide(principal, host, operation, rtype, name)
        if len(self._memo) >= MEMO_MAX_ENTRIES:
            self._memo.clear()
        self._memo[key] = result
        return result

    def _decide(
        self, principal: str, host: str, operation: AclOperation, rtype: ResourceType, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        groups = self._applicable(rtype, name)
        if not groups:
            return self.allow_everyone_if_no_acl_found
        allowing = IMPLIED_BY.get(operation, frozenset({operation}))
        allowed = False
        for entries in groups:
            for e in entries:
                if e.principal != principal and e.principal != WILDCARD_PRINCIPAL:
                    continue
                if e.host != host and e.host != WILDCARD_HOST:
                    continue
                if e.allow:
                    if e.operation == Op.ALL or e.operation in allowing:
                        allowed = True
                elif e.operation == Op.ALL or e.operation == operation:
                    return False  # deny beats allow
        return allowed

    def authorized_operations(self, principal: str, host: str, rtype: ResourceType, name: str) -> int:
        """The bit field (1 << operation code) of the supported operations allowed."""
        bits = 0
        for op in SUPPORTED_OPERATIONS.get(rtype, ()):
            if self.authorize(principal, host, op, rtype, name):
                bits |= 1 << int(op)
        return bits

    def authorize_by_resource_type(
        self, principal: str, host: str, operation: AclOperation, rtype: ResourceType
    ) -> bool:
        """May the principal do `operation` on some resource of this type? (Kafka's default
        `Authorizer.authorizeByResourceType`: a hard-coded name first, so super users and
        allow-everyone pass whatever DENY bindings say, then the bindings by pattern.)"""
        if self.authorize(principal, host, operation, rtype, "hardcode"):
            return True
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow_literal: set[str] = set()
        allow_prefixed: set[str] = set()
        for b in self.bindings:
            if not _applies(b, principal, host, operation, rtype):
                continue
            if b.permission == AclPermissionType.DENY:
                if b.pattern_type == PatternType.LITERAL:
                    if b.resource_name == WILDCARD_RESOURCE:
                        return False
                    deny_literal.add(b.resource_name)
                else:
                    deny_prefixed.add(b.resource_name)
                continue
            if b.pattern_type == PatternType.LITERAL:
                if b.resource_name == WILDCARD_RESOURCE:
                    return True
                allow_literal.add(b.resource_name)
            else:
                allow_prefixed.add(b.resource_name)
        return _some_allowed_not_denied(allow_literal, allow_prefixed, deny_literal, deny_prefixed)


def _applies(b: AclBinding, principal: str, host: str, operation: AclOperation, rtype: ResourceType) -> bool:
    """Whether binding `b` speaks about this principal, host and operation on resources of
    type `rtype` (whatever their names)."""
    return (
        b.resource_type == rtype
        and b.host in (host, WILDCARD_HOST)
        and b.principal in (principal, WILDCARD_PRINCIPAL)
        and b.operation in (operation, Op.ALL)
    )


def _some_allowed_not_denied(
    allow_literal: set[str], allow_prefixed: set[str], deny_literal: set[str], deny_prefixed: set[str]
) -> bool:
    """Whether some allowed name (literal, or prefix) is neither denied literally nor under a
    denied prefix."""
    for allowed, literal in [(n, True) for n in sorted(allow_literal)] + [
        (n, False) for n in sorted(allow_prefixed)
    ]:
        if literal and allowed in deny_literal:
            continue
        if not any(allowed[:i] in deny_prefixed for i in range(1, len(allowed) + 1)):
            return True
    return False
