"""Every metric family a running agent exports is documented in docs/operations.md's
Monitoring section (a metric added without a row there fails here)."""

from __future__ import annotations

import asyncio
import itertools
import re
import urllib.request
import uuid
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from skiff.agent.config import AgentConfig
from skiff.agent.metrics import serve_metrics
from skiff.agent.runtime import start_agent
from skiff.fileformat.objectstore import open_async_store
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService

from tests.support.agents import free_port

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def documented_names() -> set[str]:
    """The metric names in the Monitoring section's backticks, `{a,b}` alternatives expanded
    and `{label}` lists dropped."""
    text = DOC.read_text()
    section = text[text.index("\n## Monitoring\n") :]
    section = section[: section.index("\n## ", 1)]
    names: set[str] = set()
    for code in re.findall(r"`(skiff_[^`]+)`", section):
        code = re.sub(r"\{[^}]*\}$", "", code)  # a trailing brace group lists labels
        parts = re.split(r"(\{[^}]*\})", code)  # one inside the name lists alternatives
        options = [p[1:-1].split(",") if p.startswith("{") else [p] for p in parts]
        names.update("".join(combo) for combo in itertools.product(*options))
    return names


def exported_names(port: int) -> set[str]:
    """Each family's name as written in the exposition: counters with `_total`."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {
        f.name + "_total" if f.type == "counter" else f.name for f in text_string_to_metric_families(text)
    }


def test_the_doc_parser_expands_alternatives() -> None:
    names = documented_names()
    assert {"skiff_fetch_cache_hits_total", "skiff_fetch_cache_loads_total", "skiff_agent_ready"} <= names
    assert "skiff_object_store_requests_total" in names  # `{kind}` dropped


async def test_every_exported_family_is_documented(tmp_path: Path) -> None:
    service = MetadataService.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    md = LocalMetadataClient(service, owns_service=True)
    cfg = AgentConfig.from_env({}, agent_id="d1", host="127.0.0.1", port=0)
    running = await start_agent(cfg, md, open_async_store(f"memory://doc-{uuid.uuid4().hex}"))
    port = free_port()
    serve_metrics(running, "127.0.0.1", port)
    try:
        exported = await asyncio.to_thread(exported_names, port)
    finally:
        await running.close()
    assert len(exported) > 30
    assert exported - documented_names() == set()
