"""The metadata HTTP API: malformed input is a 4xx with a message (never a 500), error
mapping in both directions, the body size limit, unavailability, and real TCP servers
(uvicorn in a thread, and `run_metadata_server` in a subprocess).

The behaviour of every operation over HTTP is covered by test_metadata_service.py, which
runs each test through `HttpMetadataClient` as well.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Iterator

import httpx
import pytest
import uvicorn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from skiff.metadata import bitmaps
from skiff.metadata.errors import ConflictError, MetadataError, MetadataUnavailable
from skiff.metadata.server.app import create_app
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService
from skiff.metadata.types import (
    AgentInfo,
    BatchSpec,
    ChunkSpec,
    FetchQuery,
    FileSpec,
    GroupOffset,
    OffsetQuery,
    OutputChunk,
    PartitionKey,
)
from skiff.metadata.wire.connect import open_metadata_client
from skiff.metadata.wire.http_client import HttpMetadataClient

with warnings.catch_warnings():  # starlette deprecates httpx-based TestClient; harmless here
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

POST_ENDPOINTS = [
    "/v1/topics/create",
    "/v1/topics/delete",
    "/v1/topics/describe",
    "/v1/topics/by-id",
    "/v1/topics/alter-configs",
    "/v1/topics/add-partitions",
    "/v1/commit-file",
    "/v1/find-chunks",
    "/v1/partition-states",
    "/v1/wait-for-commits",
    "/v1/list-offsets",
    "/v1/replace-chunks",
    "/v1/groups/commit-offsets",
    "/v1/groups/fetch-offsets",
    "/v1/agents/heartbeat",
]


@pytest.fixture
def sqlite_service(tmp_path: os.PathLike[str]) -> Iterator[MetadataService]:
    svc = MetadataService.from_url(f"sqlite:///{os.fspath(tmp_path)}/m.db")
    yield svc
    svc.close()


@pytest.fixture
def api(sqlite_service: MetadataService) -> Iterator[TestClient]:
    with TestClient(create_app(sqlite_service, max_body_bytes=1 << 20), raise_server_exceptions=False) as c:
        yield c


def _is_clean_4xx(resp: httpx.Response) -> bool:
    if not 400 <= resp.status_code < 500:
        return False
    body = resp.json()
    return isinstance(body, dict) and isinstance(body.get("error_code"), int) and bool(body.get("message"))


# ------------------------------------------------------------------ malformed input


@pytest.mark.parametrize("path", POST_ENDPOINTS)
@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{",
        b"not json",
        b"[]",
        b"null",
        b"42",
        b'{"unexpected": 1}',
        b"\xff\xfe",
        b'{"name": {"a": []}}',
    ],
)
def test_malformed_bodies_are_4xx(api: TestClient, path: str, body: bytes) -> None:
    resp = api.post(path, content=body, headers={"content-type": "application/json"})
    assert _is_clean_4xx(resp), (path, body, resp.status_code, resp.text)


def test_bad_values_are_4xx(api: TestClient) -> None:
    tid = str(uuid.uuid4())
    batch = {"byte_offset": 0, "byte_length": 10, "offset_count": 1, "record_count": 1, "max_timestamp": 0}
    file = {"object_key": "k", "size_bytes": 100}
    cases = [
        ("/v1/topics/create", {"name": "t", "partition_count": "many"}),
        ("/v1/topics/create", {"name": "t", "partition_count": 2**40}),
        ("/v1/topics/create", {"name": "t", "partition_count": 1, "configs": {"retention.ms": 5}}),
        ("/v1/topics/create", {"name": "t", "partition_count": 1, "configs": {"retention.ms": None}}),
        ("/v1/topics/create", {"name": None, "partition_count": 1}),
        ("/v1/topics/by-id", {"topic_ids": ["not-a-uuid"]}),
        (
            "/v1/commit-file",
            {
                "file": file,
                "chunks": [{"topic_id": tid, "partition": 0, "batches": [batch | {"byte_length": -1}]}],
            },
        ),
        (
            "/v1/commit-file",
            {
                "file": file,
                "chunks": [{"topic_id": tid, "partition": 0, "batches": [batch | {"offset_count": 2**70}]}],
            },
        ),
        ("/v1/commit-file", {"file": file, "chunks": [{"topic_id": tid, "partition": 0, "batches": []}]}),
        (
            "/v1/commit-file",
            {
                "file": file,
                "chunks": [{"topic_id": tid, "partition": 0, "batches": [batch | {"byte_offset": 95}]}],
            },
        ),
        ("/v1/commit-file", {"file": file | {"size_bytes": -5}, "chunks": []}),
        ("/v1/commit-file", {"file": file | {"object_key": ""}, "chunks": []}),
        ("/v1/find-chunks", {"queries": [{"topic_id": tid, "partition": 0, "offset": 1.5, "max_bytes": 1}]}),
        (
            "/v1/replace-chunks",
            {
                "input_chunk_ids": [1],
                "file": file,
                "outputs": [
                    {
                        "topic_id": tid,
                        "partition": 0,
                        "byte_position": 0,
                        "byte_length": 1,
                        "base_offset": 0,
                        "last_offset": 0,
                        "record_count": 1,
                        "batch_count": 1,
                        "max_timestamp": 0,
                        "present_offsets": "!!not base64!!",
                    }
                ],
            },
        ),
        ("/v1/replace-chunks", {"input_chunk_ids": [], "file": file, "outputs": []}),
        ("/v1/agents/heartbeat", {"agent": {"agent_id": "a", "host": "h", "port": 70000}}),
        ("/v1/agents/heartbeat", {"agent": {"agent_id": "", "host": "h", "port": 1}}),
        ("/v1/groups/commit-offsets", {"group_id": "g", "offsets": [{"topic": "t", "partition": 0}]}),
    ]
    for path, body in cases:
        resp = api.post(path, json=body)
        assert _is_clean_4xx(resp), (path, body, resp.status_code, resp.text)


def test_error_status_codes(api: TestClient) -> None:
    r = api.post("/v1/topics/create", json={"name": "t", "partition_count": 1, "configs": {}})
    assert r.status_code == 200 and r.json()["name"] == "t"
    r = api.post("/v1/topics/create", json={"name": "t", "partition_count": 1, "configs": {}})
    assert (r.status_code, r.json()["error_code"]) == (400, 36)
    r = api.post("/v1/topics/delete", json={"name": "nope"})
    assert (r.status_code, r.json()["error_code"]) == (404, 3)
    r = api.post(
        "/v1/replace-chunks",
        json={"input_chunk_ids": [99], "file": {"object_key": "x", "size_bytes": 0}, "outputs": []},
    )
    assert (r.status_code, r.json()["error_code"]) == (409, 22)
    assert api.get("/v1/nope").status_code == 404
    assert api.get("/v1/commit-file").status_code == 405


def test_body_limit(api: TestClient) -> None:
    big = b'{"names": ["' + b"a" * (1 << 20) + b'"]}'
    r = api.post("/v1/topics/describe", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error_code"] == 42

    def chunked() -> Iterator[bytes]:  # no Content-Length: counted while reading
        yield b'{"names": ["'
        for _ in range(20):
            yield b"a" * 65536
        yield b'"]}'

    r = api.post("/v1/topics/describe", content=chunked(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert api.post("/v1/topics/describe", json={"names": ["a" * 1000]}).status_code == 200


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=15), children, max_size=5)
    ),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(POST_ENDPOINTS), body=json_values)
def test_fuzzed_json_never_500(api: TestClient, path: str, body: object) -> None:
    resp = api.post(path, content=json.dumps(body), headers={"content-type": "application/json"})
    assert resp.status_code < 500, (path, body, resp.text)


def test_nul_in_strings_on_postgresql(pg_url: str) -> None:
    svc = MetadataService.from_url(pg_url)
    try:
        svc.create_topic("t", 1, {})  # so that the offset reaches the database
        with TestClient(create_app(svc), raise_server_exceptions=False) as api:
            r = api.post(
                "/v1/groups/commit-offsets",
                json={"group_id": "g\x00", "offsets": [{"topic": "t", "partition": 0, "offset": 1}]},
            )
            assert _is_clean_4xx(r), r.text
            r = api.post("/v1/groups/fetch-offsets", json={"group_id": "g\x00"})
            assert _is_clean_4xx(r), r.text

        async def local() -> None:
            client = LocalMetadataClient(svc)
            with pytest.raises(MetadataError) as e:
                await client.commit_offsets("g\x00", [GroupOffset("t", 0, 1)])
            assert e.value.error_code == 42
            await client.close()

        asyncio.run(local())
    finally:
        svc.close()


def test_openapi_and_docs(api: TestClient) -> None:
    spec = api.get("/openapi.json").json()
    for path in POST_ENDPOINTS + ["/v1/topics", "/v1/agents", "/v1/producer-ids", "/healthz"]:
        assert path in spec["paths"], path
    assert "swagger" in api.get("/docs").text.lower()
    assert api.get("/healthz").json() == {"status": "ok"}


# ------------------------------------------------------------------ unavailability


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_service_is_unavailable() -> None:
    async def go() -> None:
        client = HttpMetadataClient(f"http://127.0.0.1:{_free_port()}", timeout_s=2)
        with pytest.raises(MetadataUnavailable):
            await client.list_topics()
        await client.close()

        def handler(status: int, body: bytes) -> httpx.MockTransport:
            return httpx.MockTransport(lambda req: httpx.Response(status, content=body))

        for status, body in [
            (500, b"oops"),
            (503, b'{"error_code": -1, "message": "db down"}'),
            (200, b"[{"),
        ]:
            client = HttpMetadataClient("http://x", transport=handler(status, body))
            with pytest.raises(MetadataUnavailable):
                await client.list_topics()
            await client.close()

        def timeout(req: httpx.Request) -> httpx.Response:
            raise httpx.ReadTimeout("slow", request=req)

        client = HttpMetadataClient("http://x", transport=httpx.MockTransport(timeout))
        with pytest.raises(MetadataUnavailable):
            await client.init_producer_id()
        await client.close()
        # 4xx without a JSON body still becomes a MetadataError
        client = HttpMetadataClient("http://x", transport=handler(418, b"teapot"))
        with pytest.raises(MetadataError) as e:
            await client.list_topics()
        assert e.value.error_code == 42
        await client.close()
        client = HttpMetadataClient(
            "http://x", transport=handler(409, b'{"error_code": 22, "message": "cas"}')
        )
        with pytest.raises(ConflictError):
            await client.replace_chunks([1], FileSpec("k", 0), [])
        await client.close()

    asyncio.run(go())


def test_database_down_is_unavailable() -> None:
    """Metadata up, its PostgreSQL down: 503 over HTTP, MetadataUnavailable in both clients."""
    svc = MetadataService.from_url(f"postgresql://postgres@127.0.0.1:{_free_port()}/x", migrate=False)

    async def go() -> None:
        local = LocalMetadataClient(svc)
        with pytest.raises(MetadataUnavailable):
            await local.list_topics()
        await local.close()
        http = HttpMetadataClient("http://x", transport=httpx.ASGITransport(app=create_app(svc)))
        with pytest.raises(MetadataUnavailable):
            await http.commit_file(FileSpec("k", 10), [])
        await http.close()

    try:
        asyncio.run(go())
    finally:
        svc.close()


# ------------------------------------------------------------------ real TCP


class ServerThread:
    """uvicorn serving the app on a free port, in a thread."""

    def __init__(self, service: MetadataService) -> None:
        self.port = _free_port()
        config = uvicorn.Config(create_app(service), host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)


def test_over_tcp(db_url: str) -> None:
    svc = MetadataService.from_url(db_url)
    try:
        with ServerThread(svc) as url:
            asyncio.run(_tcp_flow(url))
    finally:
        svc.close()


async def _tcp_flow(url: str) -> None:
    md = HttpMetadataClient(url, timeout_s=30, max_connections=8)
    try:
        t = await md.create_topic("tcp", 3, {"cleanup.policy": "compact"})

        async def committer(i: int) -> list[int]:
            bases: list[int] = []
            for _ in range(10):
                specs = [ChunkSpec(t.topic_id, p, (BatchSpec(p * 70, 70, 2, 2, 100 + i),)) for p in range(3)]
                results = await md.commit_file(FileSpec(f"tcp/{uuid.uuid4().hex}", 210, 0, f"a{i}"), specs)
                assert all(r.error_code == 0 for r in results)
                bases.extend(r.batches[0].base_offset for r in results)
            return bases

        per_task = await asyncio.gather(*(committer(i) for i in range(8)))
        states = await md.partition_states([PartitionKey(t.topic_id, p) for p in range(3)])
        assert [s.high_watermark for s in states] == [160, 160, 160]
        assert sorted(b for bases in per_task for b in bases) == sorted(list(range(0, 160, 2)) * 3)
        infos = await md.find_chunks([FetchQuery(t.topic_id, 0, 0, 175)])
        assert [c.base_offset for c in infos[0].chunks] == [0, 2, 4]
        a, b = infos[0].chunks[:2]
        out = OutputChunk(t.topic_id, 0, 0, 70, 0, 3, 1, 1, 107, present_offsets=bitmaps.serialize([3]))
        await md.replace_chunks([a.chunk_id, b.chunk_id], FileSpec("tcp/compacted", 70, 1), [out])
        (info,) = await md.find_chunks([FetchQuery(t.topic_id, 0, 0, 1)])
        assert info.chunks[0].present_offsets == out.present_offsets and info.chunks[0].offsets_absolute
        with pytest.raises(ConflictError):
            await md.replace_chunks([a.chunk_id], FileSpec("tcp/again", 20, 1), [])
        answers = await md.list_offsets([OffsetQuery(t.topic_id, 1, -1)])
        assert answers[0].offset == 160
        pid, epoch = await md.init_producer_id()
        assert epoch == 0 and pid >= 0
        await md.commit_offsets("grp", [GroupOffset("tcp", 0, 42, "m")])
        assert await md.fetch_offsets("grp", ["tcp"]) == [GroupOffset("tcp", 0, 42, "m")]
        await md.heartbeat_agent(AgentInfo("agent-1", "10.0.0.1", 9092, "eu-1a"))
        assert [a.agent_id for a in await md.live_agents()] == ["agent-1"]
        with pytest.raises(MetadataError) as e:
            await md.add_partitions("tcp", 2)
        assert e.value.error_code == 37
        t2 = await md.alter_topic_configs("tcp", {"retention.ms": "5"}, [], False)
        assert (await md.topics_by_id([t.topic_id]))[t.topic_id] == t2
        await md.delete_topic("tcp")
        assert await md.list_topics() == []
    finally:
        await md.close()


def test_run_metadata_server_subprocess(tmp_path: os.PathLike[str]) -> None:
    port = _free_port()
    db = f"sqlite:///{os.fspath(tmp_path)}/served.db"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from skiff.metadata.server.app import run_metadata_server; run_metadata_server({db!r}, '127.0.0.1', {port})",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.communicate()[0].decode()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server did not come up"
            time.sleep(0.1)

        async def go() -> None:
            md = open_metadata_client(f"http://127.0.0.1:{port}")
            t = await md.create_topic("served", 1, {})
            assert (await md.describe_topics(["served"]))["served"] == t
            await md.close()
            # The same database opened in-process sees it (the playground's path).
            local = open_metadata_client(db)
            assert [x.name for x in await local.list_topics()] == ["served"]
            await local.close()

        asyncio.run(go())
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        assert proc.stdout is not None
        proc.stdout.close()  # else the pipe is closed at collection, with a ResourceWarning
