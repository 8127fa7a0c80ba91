"""The schema registry (metadata.schemas) through Confluent's own `SchemaRegistryClient`, over real
HTTP against the metadata service's app, on SQLite and PostgreSQL: ids global and stable,
versions, lookups, compatibility refusals with Confluent's codes, soft then hard deletes,
config and modes (READONLY, IMPORT keeping ids), references; the roles (reader reads, writer
registers, admin deletes; basic auth as Confluent clients send it); two replicas registering
at once over one PostgreSQL never hand out one id or version twice."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from skiff.metadata.server.app import create_app
from skiff.metadata.server.auth import TokenTable
from skiff.metadata.service import MetadataService

from tests.support.served_app import Served

USER_V1 = '{"type":"record","name":"User","fields":[{"name":"name","type":"string"}]}'
USER_V2 = (
    '{"type":"record","name":"User","fields":[{"name":"name","type":"string"},'
    '{"name":"age","type":"int","default":0}]}'
)
# A new field without a default: a reader of this schema cannot read V1/V2 data.
USER_BAD = '{"type":"record","name":"User","fields":[{"name":"name","type":"string"},{"name":"email","type":"string"}]}'


def _code(call: object) -> tuple[int, int]:
    with pytest.raises(SchemaRegistryError) as e:
        call()  # type: ignore[operator]
    return e.value.http_status_code, e.value.error_code


@pytest.fixture
def registry(db_url: str) -> Iterator[tuple[SchemaRegistryClient, MetadataService, str]]:
    svc = MetadataService.from_url(db_url)
    served = Served(create_app(svc))
    sr = SchemaRegistryClient({"url": served.url()})
    try:
        yield sr, svc, served.url()
    finally:
        sr.close()
        served.close()
        svc.close()


def test_ids_versions_and_lookups(registry: tuple[SchemaRegistryClient, MetadataService, str]) -> None:
    sr, _, url = registry
    id1 = sr.register_schema("users-value", Schema(USER_V1, "AVRO"))
    # the same schema (other whitespace) under another subject keeps its global id
    assert sr.register_schema("audit-value", Schema(USER_V1.replace(",", ", "), "AVRO")) == id1
    assert sr.register_schema("users-value", Schema(USER_V1, "AVRO")) == id1  # idempotent: no new version
    id2 = sr.register_schema("users-value", Schema(USER_V2, "AVRO"))
    assert id2 != id1
    assert sr.get_subjects() == ["audit-value", "users-value"]
    assert sr.get_versions("users-value") == [1, 2]
    latest = sr.get_latest_version("users-value")
    assert (latest.version, latest.schema_id, latest.subject) == (2, id2, "users-value")
    assert sr.get_version("users-value", 1).schema_id == id1
    found = sr.lookup_schema("users-value", Schema(USER_V2, "AVRO"))
    assert (found.version, found.schema_id) == (2, id2)
    assert sr.get_schema(id1).schema_str == USER_V1
    assert sorted(sr.get_subjects_by_schema_id(id1)) == ["audit-value", "users-value"]
    assert httpx.get(f"{url}/schemas/ids/{id2}/versions").json() == [{"subject": "users-value", "version": 2}]
    assert httpx.get(f"{url}/subjects/users-value/versions/latest/schema").text == USER_V2
    assert httpx.get(f"{url}/subjects?subjectPrefix=aud").json() == ["audit-value"]
    assert set(httpx.get(f"{url}/schemas/types").json()) == {"AVRO", "JSON", "PROTOBUF"}
    # Confluent's not-found codes
    assert _code(lambda: sr.get_latest_version("nope")) == (404, 40401)
    assert _code(lambda: sr.get_version("users-value", 9)) == (404, 40402)
    assert _code(lambda: sr.get_schema(999)) == (404, 40403)
    assert _code(lambda: sr.lookup_schema("audit-value", Schema(USER_V2, "AVRO"))) == (404, 40403)
    bad_version = httpx.get(f"{url}/subjects/users-value/versions/zero")
    assert (bad_version.status_code, bad_version.json()["error_code"]) == (422, 42202)
    assert _code(lambda: sr.register_schema("x-value", Schema("{not json", "AVRO"))) == (422, 42201)
    assert _code(lambda: sr.register_schema("x-value", Schema('{"type":"nosuch"}', "AVRO"))) == (422, 42201)


def test_compatibility_levels(registry: tuple[SchemaRegistryClient, MetadataService, str]) -> None:
    sr, _, url = registry
    sr.register_schema("users-value", Schema(USER_V1, "AVRO"))
    assert sr.get_compatibility() == "BACKWARD"
    status, code = _code(lambda: sr.register_schema("users-value", Schema(USER_BAD, "AVRO")))
    assert (status, code) == (409, 409)
    assert sr.test_compatibility("users-value", Schema(USER_BAD, "AVRO")) is False
    assert sr.test_compatibility("users-value", Schema(USER_V2, "AVRO")) is True
    verbose = httpx.post(
        f"{url}/compatibility/subjects/users-value/versions/latest?verbose=true",
        json={"schema": USER_BAD},
    ).json()
    assert verbose["is_compatible"] is False
    # Confluent's verbose details: the error, the failing version and its schema, the level
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in verbose["messages"][0]
    assert verbose["messages"][1:] == [
        "{oldSchemaVersion: 1}",
        f"{{oldSchema: '{USER_V1}'}}",
        "{validateFields: 'false', compatibility: 'BACKWARD'}",
    ]
    # per-subject level wins over the global one; 40408 when a subject has none of its own
    assert _code(lambda: sr.get_compatibility("users-value")) == (404, 40408)
    sr.set_compatibility("users-value", "NONE")
    assert sr.get_compatibility("users-value") == "NONE"
    assert sr.register_schema("users-value", Schema(USER_BAD, "AVRO")) > 0
    assert _code(lambda: sr.set_compatibility(level="SIDEWAYS")) == (422, 42203)
    sr.delete_config("users-value")
    assert (
        httpx.get(f"{url}/config/users-value?defaultToGlobal=true").json()["compatibilityLevel"] == "BACKWARD"
    )


def test_deletes_soft_then_hard(registry: tuple[SchemaRegistryClient, MetadataService, str]) -> None:
    sr, svc, url = registry
    id1 = sr.register_schema("users-value", Schema(USER_V1, "AVRO"))
    id2 = sr.register_schema("users-value", Schema(USER_V2, "AVRO"))
    assert _code(lambda: sr.delete_version("users-value", 1, permanent=True)) == (404, 40407)
    assert sr.delete_version("users-value", 1) == 1
    assert _code(lambda: sr.delete_version("users-value", 1)) == (404, 40406)
    assert sr.get_versions("users-value") == [2]
    # validation admits the live versions' ids; readers still decode data of soft-deleted ones
    assert svc.schema_subject_ids("users-value") == [id2]
    assert svc.schema_subject_ids("users-value", deleted=True) == sorted([id1, id2])
    assert httpx.get(f"{url}/subjects/users-value/versions?deleted=true").json() == [1, 2]
    assert sr.get_schema(id1).schema_str == USER_V1  # a soft-deleted version still holds its id
    assert _code(lambda: sr.delete_subject("users-value", permanent=True)) == (404, 40405)
    assert sr.delete_subject("users-value") == [2]
    assert _code(lambda: sr.delete_subject("users-value")) == (404, 40404)
    assert sr.get_subjects() == []
    assert httpx.get(f"{url}/subjects?deleted=true").json() == ["users-value"]
    assert sr.delete_subject("users-value", permanent=True) == [1, 2]
    gone = httpx.get(f"{url}/schemas/ids/{id1}")  # (the client caches ids: ask the service)
    assert (gone.status_code, gone.json()["error_code"]) == (404, 40403)  # no version holds it any more
    # ids are never reused: the same schema comes back with its old id, a new one gets a new id
    assert sr.register_schema("users-value", Schema(USER_V1, "AVRO")) == id1
    assert sr.get_versions("users-value") == [1]


def test_modes_and_import_keeps_ids(registry: tuple[SchemaRegistryClient, MetadataService, str]) -> None:
    sr, _, url = registry
    sr.register_schema("users-value", Schema(USER_V1, "AVRO"))
    assert httpx.get(f"{url}/mode").json() == {"mode": "READWRITE"}
    sr.update_mode("users-value", "READONLY")
    assert _code(lambda: sr.register_schema("users-value", Schema(USER_V2, "AVRO"))) == (422, 42205)
    assert _code(lambda: sr.delete_subject("users-value")) == (422, 42205)
    assert _code(lambda: sr.update_mode("users-value", "SOMETIMES")) == (422, 42204)
    sr.delete_mode("users-value")
    # IMPORT: a migration from another registry brings its ids and versions
    assert _code(lambda: sr.update_global_mode("IMPORT")) == (422, 42205)  # not empty: needs force
    assert httpx.put(f"{url}/mode?force=true", json={"mode": "IMPORT"}).json() == {"mode": "IMPORT"}
    imported = httpx.post(
        f"{url}/subjects/orders-value/versions", json={"schema": USER_V2, "id": 1000, "version": 7}
    ).json()
    assert (imported["id"], imported["version"]) == (1000, 7)
    clash = httpx.post(f"{url}/subjects/x-value/versions", json={"schema": USER_BAD, "id": 1000})
    assert clash.json()["error_code"] == 42207
    httpx.put(f"{url}/mode", json={"mode": "READWRITE"})
    assert sr.get_schema(1000).schema_str == USER_V2
    explicit = httpx.post(f"{url}/subjects/x-value/versions", json={"schema": USER_BAD, "id": 5})
    assert explicit.json()["error_code"] == 42205  # ids are given only in IMPORT mode
    assert sr.register_schema("fresh-value", Schema(USER_BAD, "AVRO")) == 1001  # past the imported id


def test_references(registry: tuple[SchemaRegistryClient, MetadataService, str]) -> None:
    sr, _, url = registry
    address = (
        '{"type":"record","name":"Address","namespace":"com.acme","fields":[{"name":"city","type":"string"}]}'
    )
    sr.register_schema("address", Schema(address, "AVRO"))
    person = (
        '{"type":"record","name":"Person","namespace":"com.acme","fields":'
        '[{"name":"name","type":"string"},{"name":"home","type":"com.acme.Address"}]}'
    )
    ref = SchemaReference("com.acme.Address", "address", 1)
    pid = sr.register_schema("people-value", Schema(person, "AVRO", [ref]))
    got = sr.get_schema(pid)
    assert [(r.name, r.subject, r.version) for r in got.references] == [("com.acme.Address", "address", 1)]
    assert httpx.get(f"{url}/subjects/address/versions/1/referencedby").json() == [pid]
    assert _code(lambda: sr.delete_subject("address")) == (422, 42206)  # still referenced
    missing = SchemaReference("com.acme.Address", "address", 5)
    assert _code(lambda: sr.register_schema("other-value", Schema(person, "AVRO", [missing]))) == (422, 42201)


TOKENS = {role: f"{role}-token-{'y' * 24}" for role in ("reader", "writer", "admin", "agent")}


def test_roles_and_basic_auth(tmp_path: Path) -> None:
    svc = MetadataService.from_url(f"sqlite:///{tmp_path}/m.db")
    tokens = TokenTable.parse("\n".join(f"{r}:{t}" for r, t in TOKENS.items()), "test")
    served = Served(create_app(svc, tokens=tokens))
    clients: list[SchemaRegistryClient] = []

    def client(role: str | None) -> SchemaRegistryClient:
        conf = {"url": served.url()}
        if role is not None:
            conf["basic.auth.user.info"] = f"{role}:{TOKENS[role]}"
        clients.append(SchemaRegistryClient(conf))
        return clients[-1]

    try:
        assert _code(lambda: client(None).get_subjects()) == (401, 58)
        assert _code(lambda: client("reader").register_schema("t-value", Schema(USER_V1, "AVRO")))[0] == 403
        sid = client("writer").register_schema("t-value", Schema(USER_V1, "AVRO"))
        assert client("reader").get_schema(sid).schema_str == USER_V1
        assert client("agent").get_latest_version("t-value").schema_id == sid
        assert _code(lambda: client("writer").delete_subject("t-value"))[0] == 403
        assert _code(lambda: client("writer").set_compatibility(level="NONE"))[0] == 403
        assert client("admin").delete_subject("t-value") == [1]
        bearer = httpx.get(
            f"{served.url()}/subjects?deleted=true", headers={"authorization": f"Bearer {TOKENS['reader']}"}
        )
        assert bearer.json() == ["t-value"]
    finally:
        for c in clients:
            c.close()
        served.close()
        svc.close()


@pytest.mark.postgres
def test_two_replicas_register_at_once(pg_url: str) -> None:
    replicas = [MetadataService.from_url(pg_url), MetadataService.from_url(pg_url, migrate=False)]
    results: list[tuple[str, int, int]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def register(svc: MetadataService, worker: int) -> None:
        from skiff.metadata.schemas.types import SchemaSpec

        try:
            for i in range(15):
                text = USER_V1.replace("User", f"U{worker}x{i}")
                subject = f"s{i % 3}-value"
                svc.schema_set_settings(subject, "NONE") if i < 3 else None
                r = svc.schema_register(subject, SchemaSpec(text))
                with lock:
                    results.append((subject, r.version, r.id))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=register, args=(replicas[w % 2], w)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors, errors
        assert len({r[2] for r in results}) == 60  # every schema its own id
        assert len({(s, v) for s, v, _ in results}) == 60  # no version handed out twice
        for subject in ("s0-value", "s1-value", "s2-value"):
            assert replicas[0].schema_versions(subject) == list(range(1, 21))
    finally:
        for svc in replicas:
            svc.close()
