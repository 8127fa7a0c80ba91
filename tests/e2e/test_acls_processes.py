"""ACLs across real processes: `skiff metadata` over HTTP and two `skiff agent` processes
configured only by SKIFF_* variables. A change made through one agent is obeyed by its next
request and, through the version poll, by the other agent within a bound."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName
from kio.static.primitive import i8
from skiff.metadata.security import acl_types as m
from skiff.metadata.wire.http_client import HttpMetadataClient

from tests.component.fake_metadata import request_once
from tests.support.agents import SkiffProcess

ANON = "User:ANONYMOUS"
ENV = {
    "SKIFF_AUTHORIZER_ENABLED": "true",
    "SKIFF_ACL_REFRESH_INTERVAL_MS": "100",
    "SKIFF_HEARTBEAT_INTERVAL_MS": "300",
    "SKIFF_AGENT_TTL_MS": "3000",
}


def describe_code(bootstrap: str, topic: str) -> ErrorCode:
    req = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=TopicName(topic)),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    return request_once(bootstrap, req).topics[0].error_code


def test_a_change_through_one_agent_reaches_the_other(
    tmp_path: Path, spawn_skiff: Callable[..., SkiffProcess]
) -> None:
    md = spawn_skiff("metadata", "--db", f"sqlite:///{tmp_path / 'm.db'}", "--port", "{port}")
    url = f"http://127.0.0.1:{md.port}"

    async def bootstrap() -> None:
        client = HttpMetadataClient(url)
        await client.create_topic("t", 1, {})
        alter = m.AclBinding(
            m.ResourceType.CLUSTER,
            m.CLUSTER_NAME,
            m.PatternType.LITERAL,
            ANON,
            "*",
            m.AclOperation.ALTER,
            m.AclPermissionType.ALLOW,
        )
        await client.create_acls([alter])
        await client.close()

    asyncio.run(bootstrap())
    agent_args = ["agent", "--bucket", f"file://{tmp_path / 'bucket'}", "--metadata", url]
    a = spawn_skiff(
        *agent_args, "--host", "127.0.0.1", "--port", "{port}", env={**ENV, "SKIFF_AGENT_ID": "a"}
    )
    b = spawn_skiff(
        *agent_args, "--host", "127.0.0.1", "--port", "{port}", env={**ENV, "SKIFF_AGENT_ID": "b"}
    )
    assert describe_code(a.bootstrap, "t") == ErrorCode.topic_authorization_failed
    assert describe_code(b.bootstrap, "t") == ErrorCode.topic_authorization_failed

    creation = AclCreation(
        resource_type=i8(2),
        resource_name="t",
        resource_pattern_type=i8(3),
        principal=ANON,
        host="*",
        operation=i8(8),
        permission_type=i8(3),
    )
    resp = request_once(a.bootstrap, CreateAclsRequest(creations=(creation,)))
    assert resp.results[0].error_code == ErrorCode.none
    answered = time.monotonic()
    assert describe_code(a.bootstrap, "t") == ErrorCode.none  # the agent that made it: at once
    # the other agent: at its next poll (100 ms here); the deadline is generous for a busy machine
    while describe_code(b.bootstrap, "t") != ErrorCode.none:
        assert time.monotonic() - answered < 20, "agent b never loaded the new ACLs"
        time.sleep(0.02)
