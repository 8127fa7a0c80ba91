"""metadata.security.acls through both clients (in-process and HTTP over the real app) on SQLite and
PostgreSQL: bindings are a set, every change moves the version, filters follow Kafka's
AclBindingFilter, deletes report per filter, invalid input changes nothing."""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from skiff.metadata.errors import MetadataError
from skiff.metadata.security.acl_types import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from skiff.metadata.server.app import create_app
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService

with warnings.catch_warnings():  # starlette deprecates httpx-based TestClient; harmless here
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.anyio

Op = AclOperation
RT = ResourceType
LIT, PRE, MATCH, ANY = PatternType.LITERAL, PatternType.PREFIXED, PatternType.MATCH, PatternType.ANY
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def b(
    name: str = "orders",
    pattern: PatternType = LIT,
    principal: str = "User:alice",
    op: AclOperation = Op.READ,
    perm: AclPermissionType = ALLOW,
    rtype: ResourceType = RT.TOPIC,
    host: str = "*",
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


async def test_create_is_a_set_and_moves_the_version(md: LocalMetadataClient) -> None:
    v0 = await md.acl_version()
    assert await md.list_acls() == (v0, [])
    v1 = await md.create_acls([b(), b(op=Op.WRITE), b()])  # a duplicate within the request too
    assert v1 > v0
    version, bindings = await md.list_acls()
    assert version == v1 == await md.acl_version()
    assert sorted(bindings) == sorted([b(), b(op=Op.WRITE)])
    assert await md.create_acls([b()]) == v1  # already there: nothing changes, version stays
    assert len((await md.list_acls())[1]) == 2


async def test_describe_filters_as_kafka(md: LocalMetadataClient) -> None:
    stored = [
        b("orders"),
        b("*"),
        b("ord", PRE),
        b("orders-eu", PRE),
        b("orders", principal="User:bob", perm=DENY),
        b("orders", rtype=RT.GROUP),
    ]
    await md.create_acls(stored)

    async def names(f: AclBindingFilter) -> list[tuple[str, PatternType, str]]:
        _, found = await md.describe_acls(f)
        return sorted((x.resource_name, x.pattern_type, x.principal) for x in found)

    assert len(await names(AclBindingFilter())) == 6
    assert await names(AclBindingFilter(RT.TOPIC, "orders", LIT)) == [
        ("orders", LIT, "User:alice"),
        ("orders", LIT, "User:bob"),
    ]
    # MATCH: every binding that applies to the topic "orders": its literal, *, and prefixes of it
    assert await names(AclBindingFilter(RT.TOPIC, "orders", MATCH)) == [
        ("*", LIT, "User:alice"),
        ("ord", PRE, "User:alice"),
        ("orders", LIT, "User:alice"),
        ("orders", LIT, "User:bob"),
    ]
    assert await names(AclBindingFilter(RT.TOPIC, "ord", PRE)) == [("ord", PRE, "User:alice")]
    assert await names(AclBindingFilter(RT.ANY, "orders", ANY)) == [
        ("orders", LIT, "User:alice"),
        ("orders", LIT, "User:alice"),
        ("orders", LIT, "User:bob"),
    ]
    assert await names(AclBindingFilter(permission=DENY)) == [("orders", LIT, "User:bob")]
    assert await names(AclBindingFilter(principal="User:carol")) == []
    assert len(await names(AclBindingFilter(operation=Op.READ))) == 6
    assert await names(AclBindingFilter(operation=Op.ALL)) == []  # ALL in a filter is the ALL entry


async def test_delete_reports_per_filter_and_moves_the_version(md: LocalMetadataClient) -> None:
    await md.create_acls([b("a"), b("b"), b("c", principal="User:bob")])
    before = await md.acl_version()
    version, matched = await md.delete_acls(
        [
            AclBindingFilter(RT.TOPIC, "a", LIT),
            AclBindingFilter(principal="User:alice"),  # matches a (again) and b
            AclBindingFilter(RT.GROUP),  # nothing
        ]
    )
    assert version > before
    assert matched[0] == [b("a")]
    assert sorted(matched[1]) == [b("a"), b("b")]
    assert matched[2] == []
    assert (await md.list_acls()) == (version, [b("c", principal="User:bob")])
    # deleting nothing leaves the version alone
    assert await md.delete_acls([AclBindingFilter(RT.GROUP)]) == (version, [[]])


@pytest.mark.parametrize(
    ("binding", "message"),
    [
        (b(rtype=RT.ANY), "Invalid resourceType ANY"),
        (b(pattern=MATCH), "Invalid patternType MATCH"),
        (b(op=Op.ANY), "Invalid operation ANY"),
        (b(name=""), "Resource name should not be empty"),
        (b(principal="alice"), "Could not parse principal"),
        (b(rtype=RT.CLUSTER, name="other"), "kafka-cluster"),
        (b(name="x" * 1025), "1024 characters"),
    ],
)
async def test_invalid_bindings_change_nothing(
    md: LocalMetadataClient, binding: AclBinding, message: str
) -> None:
    before = await md.list_acls()
    with pytest.raises(MetadataError) as e:
        await md.create_acls([b("fine"), binding])
    assert e.value.error_code == 42 and message in e.value.message
    assert await md.list_acls() == before


async def test_filters_with_unknown_parts_are_refused(md: LocalMetadataClient) -> None:
    await md.create_acls([b()])
    with pytest.raises(MetadataError) as e:
        await md.delete_acls([AclBindingFilter(), AclBindingFilter(pattern_type=PatternType.UNKNOWN)])
    assert e.value.error_code == 42
    assert len((await md.list_acls())[1]) == 1  # the valid filter deleted nothing either
    with pytest.raises(MetadataError):
        await md.describe_acls(AclBindingFilter(operation=Op.UNKNOWN))


def test_http_refuses_codes_kafka_does_not_define(metadata_service: MetadataService) -> None:
    app = create_app(metadata_service)

    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://m") as c:
            body = {
                "bindings": [
                    {
                        "resource_type": 99,
                        "resource_name": "t",
                        "pattern_type": 3,
                        "principal": "User:a",
                        "host": "*",
                        "operation": 3,
                        "permission": 3,
                    }
                ]
            }
            return await c.post("/v1/acls/create", json=body)

    resp = asyncio.run(go())
    assert resp.status_code == 422 and resp.json()["error_code"] == 42
    assert metadata_service.list_acls()[1] == []


async def test_concurrent_creates_of_one_binding_store_it_once(md: LocalMetadataClient) -> None:
    """The version row serialises ACL changes, so racing creators never duplicate a binding."""
    results = await asyncio.gather(*(md.create_acls([b("race"), b(f"own-{i}")]) for i in range(8)))
    assert len(set(results)) == 8  # each change got its own version
    _, bindings = await md.list_acls()
    assert sum(1 for x in bindings if x.resource_name == "race") == 1
    assert len(bindings) == 9


ACL_POSTS = ["/v1/acls/create", "/v1/acls/delete", "/v1/acls/describe"]
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "resource_type": st.integers(-2, 9),
        "resource_name": st.text(max_size=5) | st.none(),
        "pattern_type": st.integers(-2, 6),
        "principal": st.sampled_from(["User:a", "a", "", "User:\x00"]) | st.none(),
        "host": st.sampled_from(["*", "", "h\x00"]) | st.none(),
        "operation": st.integers(-2, 16),
        "permission": st.integers(-2, 5),
    },
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    path=st.sampled_from(ACL_POSTS),
    body=JSON_VALUES
    | st.builds(lambda b: {"bindings": b}, st.lists(FIELDS, max_size=3))
    | st.builds(lambda f: {"filters": f}, st.lists(FIELDS, max_size=3))
    | st.builds(lambda f: {"filter": f}, FIELDS),
)
def test_fuzzed_acl_requests_are_answered_never_500(sqlite_api: TestClient, path: str, body: object) -> None:
    resp = sqlite_api.post(path, content=json.dumps(body), headers={"content-type": "application/json"})
    assert resp.status_code < 500, (path, body, resp.text)
    if resp.status_code >= 400:
        assert isinstance(resp.json().get("error_code"), int), resp.text


@pytest.fixture
def sqlite_api(tmp_path: Path) -> Iterator[TestClient]:
    svc = MetadataService.from_url(f"sqlite:///{tmp_path}/m.db")
    with TestClient(create_app(svc), raise_server_exceptions=False) as client:
        yield client
    svc.close()
