"""The file commit checks its object in the bucket (metadata.commits.object_check): one HEAD, before
any transaction; a missing object or one of another size is refused with
KAFKA_STORAGE_ERROR and nothing is stored (no file or chunk row, the high watermark
unchanged), in process (the playground's path) and over HTTP. Without a bucket, or turned
off, commits are not checked. The compactor's swap is checked the same way.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from skiff.fileformat.objectstore import MemoryStore, ObjectInfo, open_store
from skiff.metadata.commits.object_check import ObjectCheck
from skiff.metadata.errors import KAFKA_STORAGE_ERROR, MetadataError
from skiff.metadata.inspection import count_rows
from skiff.metadata.server.app import create_app
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService
from skiff.metadata.types import BatchSpec, ChunkSpec, FileSpec, OutputChunk, PartitionKey

from tests.component.test_metadata_auth import Served

SIZE = 140


@pytest.fixture
def bucket() -> str:
    return f"memory://check-{uuid.uuid4().hex}"


@pytest.fixture
def service(tmp_path: Path, bucket: str) -> Iterator[MetadataService]:
    svc = MetadataService.from_url(f"sqlite:///{tmp_path}/m.db", bucket_url=bucket)
    yield svc
    svc.close()


def _specs(svc: MetadataService) -> list[ChunkSpec]:
    topic = svc.describe_topics(["t"]).get("t") or svc.create_topic("t", 1, {})
    return [ChunkSpec(topic.topic_id, 0, (BatchSpec(0, 70, 1, 1, 0), BatchSpec(70, 70, 1, 1, 0)))]


def _hwm(svc: MetadataService) -> int:
    topic = svc.describe_topics(["t"])["t"]
    (state,) = svc.partition_states([PartitionKey(topic.topic_id, 0)])
    return state.high_watermark


def _put(bucket: str, key: str, size: int) -> None:
    with open_store(bucket) as store:
        store.put(key, b"x" * size)


def test_missing_or_wrong_sized_objects_are_refused_and_nothing_is_stored(
    service: MetadataService, bucket: str
) -> None:
    specs = _specs(service)
    _put(bucket, "segments/short", SIZE - 1)
    before = count_rows(service.engine)
    for key, fragment in (("segments/nowhere", "no such object"), ("segments/short", "holds 139 bytes")):
        with pytest.raises(MetadataError) as e:
            service.commit_file(FileSpec(key, SIZE, 0, "a-1"), specs)
        assert e.value.error_code == KAFKA_STORAGE_ERROR
        assert fragment in e.value.message and key in e.value.message
    assert count_rows(service.engine) == before  # no file row, no chunk row
    assert _hwm(service) == 0
    check = service.commits.object_check
    assert check is not None and check.outcomes == {"missing": 1, "size_mismatch": 1}

    _put(bucket, "segments/real", SIZE)
    (result,) = service.commit_file(FileSpec("segments/real", SIZE, 0, "a-1"), specs)
    assert [b.base_offset for b in result.batches] == [0, 1]
    assert _hwm(service) == 2
    assert check.outcomes["ok"] == 1


def test_the_playground_path_refuses_too(service: MetadataService, bucket: str) -> None:
    """LocalMetadataClient (the playground's agent) reaches the same check."""

    async def go() -> None:
        md = LocalMetadataClient(service)
        try:
            with pytest.raises(MetadataError) as e:
                await md.commit_file(FileSpec("segments/none", SIZE, 0, "a-1"), _specs(service))
            assert e.value.error_code == KAFKA_STORAGE_ERROR
        finally:
            await md.close()

    asyncio.run(go())
    assert count_rows(service.engine)["chunks"] == 0 and _hwm(service) == 0


def test_refused_over_http_with_the_services_json_error(service: MetadataService) -> None:
    served = Served(create_app(service))
    try:
        topic = _specs(service)[0].topic_id
        body = {
            "file": {"object_key": "segments/forged", "size_bytes": SIZE, "writer": "a-1"},
            "chunks": [
                {
                    "topic_id": str(topic),
                    "partition": 0,
                    "batches": [
                        {
                            "byte_offset": 0,
                            "byte_length": 70,
                            "offset_count": 1,
                            "record_count": 1,
                            "max_timestamp": 0,
                        }
                    ],
                }
            ],
        }
        r = httpx.post(f"{served.url()}/v1/commit-file", json=body)
        assert r.status_code == 400, r.text
        assert r.json() == {
            "error_code": KAFKA_STORAGE_ERROR,
            "message": "commit of 'segments/forged': no such object in the bucket",
        }
        metrics = httpx.get(f"{served.url()}/metrics").text
        assert 'skiff_metadata_commit_object_checks_total{outcome="missing"} 1' in metrics
        assert "skiff_metadata_commit_object_check_seconds_count 1" in metrics
    finally:
        served.close()
    assert count_rows(service.engine)["files"] == 0 and _hwm(service) == 0


def test_the_head_runs_before_any_transaction(service: MetadataService, bucket: str) -> None:
    """No database connection is checked out while the HEAD runs (no transaction, no lock)."""
    seen: list[int] = []
    inner = MemoryStore(bucket.removeprefix("memory://"))

    class Watching(MemoryStore):
        def head(self, key: str) -> ObjectInfo:
            seen.append(service.engine.pool.checkedout())  # type: ignore[attr-defined]
            return inner.head(key)

    specs = _specs(service)
    service.commits.object_check = ObjectCheck(Watching(bucket.removeprefix("memory://")))
    _put(bucket, "segments/a", SIZE)
    service.commit_file(FileSpec("segments/a", SIZE, 0, "a-1"), specs)
    assert seen == [0]


def test_a_recorded_commit_whose_object_is_gone_is_answered_as_a_retry(
    service: MetadataService, bucket: str
) -> None:
    specs = _specs(service)
    _put(bucket, "segments/once", SIZE)
    first = service.commit_file(FileSpec("segments/once", SIZE, 0, "a-1"), specs)
    with open_store(bucket) as store:
        store.delete("segments/once")
    again = service.commit_file(FileSpec("segments/once", SIZE, 0, "a-1"), specs)
    assert [b.base_offset for b in again[0].batches] == [b.base_offset for b in first[0].batches]
    assert _hwm(service) == 2


def test_without_a_bucket_or_turned_off_commits_are_not_checked(tmp_path: Path, bucket: str) -> None:
    for i, kwargs in enumerate(({}, {"bucket_url": bucket, "verify_objects": False})):
        svc = MetadataService.from_url(f"sqlite:///{tmp_path}/m{i}.db", **kwargs)  # type: ignore[arg-type]
        try:
            assert svc.commits.object_check is None
            (result,) = svc.commit_file(FileSpec("segments/unchecked", SIZE, 0, "a-1"), _specs(svc))
            assert result.batches[0].error_code == 0
        finally:
            svc.close()


def test_a_compaction_swap_into_a_missing_object_is_refused(service: MetadataService, bucket: str) -> None:
    specs = _specs(service)
    _put(bucket, "segments/in", SIZE)
    (result,) = service.commit_file(FileSpec("segments/in", SIZE, 0, "a-1"), specs)
    (loc,) = result.locations
    out = OutputChunk(specs[0].topic_id, 0, 0, SIZE, 0, 1, 2, 2, 0)
    before = count_rows(service.engine)
    with pytest.raises(MetadataError) as e:
        service.replace_chunks([loc.chunk_id], FileSpec("compacted/none", SIZE, 1, "c-1"), [out])
    assert e.value.error_code == KAFKA_STORAGE_ERROR
    assert count_rows(service.engine) == before
