"""The metadata service's /metrics over real HTTP (uvicorn on loopback, tokens on), on SQLite
and PostgreSQL:

- a file commit over HTTP counts one request on its route template with the caller's role
  and status, one latency observation, one commit with its records and bytes, and write
  transactions in the database histogram; a request without a token counts as 401 with
  role `none`; a path that is no route counts as `other`, never as its raw path;
- the pool gauges, the leases (a group lease taken), the storage gauges and the
  compaction families are exported;
- every family exported is documented (metadata.server.metric_docs) with its type and
  labels, and the exposition parses.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from skiff.metadata.server.app import create_app
from skiff.metadata.server.auth import TokenTable
from skiff.metadata.server.metric_docs import METADATA_METRIC_DOCS
from skiff.metadata.service import MetadataService
from skiff.metadata.types import BatchSpec, ChunkSpec, FileSpec
from skiff.metadata.wire.credentials import MetadataCredentials
from skiff.metadata.wire.http_client import HttpMetadataClient
from skiff.metadata.wire.roles import ROLES

from tests.support.served_app import Served

TOKENS = {role: f"{role}-token-{'x' * 24}" for role in sorted(ROLES)}
TOKENS_TEXT = "\n".join(f"{role}:{token}" for role, token in TOKENS.items())
COMMIT_ROUTE = "/v1/commit-file"


@pytest.fixture
def served(metadata_service: MetadataService) -> Iterator[Served]:
    app = create_app(metadata_service, tokens=TokenTable.parse(TOKENS_TEXT, "test"))
    s = Served(app)
    yield s
    s.close()


def client(served: Served, role: str) -> HttpMetadataClient:
    return HttpMetadataClient(served.url(), credentials=MetadataCredentials(token=TOKENS[role]))


def scrape(served: Served) -> dict[str, Any]:
    text = httpx.get(
        f"{served.url()}/metrics", headers={"authorization": f"Bearer {TOKENS['reader']}"}, timeout=10
    ).text
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(families: dict[str, Any], name: str, **labels: str) -> float:
    """The value of the one sample `name` with exactly `labels` (0 when absent)."""
    family = families[name.removesuffix("_total").removesuffix("_count").removesuffix("_sum")]
    for s in family.samples:
        if s.name == name and s.labels == labels:
            return float(s.value)
    return 0.0


async def test_a_commit_counts_its_request_latency_records_and_transactions(served: Served) -> None:
    agent = client(served, "agent")
    try:
        topic = await agent.create_topic("t", 1, {})
        batches = (BatchSpec(0, 70, 3, 3, 0), BatchSpec(70, 70, 2, 2, 0))
        await agent.commit_file(FileSpec("segments/a", 140, 0), [ChunkSpec(topic.topic_id, 0, batches)])
        await agent.acquire_group_lease("g", "agent-1", 60_000)
    finally:
        await agent.close()
    assert httpx.get(f"{served.url()}/v1/topics", timeout=10).status_code == 401
    assert httpx.get(f"{served.url()}/no/such/path", timeout=10).status_code == 401

    m = scrape(served)
    requests = "skiff_metadata_http_requests_total"
    assert sample(m, requests, route=COMMIT_ROUTE, role="agent", status="200") == 1
    assert sample(m, requests, route="/v1/topics", role="none", status="401") == 1
    assert sample(m, requests, route="other", role="none", status="401") == 1
    assert not any("/no/such/path" in str(s.labels) for s in m["skiff_metadata_http_requests"].samples)
    assert sample(m, "skiff_metadata_http_request_duration_seconds_count", route=COMMIT_ROUTE) == 1
    assert sample(m, "skiff_metadata_commits_total") == 1
    assert sample(m, "skiff_metadata_commit_records_total") == 5
    assert sample(m, "skiff_metadata_commit_bytes_total") == 140
    # topic creation, the commit and the lease each wrote at least once
    assert sample(m, "skiff_metadata_db_transaction_duration_seconds_count", kind="write") >= 3
    assert sample(m, "skiff_metadata_db_pool_connections", state="size") >= 1
    assert sample(m, "skiff_metadata_leases", kind="group") == 1
    assert sample(m, "skiff_metadata_leases", kind="compaction") == 0
    assert sample(m, "skiff_bucket_files", state="live") == 1
    assert sample(m, "skiff_bucket_stored_bytes", state="live") == 140
    assert sample(m, "skiff_bucket_storage_cost_usd_per_hour") == pytest.approx(140 / 2**30 * 0.023 / 730)
    assert sample(m, "skiff_compaction_partitions_eligible", kind="clean") == 0


async def test_every_exported_family_is_documented_with_its_type_and_labels(served: Served) -> None:
    agent = client(served, "agent")
    try:
        topic = await agent.create_topic("t", 1, {})
        await agent.commit_file(
            FileSpec("segments/b", 70, 0), [ChunkSpec(topic.topic_id, 0, (BatchSpec(0, 70, 1, 1, 0),))]
        )
    finally:
        await agent.close()
    documented = {name: doc for doc in METADATA_METRIC_DOCS for name in doc.names}
    for family in scrape(served).values():
        name = family.name + "_total" if family.type == "counter" else family.name
        assert name in documented, name
        doc = documented[name]
        assert family.type == doc.type, name
        labels = {label for s in family.samples for label in s.labels if label != "le"}
        assert labels <= set(filter(None, doc.labels.split(","))), name
