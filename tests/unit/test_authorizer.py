"""agent.authorizer against Kafka's documented rules (AclAuthorizerTest, StandardAuthorizerTest,
AuthorizerInterfaceDefaultTest cases) and Hypothesis properties, including a brute-force
reference built on the filter's MATCH semantics (metadata.security.acl_types)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from skiff.agent.authorizer import Authorizer, parse_super_users
from skiff.metadata.security.acl_types import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

Op = AclOperation
RT = ResourceType
ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY
LIT = PatternType.LITERAL
PRE = PatternType.PREFIXED

ALICE, BOB, CAROL = "User:alice", "User:bob", "User:carol"
H1, H2, H3 = "10.0.0.1", "10.0.0.2", "10.0.0.3"


def acl(
    principal: str,
    op: AclOperation,
    perm: AclPermissionType = ALLOW,
    *,
    name: str = "orders",
    rtype: ResourceType = RT.TOPIC,
    pattern: PatternType = LIT,
    host: str = "*",
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def auth(*bindings: AclBinding, **kw: object) -> Authorizer:
    return Authorizer(bindings, **kw)  # type: ignore[arg-type]


# --- the documented cases, as a table ---------------------------------------------------------

TOPIC_ACLS = (
    acl(ALICE, Op.READ, host=H1),
    acl(ALICE, Op.READ, host=H2),
    acl(ALICE, Op.READ, DENY, host=H3),
    acl(BOB, Op.READ, host=H1),
    acl(CAROL, Op.WRITE),
)

CASES = [
    # (bindings, principal, host, op, resource name, expected, why)
    (TOPIC_ACLS, ALICE, H1, Op.READ, "orders", True, "allowed from host1"),
    (TOPIC_ACLS, ALICE, H2, Op.READ, "orders", True, "allowed from host2"),
    (TOPIC_ACLS, ALICE, H3, Op.READ, "orders", False, "denied from host3"),
    (TOPIC_ACLS, ALICE, H1, Op.DESCRIBE, "orders", True, "READ implies DESCRIBE"),
    (TOPIC_ACLS, ALICE, H1, Op.WRITE, "orders", False, "READ does not imply WRITE"),
    (TOPIC_ACLS, BOB, H2, Op.READ, "orders", False, "no binding for bob from host2"),
    (TOPIC_ACLS, CAROL, H3, Op.WRITE, "orders", True, "host * matches every host"),
    (TOPIC_ACLS, CAROL, H3, Op.DESCRIBE, "orders", True, "WRITE implies DESCRIBE"),
    (TOPIC_ACLS, CAROL, H3, Op.READ, "orders", False, "WRITE does not imply READ"),
    (TOPIC_ACLS, ALICE, H1, Op.READ, "payments", False, "another topic: no ACL, not allowed"),
    # deny beats allow
    ((acl("User:*", Op.ALL), acl(ALICE, Op.READ, DENY)), ALICE, H1, Op.READ, "orders", False, "deny wins"),
    ((acl("User:*", Op.ALL), acl(ALICE, Op.READ, DENY)), ALICE, H1, Op.WRITE, "orders", True, "other op"),
    (
        (acl("User:*", Op.ALL), acl(ALICE, Op.READ, DENY)),
        BOB,
        H1,
        Op.READ,
        "orders",
        True,
        "wildcard principal",
    ),
    ((acl(ALICE, Op.ALL), acl(ALICE, Op.ALL, DENY)), ALICE, H1, Op.DESCRIBE, "orders", False, "deny ALL"),
    # a DENY DESCRIBE does not deny READ (deny matches the operation itself or ALL only)
    (
        (acl(ALICE, Op.READ), acl(ALICE, Op.DESCRIBE, DENY)),
        ALICE,
        H1,
        Op.READ,
        "orders",
        True,
        "deny describe",
    ),
    ((acl(ALICE, Op.READ), acl(ALICE, Op.DESCRIBE, DENY)), ALICE, H1, Op.DESCRIBE, "orders", False, "denied"),
    # implied operations
    ((acl(ALICE, Op.DELETE),), ALICE, H1, Op.DESCRIBE, "orders", True, "DELETE implies DESCRIBE"),
    ((acl(ALICE, Op.ALTER),), ALICE, H1, Op.DESCRIBE, "orders", True, "ALTER implies DESCRIBE"),
    (
        (acl(ALICE, Op.ALTER_CONFIGS),),
        ALICE,
        H1,
        Op.DESCRIBE_CONFIGS,
        "orders",
        True,
        "ALTER_CONFIGS implies",
    ),
    ((acl(ALICE, Op.ALTER_CONFIGS),), ALICE, H1, Op.DESCRIBE, "orders", False, "but not DESCRIBE"),
    ((acl(ALICE, Op.DESCRIBE),), ALICE, H1, Op.READ, "orders", False, "DESCRIBE implies nothing"),
    ((acl(ALICE, Op.ALL),), ALICE, H1, Op.ALTER_CONFIGS, "orders", True, "ALL implies everything"),
    # wildcard resource and prefixes
    ((acl(ALICE, Op.READ, name="*"),), ALICE, H1, Op.READ, "anything", True, "literal * matches all names"),
    (
        (acl(ALICE, Op.READ, name="*"), acl(ALICE, Op.READ, DENY, name="secret")),
        ALICE,
        H1,
        Op.READ,
        "secret",
        False,
        "deny on the name beats allow on *",
    ),
    ((acl(ALICE, Op.READ, name="ord", pattern=PRE),), ALICE, H1, Op.READ, "orders", True, "prefix matches"),
    (
        (acl(ALICE, Op.READ, name="ord", pattern=PRE),),
        ALICE,
        H1,
        Op.READ,
        "ord",
        True,
        "prefix = name matches",
    ),
    (
        (acl(ALICE, Op.READ, name="orders-eu", pattern=PRE),),
        ALICE,
        H1,
        Op.READ,
        "orders",
        False,
        "longer prefix",
    ),
    ((acl(ALICE, Op.READ, name="ord"),), ALICE, H1, Op.READ, "orders", False, "a literal is not a prefix"),
    (
        (acl(ALICE, Op.READ), acl(ALICE, Op.READ, DENY, name="or", pattern=PRE)),
        ALICE,
        H1,
        Op.READ,
        "orders",
        False,
        "deny on a prefix beats allow on the literal",
    ),
    (
        (acl(ALICE, Op.READ, name="*", pattern=PRE),),
        ALICE,
        H1,
        Op.READ,
        "orders",
        False,
        "prefixed * is literal text",
    ),
    # resource types are separate
    ((acl(ALICE, Op.READ, rtype=RT.GROUP),), ALICE, H1, Op.READ, "orders", True, "group orders"),
    ((acl(ALICE, Op.READ, rtype=RT.GROUP),), ALICE, H1, Op.READ, "orders", True, "same name, group"),
    # a principal is Type:name; only User:* is the wildcard
    ((acl("Group:*", Op.READ),), ALICE, H1, Op.READ, "orders", False, "Group:* is not a wildcard"),
    ((acl("User:*", Op.READ),), "User:ANONYMOUS", H1, Op.READ, "orders", True, "User:* matches ANONYMOUS"),
]


@pytest.mark.parametrize(("bindings", "principal", "host", "op", "name", "expected", "why"), CASES)
def test_kafka_documented_cases(bindings, principal, host, op, name, expected, why):
    rtype = bindings[0].resource_type if bindings else RT.TOPIC
    assert auth(*bindings).authorize(principal, host, op, rtype, name) is expected, why


def test_no_acl_found():
    assert not auth().authorize(ALICE, H1, Op.READ, RT.TOPIC, "t")
    everyone = auth(allow_everyone_if_no_acl_found=True)
    assert everyone.authorize(ALICE, H1, Op.READ, RT.TOPIC, "t")
    # with any binding on the resource (even another principal's), the ACLs decide
    other = auth(acl(BOB, Op.READ, name="t"), allow_everyone_if_no_acl_found=True)
    assert not other.authorize(ALICE, H1, Op.READ, RT.TOPIC, "t")
    assert other.authorize(ALICE, H1, Op.READ, RT.TOPIC, "u")  # no binding applies to u


def test_super_users_may_do_everything():
    supers = parse_super_users("User:admin; User:ops;")
    assert supers == {"User:admin", "User:ops"}
    a = auth(acl("User:*", Op.ALL, DENY), super_users=supers)
    assert a.authorize("User:admin", H1, Op.ALTER, RT.TOPIC, "orders")
    assert a.authorize("User:ops", H1, Op.DELETE, RT.CLUSTER, "kafka-cluster")
    assert not a.authorize("User:admin2", H1, Op.READ, RT.TOPIC, "orders")
    assert not a.authorize(ALICE, H1, Op.READ, RT.TOPIC, "orders")


def test_authorized_operations_bit_field():
    a = auth(acl(ALICE, Op.READ), acl(ALICE, Op.ALTER_CONFIGS))
    bits = a.authorized_operations(ALICE, H1, RT.TOPIC, "orders")
    expected = {Op.READ, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS}
    assert bits == sum(1 << int(o) for o in expected)
    assert a.authorized_operations(BOB, H1, RT.TOPIC, "orders") == 0


# --- authorizeByResourceType (KIP-679), AuthorizerInterfaceDefaultTest ---------------------


def by_type(*bindings: AclBinding, principal: str = ALICE, **kw: object) -> bool:
    return auth(*bindings, **kw).authorize_by_resource_type(principal, H1, Op.WRITE, RT.TOPIC)


def test_by_resource_type():
    assert not by_type()
    assert by_type(allow_everyone_if_no_acl_found=True)
    assert by_type(acl(ALICE, Op.WRITE, name="t1"))
    assert by_type(acl(ALICE, Op.ALL, name="t1"))
    assert not by_type(acl(ALICE, Op.READ, name="t1"))
    assert not by_type(acl(ALICE, Op.WRITE, name="t1"), acl(ALICE, Op.WRITE, DENY, name="t1"))
    assert by_type(acl(ALICE, Op.WRITE, name="t1"), acl(ALICE, Op.WRITE, DENY, name="t2"))
    # a deny prefix dominates allowed names and longer allowed prefixes
    assert not by_type(acl(ALICE, Op.WRITE, name="ta"), acl(ALICE, Op.WRITE, DENY, name="t", pattern=PRE))
    assert not by_type(
        acl(ALICE, Op.WRITE, name="ta", pattern=PRE), acl(ALICE, Op.WRITE, DENY, name="t", pattern=PRE)
    )
    assert by_type(
        acl(ALICE, Op.WRITE, name="t", pattern=PRE), acl(ALICE, Op.WRITE, DENY, name="ta", pattern=PRE)
    )
    # a deny on the literal * refuses everything, an allow on it allows
    assert not by_type(acl(ALICE, Op.WRITE, name="t1"), acl("User:*", Op.WRITE, DENY, name="*"))
    assert by_type(acl("User:*", Op.WRITE, name="*"))
    # super users pass whatever the deny bindings say
    assert by_type(acl("User:*", Op.ALL, DENY, name="*"), principal="User:admin", super_users={"User:admin"})
    # other principals' and other hosts' bindings do not count
    assert not by_type(acl(BOB, Op.WRITE, name="t1"))
    assert not by_type(acl(ALICE, Op.WRITE, name="t1", host=H2))


# --- properties ----------------------------------------------------------------------------

NAMES = st.sampled_from(["a", "ab", "abc", "b", "*", "ba"])
PRINCIPALS = st.sampled_from([ALICE, BOB, "User:*"])
HOSTS = st.sampled_from([H1, H2, "*"])
OPS = st.sampled_from([o for o in AclOperation if o not in (Op.UNKNOWN, Op.ANY)])
REQ_OPS = st.sampled_from([o for o in AclOperation if o not in (Op.UNKNOWN, Op.ANY, Op.ALL)])
BINDINGS = st.builds(
    AclBinding,
    st.sampled_from([RT.TOPIC, RT.GROUP]),
    NAMES,
    st.sampled_from([LIT, PRE]),
    PRINCIPALS,
    HOSTS,
    OPS,
    st.sampled_from([ALLOW, DENY]),
)
IMPLIES = {
    Op.DESCRIBE: {Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER},
    Op.DESCRIBE_CONFIGS: {Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS},
}


def reference(bindings, principal, host, op, rtype, name, allow_everyone):
    """Kafka's rules written plainly, with "applies to the resource" = the MATCH filter."""
    applying = [b for b in bindings if AclBindingFilter(rtype, name, PatternType.MATCH).matches_pattern(b)]
    if not applying:
        return allow_everyone
    concerned = [b for b in applying if b.principal in (principal, "User:*") and b.host in (host, "*")]
    if any(b.permission == DENY and b.operation in (op, Op.ALL) for b in concerned):
        return False
    allowing = IMPLIES.get(op, {op}) | {Op.ALL}
    return any(b.permission == ALLOW and b.operation in allowing for b in concerned)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(BINDINGS, max_size=8),
    st.sampled_from([ALICE, BOB]),
    st.sampled_from([H1, H2]),
    REQ_OPS,
    st.sampled_from([RT.TOPIC, RT.GROUP]),
    NAMES,
    st.booleans(),
)
def test_matches_the_reference(bindings, principal, host, op, rtype, name, everyone):
    a = Authorizer(bindings, allow_everyone_if_no_acl_found=everyone)
    expected = reference(bindings, principal, host, op, rtype, name, everyone)
    assert a.authorize(principal, host, op, rtype, name) is expected
    assert a.authorize(principal, host, op, rtype, name) is expected  # memoised: same answer


@settings(max_examples=200, deadline=None)
@given(st.lists(BINDINGS, max_size=8), REQ_OPS, NAMES)
def test_a_matching_deny_always_wins_and_super_users_always_pass(bindings, op, name):
    deny = AclBinding(RT.TOPIC, name, LIT, ALICE, "*", op, DENY)
    a = Authorizer([*bindings, deny], super_users={"User:root"}, allow_everyone_if_no_acl_found=True)
    assert not a.authorize(ALICE, H1, op, RT.TOPIC, name)
    assert a.authorize("User:root", H1, op, RT.TOPIC, name)


@settings(max_examples=200, deadline=None)
@given(st.lists(BINDINGS, max_size=8), BINDINGS, REQ_OPS, st.sampled_from([RT.TOPIC, RT.GROUP]), NAMES)
def test_adding_an_allow_never_refuses_and_a_deny_never_allows(bindings, extra, op, rtype, name):
    before = Authorizer(bindings).authorize(ALICE, H1, op, rtype, name)
    after = Authorizer([*bindings, extra]).authorize(ALICE, H1, op, rtype, name)
    if extra.permission == ALLOW:
        assert after or not before
    else:
        assert before or not after
