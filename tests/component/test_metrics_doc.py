"""The metrics table in docs/operations.md is generated from `agent.metrics.METRIC_DOCS`
(`python -m skiff.agent.metrics --write docs/operations.md`): the doc must be current, and
every family a running agent exports must be in METRIC_DOCS with its type and labels."""

from __future__ import annotations

import asyncio
import urllib.request
import uuid
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from skiff.agent.config import AgentConfig
from skiff.agent.metrics import METRIC_DOCS, _main, replace_metrics_table, serve_metrics
from skiff.agent.runtime import start_agent
from skiff.fileformat.objectstore import open_async_store
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService

from tests.support.agents import free_port

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def test_the_doc_holds_the_current_table() -> None:
    text = DOC.read_text()
    assert replace_metrics_table(text) == text, (
        "run: python -m skiff.agent.metrics --write docs/operations.md"
    )


def test_write_replaces_only_the_table(tmp_path: Path) -> None:
    doc = tmp_path / "ops.md"
    doc.write_text(DOC.read_text().replace("| `skiff_groups` |", "| `skiff_old` |"))
    assert _main(["--write", str(doc)]) == 0
    assert doc.read_text() == DOC.read_text()


def _exported(port: int) -> dict[str, tuple[str, set[str]]]:
    """Each family as written in the exposition (counters with `_total`): its type and the
    label names its samples carry (`le` of histogram buckets aside)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {
        (f.name + "_total" if f.type == "counter" else f.name): (
            f.type,
            {label for s in f.samples for label in s.labels if label != "le"},
        )
        for f in text_string_to_metric_families(text)
    }


async def test_every_exported_family_is_documented_with_its_type_and_labels(tmp_path: Path) -> None:
    service = MetadataService.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    md = LocalMetadataClient(service, owns_service=True)
    cfg = AgentConfig.from_env({}, agent_id="d1", host="127.0.0.1", port=0)
    running = await start_agent(cfg, md, open_async_store(f"memory://doc-{uuid.uuid4().hex}"))
    port = free_port()
    serve_metrics(running, "127.0.0.1", port)
    try:
        exported = await asyncio.to_thread(_exported, port)
    finally:
        await running.close()
    documented = {name: doc for doc in METRIC_DOCS for name in doc.names}
    assert len(exported) > 30
    assert set(exported) - set(documented) == set()
    for name, (kind, labels) in exported.items():
        doc = documented[name]
        assert kind == doc.type, name
        assert labels <= set(filter(None, doc.labels.split(","))), name  # no samples: no labels seen
