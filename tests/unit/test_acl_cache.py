"""agent.acl_cache: loads only when metadata's version moved, keeps its last copy when
metadata is away, fails closed until a first load, and stays out of the way when off."""

from __future__ import annotations

import asyncio

import pytest
from skiff.agent.acl_cache import AclCache
from skiff.metadata.errors import MetadataUnavailable
from skiff.metadata.security.acl_types import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

READ, TOPIC = AclOperation.READ, ResourceType.TOPIC
ANON = "User:ANONYMOUS"


class FakeAcls:
    """The two calls the cache makes, over a list and a version, switchable off."""

    def __init__(self) -> None:
        self.version = 0
        self.bindings: list[AclBinding] = []
        self.down = False
        self.list_calls = 0

    def add(self, b: AclBinding) -> None:
        self.bindings.append(b)
        self.version += 1

    async def acl_version(self) -> int:
        if self.down:
            raise MetadataUnavailable("down (test)")
        return self.version

    async def list_acls(self) -> tuple[int, list[AclBinding]]:
        if self.down:
            raise MetadataUnavailable("down (test)")
        self.list_calls += 1
        return self.version, list(self.bindings)


def allow_read(name: str) -> AclBinding:
    return AclBinding(TOPIC, name, PatternType.LITERAL, ANON, "*", READ, AclPermissionType.ALLOW)


def cache(md: FakeAcls, **kw: object) -> AclCache:
    return AclCache(md, enabled=True, refresh_interval_ms=10, **kw)  # type: ignore[arg-type]


def test_off_allows_everything_and_asks_nothing() -> None:
    md = FakeAcls()
    md.down = True
    c = AclCache(md, enabled=False)  # type: ignore[arg-type]
    asyncio.run(c.start())
    assert c.authorize(ANON, "h", READ, TOPIC, "t")
    assert asyncio.run(c.refresh()) is False


def test_reloads_only_when_the_version_moved() -> None:
    md = FakeAcls()
    c = cache(md)

    async def go() -> None:
        await c.refresh(force=True)
        assert md.list_calls == 1 and not c.authorize(ANON, "h", READ, TOPIC, "t")
        assert await c.refresh() is False and md.list_calls == 1
        md.add(allow_read("t"))
        assert await c.refresh() is True and md.list_calls == 2
        assert c.authorize(ANON, "h", READ, TOPIC, "t")

    asyncio.run(go())


def test_fails_closed_until_loaded_then_the_poll_catches_up() -> None:
    md = FakeAcls()
    md.down = True
    c = cache(md, allow_everyone_if_no_acl_found=True, super_users="User:admin")

    async def go() -> None:
        await c.start()  # does not raise: the agent starts, refusing
        try:
            assert not c.authorize(ANON, "h", READ, TOPIC, "t")  # allow-everyone needs a load first
            assert c.authorize("User:admin", "h", READ, TOPIC, "t")
            md.down = False
            await asyncio.wait_for(c.wait_for_version(0), 10)
            assert c.authorize(ANON, "h", READ, TOPIC, "t")  # no ACL on t: allow-everyone now applies
            # metadata away again: the last copy stays in force
            md.down = True
            with pytest.raises(MetadataUnavailable):
                await c.refresh()
            assert c.authorize(ANON, "h", READ, TOPIC, "t") and c.version == 0
        finally:
            await c.close()

    asyncio.run(go())


@pytest.mark.parametrize(
    ("peer", "host"),
    [
        ("10.1.2.3:5555", "10.1.2.3"),
        ("::1:5555", "::1"),
        ("::ffff:10.1.2.3:5555", "10.1.2.3"),
        ("fe80::1:443", "fe80::1"),
        ("unix-socket", "unix-socket"),
    ],
)
def test_the_client_host_is_the_address_acls_name(peer: str, host: str) -> None:
    from skiff.agent.handlers import ConnectionInfo

    info = ConnectionInfo(1, peer)
    assert info.client_host == host and info.principal == "User:ANONYMOUS"
