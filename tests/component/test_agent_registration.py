"""An agent that shuts down cleanly leaves the registry at once, so its id can be used again
at another address (a restarted playground or pod) without waiting for the TTL."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from skiff.agent.agent_registry import AgentIdInUse
from skiff.agent.config import AgentConfig
from skiff.agent.runtime import start_agent
from skiff.fileformat.objectstore import open_async_store
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService


async def test_a_cleanly_stopped_agent_can_restart_at_another_address(tmp_path: Path) -> None:
    service = MetadataService.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    md = LocalMetadataClient(service, owns_service=True)
    store = open_async_store(f"memory://reg-{uuid.uuid4().hex}")
    cfg = AgentConfig.from_env({}, agent_id="same", host="127.0.0.1", port=0, agent_ttl_ms=60_000)
    try:
        first = await start_agent(cfg, md, store)
        assert [a.agent_id for a in await md.live_agents()] == ["same"]
        # while it runs, the id is taken for any other address
        with pytest.raises(AgentIdInUse):
            await start_agent(cfg, md, store)
        first_port = first.port
        await first.close(close_clients=False)
        assert await md.live_agents() == []  # left at once, not after the 60 s TTL
        second = await start_agent(cfg, md, store)  # another port: accepted
        assert second.port != first_port
        (live,) = await md.live_agents()
        assert (live.agent_id, live.port) == ("same", second.port)
        await second.close(close_clients=False)
    finally:
        await md.close()
