"""Each metadata operation is declared once (metadata.wire.operations) and everything else
follows: the service implements it under the same name and parameters, the app serves it
at its path under its roles, every client forwards it, and its wire codec round-trips the
domain values (bytes, UUIDs, tuples, sets, tuple-keyed dicts, None)."""

from __future__ import annotations

import asyncio
import inspect
import uuid

import pytest
from fastapi.routing import APIRoute
from pydantic import ValidationError
from skiff.metadata.errors import MetadataError
from skiff.metadata.security.scram_types import ScramCredential
from skiff.metadata.server.app import create_app
from skiff.metadata.server.auth import allowed_roles, iter_routes
from skiff.metadata.service import MetadataService
from skiff.metadata.types import FileSpec, GroupOffset, OutputChunk
from skiff.metadata.wire.codec import operations_of
from skiff.metadata.wire.http_client import HttpMetadataClient, SyncHttpMetadataClient
from skiff.metadata.wire.operations import (
    OPERATIONS,
    AdminClient,
    AgentClient,
    CompactorClient,
    MetadataClient,
    ReaderClient,
)
from skiff.metadata.wire.roles import ADMIN

from tests.support.served_app import Served


def test_every_operation_is_a_service_method_with_the_same_parameters() -> None:
    assert len(OPERATIONS) >= 66
    for name, op in OPERATIONS.items():
        impl = getattr(MetadataService, name)
        params = [p for p in inspect.signature(impl).parameters.values() if p.name != "self"]
        assert [(p.name, p.kind, p.default) for p in params] == [
            (p.name, p.kind, p.default) for p in op.params
        ], name


def test_the_roles_clients_are_views_of_the_one_declaration() -> None:
    everything = set(OPERATIONS)
    seen: set[str] = set()
    for role in (AgentClient, CompactorClient, ReaderClient, AdminClient):
        ops = operations_of(role)
        assert set(ops) <= everything
        seen |= set(ops)
    assert seen == everything  # every operation has a caller
    assert set(operations_of(MetadataClient)) == everything
    assert len(operations_of(ReaderClient)) <= 20


def test_the_app_serves_each_operation_at_its_path_under_its_roles() -> None:
    svc = MetadataService.from_url("sqlite://")
    try:
        app = create_app(svc)
        routes = {
            (path, m): r for path, r in iter_routes(app.routes) if isinstance(r, APIRoute) for m in r.methods
        }
        for op in OPERATIONS.values():
            route = routes[(op.spec.path, op.spec.http_method)]
            assert allowed_roles(route) == frozenset(op.spec.roles) | {ADMIN}, op.name
    finally:
        svc.close()


def test_paths_are_unique() -> None:
    keys = [(op.spec.http_method, op.spec.path) for op in OPERATIONS.values()]
    assert len(keys) == len(set(keys))


def test_get_operations_take_no_parameters() -> None:
    for op in OPERATIONS.values():
        if op.spec.http_method == "GET":
            assert op.params == [], op.name


def _roundtrip(name: str, value: object) -> object:
    op = OPERATIONS[name]
    return op.decode_response(op.encode_response(value))


def test_answers_round_trip() -> None:
    tid = str(uuid.uuid4())
    assert _roundtrip("add_partitions_to_txn", {(tid, 0): 0, (tid, 1): 51}) == {(tid, 0): 0, (tid, 1): 51}
    stable = ([GroupOffset("t", 0, 5, None, -1)], {("t", 0), ("u", 3)})
    assert _roundtrip("fetch_stable_offsets", stable) == stable
    assert _roundtrip("init_producer_id", (7, 0)) == (7, 0)
    assert _roundtrip("bucket_url", None) is None
    cred = ScramCredential("u", "SCRAM-SHA-256", b"\xff\x00salt", 4096, b"\x01" * 32, b"\x02" * 32)
    assert _roundtrip("scram_credentials", [cred]) == [cred]
    assert _roundtrip("describe_txns", {"x": None}) == {"x": None}


def test_requests_round_trip_and_are_validated() -> None:
    op = OPERATIONS["replace_chunks"]
    out = OutputChunk(uuid.uuid4(), 0, 0, 10, 0, 4, 5, 1, 99, b"\x00\x01\xfe")
    args = op.bind(([1, 2], FileSpec("k", 10, 1, "compactor"), [out]), {})
    assert args["checkpoints"] == () and args["lease_token"] is None  # defaults applied
    back = op.decode_request(op.encode_request(args))
    assert back["file"] == FileSpec("k", 10, 1, "compactor")
    assert list(back["outputs"]) == [out]
    with pytest.raises(ValidationError):
        op.decode_request(
            b'{"input_chunk_ids": [1], "file": {"object_key": "k", "size_bytes": -1}, "outputs": []}'
        )
    with pytest.raises(ValidationError):  # unknown keys are refused
        OPERATIONS["expire_txns"].decode_request(b'{"unexpected": 1}')
    with pytest.raises(TypeError):  # a call that does not fit the declaration, as Python says
        op.bind((), {"nope": 1})


def test_sync_and_async_http_clients_forward_every_operation() -> None:
    svc = MetadataService.from_url("sqlite://", bucket_url="memory://b", verify_objects=False)
    served = Served(create_app(svc))
    sync = SyncHttpMetadataClient(served.url())
    try:
        topic = sync.create_topic("t", 2, {"cleanup.policy": "compact"})
        assert sync.describe_topics(["t", "nope"]) == {"t": topic}
        assert sync.bucket_url() == "memory://b"
        with pytest.raises(MetadataError) as e:
            sync.create_topic("t", 2, {})
        assert e.value.error_code == 36  # TOPIC_ALREADY_EXISTS, as from the service
        with pytest.raises(AttributeError):
            sync.no_such_operation()  # noqa: B018

        async def go() -> None:
            client = HttpMetadataClient(served.url())
            assert await client.topics_by_id([topic.topic_id]) == {topic.topic_id: topic}
            await client.close()

        asyncio.run(go())
    finally:  # closed whatever failed: a leaked socket's warning would fail a later test
        sync.close()
        served.close()
        svc.close()
