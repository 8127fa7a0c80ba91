"""metadata.groups.admin through both clients (in-process and HTTP) on SQLite and
PostgreSQL: which groups are listed with what state, and `reset_group_offsets` /
`delete_group` refused with NON_EMPTY_GROUP exactly while the group has members under a
live coordinator lease (injected clock), done otherwise."""

from __future__ import annotations

import base64
import json
import struct

import httpx
import pytest
from skiff.cli.groups import assignment_partitions, group_view
from skiff.metadata.errors import (
    GROUP_ID_NOT_FOUND,
    NON_EMPTY_GROUP,
    UNKNOWN_TOPIC_OR_PARTITION,
    MetadataError,
)
from skiff.metadata.groups.lease_types import LeaseToken
from skiff.metadata.server.app import create_app
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService
from skiff.metadata.types import GroupOffset

from tests.support.metadata_fixtures import FakeClock

TTL = 10_000


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def consumer_assignment(parts: dict[str, list[int]]) -> bytes:
    """A ConsumerProtocolAssignment v0, as Kafka clients encode it."""
    out = struct.pack(">hi", 0, len(parts))
    for topic, ps in parts.items():
        name = topic.encode()
        out += struct.pack(">h", len(name)) + name + struct.pack(f">i{len(ps)}i", len(ps), *ps)
    return out + struct.pack(">i", -1)


def state(members: int, assigned: bool = True) -> str:
    return json.dumps(
        {
            "generation": 3,
            "protocol_type": "consumer",
            "protocol": "range",
            "leader": "m0" if members else None,
            "assigned": assigned,
            "members": [
                {
                    "id": f"m{i}",
                    "instance": None,
                    "client_id": f"client-{i}",
                    "client_host": "/10.0.0.1",
                    "session_ms": 10000,
                    "rebalance_ms": 30000,
                    "protocols": [],
                    "assignment": base64.b64encode(consumer_assignment({"t": [i]})).decode(),
                }
                for i in range(members)
            ],
        }
    )


def hold(service: MetadataService, group: str, group_state: str) -> LeaseToken:
    grant = service.acquire_group_lease(group, "agent-a", TTL)
    token = LeaseToken("agent-a", grant.epoch)
    service.confirm_group_generation(group, token, TTL, group_state)
    return token


@pytest.mark.anyio
async def test_active_group_refuses_reset_and_delete_until_empty_or_lapsed(
    md: LocalMetadataClient, metadata_service: MetadataService, clock: FakeClock
) -> None:
    await md.create_topic("t", 2, {})
    await md.commit_offsets("g", [GroupOffset("t", 0, 5), GroupOffset("t", 1, 7)])
    hold(metadata_service, "g", state(2))
    (g,) = await md.stored_groups(["g"])
    assert (g.group_id, g.coordinator, g.active) == ("g", "agent-a", True)
    view = group_view(g)
    assert view.state == "Stable" and [m.assignment for m in view.members] == [[("t", 0)], [("t", 1)]]
    assert [m.client_id for m in view.members] == ["client-0", "client-1"]

    with pytest.raises(MetadataError) as e:
        await md.reset_group_offsets("g", [GroupOffset("t", 0, 0)])
    assert e.value.error_code == NON_EMPTY_GROUP and "2 active member(s)" in e.value.message
    with pytest.raises(MetadataError) as e:
        await md.delete_group("g")
    assert e.value.error_code == NON_EMPTY_GROUP
    assert {(o.partition, o.offset) for o in await md.fetch_offsets("g", None)} == {(0, 5), (1, 7)}

    # the coordinator died: once its lease lapses, the members are gone as far as anyone knows
    clock.now += TTL + 1
    (g,) = await md.stored_groups(["g"])
    assert (g.coordinator, g.active, group_view(g).state) == (None, False, "Empty")
    results = await md.reset_group_offsets("g", [GroupOffset("t", 0, 0), GroupOffset("t", 9, 0)])
    assert [r.error_code for r in results] == [0, UNKNOWN_TOPIC_OR_PARTITION]
    assert {(o.partition, o.offset) for o in await md.fetch_offsets("g", None)} == {(0, 0), (1, 7)}

    await md.delete_group("g")
    assert await md.stored_groups(["g"]) == [] and await md.fetch_offsets("g", None) == []
    with pytest.raises(MetadataError) as e:
        await md.delete_group("g")
    assert e.value.error_code == GROUP_ID_NOT_FOUND


@pytest.mark.anyio
async def test_an_emptied_generation_under_a_live_lease_is_not_active(
    md: LocalMetadataClient, metadata_service: MetadataService
) -> None:
    await md.create_topic("t", 1, {})
    hold(metadata_service, "empty", state(0))
    hold(metadata_service, "joining", state(1, assigned=False))
    await md.commit_offsets("offsets-only", [GroupOffset("t", 0, 1)])
    groups = {g.group_id: g for g in await md.stored_groups(None)}
    assert set(groups) == {"empty", "joining", "offsets-only"}
    assert [groups[k].active for k in ("empty", "joining", "offsets-only")] == [False, True, False]
    assert group_view(groups["joining"]).state == "CompletingRebalance"
    assert group_view(groups["offsets-only"]).state == "Empty"
    assert [r.error_code for r in await md.reset_group_offsets("empty", [GroupOffset("t", 0, 0)])] == [0]
    await md.delete_group("empty")
    assert {g.group_id for g in await md.stored_groups(None)} == {"joining", "offsets-only"}


def test_assignment_decoding_is_total() -> None:
    assert assignment_partitions(consumer_assignment({"a": [2, 0], "b": []})) == [("a", 0), ("a", 2)]
    for junk in (b"", b"\x00", b"\xff\xff\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x05\x00\x09ab"):
        assert assignment_partitions(junk) == []


@pytest.mark.anyio
async def test_malformed_admin_requests_are_422_not_500(metadata_service: MetadataService) -> None:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(metadata_service)), base_url="http://m"
    ) as c:
        for path, body in (
            ("/v1/admin/groups/reset-offsets", {"group_id": "g", "offsets": [{"topic": "t"}]}),
            ("/v1/admin/groups/delete", {"group": "g"}),
            ("/v1/admin/groups/stored", {"group_ids": "g"}),
        ):
            r = await c.post(path, json=body)
            assert r.status_code == 422 and r.json()["error_code"] == 42, (path, r.text)
