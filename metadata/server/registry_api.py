"""Confluent Schema Registry's REST API, served by the metadata service at its root, so that
the metadata service's URL is a schema registry URL for Confluent's clients (confluent-kafka's
`SchemaRegistryClient` and serializers, the Java serializers, Kafka UIs).

Each route translates Confluent's paths, query parameters and JSON shapes to one `schema_*`
operation of the service (metadata.wire.schema_operations; the rules are metadata.schemas') and
back; errors are Confluent's `{"error_code", "message"}` with its codes (metadata.schemas.errors).
Who may call what, as the declared operations: reads for every role (and `writer`), registering
for `writer`, deletes, `/config` and `/mode` changes for `admin` (metadata.server.auth; Confluent
clients' HTTP basic auth `user:TOKEN` is accepted as the token).

Covered: `/schemas/ids/{id}` (+ `/schema`, `/subjects`, `/versions`), `/schemas/types`,
`/subjects` (list, lookup, delete), `/subjects/{s}/versions` (list, register, get, raw schema,
referencedby, delete), `/compatibility/subjects/{s}/versions[/{v}]`, `/config[/{s}]`,
`/mode[/{s}]`, `/contexts` (the default context only). Not covered: schema contexts beyond the
default, `/subjects/{s}/metadata` (metadata-based lookup), data contracts' rule sets (accepted
in a registration body and ignored), `/exporters`, `/dek-registry`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, PlainTextResponse
from skiff.metadata.schemas.errors import INVALID_VERSION, SCHEMA_NOT_FOUND, RegistryError
from skiff.metadata.schemas.types import (
    AVRO,
    MAX_REFERENCES,
    MAX_SCHEMA_CHARS,
    MAX_VERSION,
    RegisteredSchema,
    SchemaReference,
    SchemaSettings,
    SchemaSpec,
    StoredSchema,
    version_from_text,
)
from skiff.metadata.server.auth import allow
from skiff.metadata.service import MetadataService
from skiff.metadata.wire.roles import ADMIN, WRITER
from skiff.metadata.wire.schema_operations import SCHEMA_READ

MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"
UNPROCESSABLE = 422


def _answer(value: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(value, status_code=status, media_type=MEDIA_TYPE)


def parse_version(text: str) -> int:
    """Confluent's version path segment: `latest`, -1 or 1 .. 2^31-1 (else 42202)."""
    v = version_from_text(text)
    if v is None:
        raise RegistryError(
            INVALID_VERSION,
            f"The specified version '{text}' is not a valid version id. Allowed values are between"
            f' [1, {MAX_VERSION}] and the string "latest"',
        )
    return v


async def _body(request: Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.body() or b"{}")
    except ValueError as e:
        raise RegistryError(UNPROCESSABLE, f"Unprocessable entity: the body is not JSON ({e})") from None
    if not isinstance(body, dict):
        raise RegistryError(UNPROCESSABLE, "Unprocessable entity: the body must be a JSON object")
    return body


def spec_from(body: dict[str, Any]) -> SchemaSpec:
    """The registration/lookup body `{schema, schemaType, references}` as a SchemaSpec."""
    schema = body.get("schema")
    if not isinstance(schema, str) or not schema:
        raise RegistryError(UNPROCESSABLE, "Unprocessable entity: `schema` must be a non-empty string")
    if len(schema) > MAX_SCHEMA_CHARS:
        raise RegistryError(
            UNPROCESSABLE, f"Unprocessable entity: a schema is at most {MAX_SCHEMA_CHARS} characters"
        )
    schema_type = body.get("schemaType") or AVRO
    refs = body.get("references") or []
    if not isinstance(schema_type, str) or not isinstance(refs, list) or len(refs) > MAX_REFERENCES:
        raise RegistryError(UNPROCESSABLE, "Unprocessable entity: malformed `schemaType` or `references`")
    try:
        references = tuple(
            SchemaReference(str(r["name"]), str(r["subject"]), int(r["version"])) for r in refs
        )
    except (KeyError, TypeError, ValueError):
        raise RegistryError(
            UNPROCESSABLE, "Unprocessable entity: each reference needs `name`, `subject` and `version`"
        ) from None
    return SchemaSpec(schema, schema_type.upper(), references)


def _refs_json(refs: tuple[SchemaReference, ...]) -> list[dict[str, Any]]:
    return [{"name": r.name, "subject": r.subject, "version": r.version} for r in refs]


def schema_json(s: StoredSchema | RegisteredSchema) -> dict[str, Any]:
    out: dict[str, Any] = {"schema": s.schema}
    if s.schema_type != AVRO:  # Confluent leaves the default type out
        out["schemaType"] = s.schema_type
    if s.references:
        out["references"] = _refs_json(s.references)
    return out


def registered_json(r: RegisteredSchema) -> dict[str, Any]:
    return {"subject": r.subject, "version": r.version, "id": r.id, **schema_json(r)}


def _config_json(s: SchemaSettings) -> dict[str, Any]:
    out: dict[str, Any] = {"compatibilityLevel": s.compatibility}
    if s.normalize is not None:
        out["normalize"] = s.normalize
    return out


def registry_routers(svc: MetadataService) -> list[APIRouter]:
    """The REST routes, on one router per set of roles (each declared, as every route is)."""
    reads = APIRouter(dependencies=[allow(*SCHEMA_READ)], tags=["schema registry"])
    writes = APIRouter(dependencies=[allow(WRITER)], tags=["schema registry"])
    admin = APIRouter(dependencies=[allow(ADMIN)], tags=["schema registry"])

    def call(name: str) -> Callable[..., Any]:
        method = getattr(svc, name)

        async def run(*args: Any, **kwargs: Any) -> Any:
            return await run_in_threadpool(method, *args, **kwargs)

        return run

    _read_routes(reads, call)
    _settings_routes(reads, call)
    _subject_routes(reads, call)
    _write_routes(writes, call)
    _admin_routes(admin, call)
    _config_routes(admin, call)
    _mode_routes(admin, call)
    return [reads, writes, admin]


def _read_routes(r: APIRouter, call: Callable[[str], Callable[..., Any]]) -> None:
    @r.get("/schemas/ids/{schema_id}")
    async def schema_by_id(schema_id: int, format: str | None = None) -> JSONResponse:  # noqa: A002
        return _answer(schema_json(await call("schema_by_id")(_id(schema_id), format)))

    @r.get("/schemas/ids/{schema_id}/schema")
    async def raw_schema_by_id(schema_id: int) -> PlainTextResponse:
        return PlainTextResponse((await call("schema_by_id")(_id(schema_id))).schema)

    @r.get("/schemas/ids/{schema_id}/subjects")
    async def subjects_by_id(schema_id: int, deleted: bool = False) -> JSONResponse:
        return _answer(await call("schema_subjects_by_id")(_id(schema_id), deleted))

    @r.get("/schemas/ids/{schema_id}/versions")
    async def versions_by_id(schema_id: int, deleted: bool = False) -> JSONResponse:
        pairs = await call("schema_versions_by_id")(_id(schema_id), deleted)
        return _answer([{"subject": s, "version": v} for s, v in pairs])


def _settings_routes(r: APIRouter, call: Callable[[str], Callable[..., Any]]) -> None:
    @r.get("/schemas/types")
    async def schema_types() -> JSONResponse:
        return _answer(["JSON", "PROTOBUF", "AVRO"])

    @r.get("/contexts")
    async def contexts() -> JSONResponse:
        return _answer(["."])

    @r.get("/config")
    async def global_config() -> JSONResponse:
        return _answer(_config_json(await call("schema_settings")(None)))

    @r.get("/config/{subject}")
    async def subject_config(subject: str, defaultToGlobal: bool = False) -> JSONResponse:  # noqa: N803
        return _answer(_config_json(await call("schema_settings")(subject, defaultToGlobal)))

    @r.get("/mode")
    async def global_mode() -> JSONResponse:
        return _answer({"mode": await call("schema_mode")(None)})

    @r.get("/mode/{subject}")
    async def subject_mode(subject: str, defaultToGlobal: bool = False) -> JSONResponse:  # noqa: N803
        return _answer({"mode": await call("schema_mode")(subject, defaultToGlobal)})


def _subject_routes(r: APIRouter, call: Callable[[str], Callable[..., Any]]) -> None:
    @r.get("/subjects")
    async def subjects(
        subjectPrefix: str = "", deleted: bool = False, deletedOnly: bool = False
    ) -> JSONResponse:  # noqa: N803
        return _answer(await call("schema_subjects")(subjectPrefix[:255], deleted, deletedOnly))

    @r.post("/subjects/{subject}")
    async def lookup(
        subject: str, request: Request, normalize: bool = False, deleted: bool = False
    ) -> JSONResponse:
        spec = spec_from(await _body(request))
        return _answer(registered_json(await call("schema_lookup")(subject, spec, normalize, deleted)))

    @r.get("/subjects/{subject}/versions")
    async def versions(subject: str, deleted: bool = False, deletedOnly: bool = False) -> JSONResponse:  # noqa: N803
        return _answer(await call("schema_versions")(subject, deleted, deletedOnly))

    @r.get("/subjects/{subject}/versions/{version}")
    async def version(subject: str, version: str, deleted: bool = False) -> JSONResponse:
        return _answer(
            registered_json(await call("schema_version")(subject, parse_version(version), deleted))
        )

    @r.get("/subjects/{subject}/versions/{version}/schema")
    async def raw_version(subject: str, version: str) -> PlainTextResponse:
        return PlainTextResponse((await call("schema_version")(subject, parse_version(version))).schema)

    @r.get("/subjects/{subject}/versions/{version}/referencedby")
    async def referenced_by(subject: str, version: str) -> JSONResponse:
        return _answer(await call("schema_referenced_by")(subject, parse_version(version)))

    @r.post("/compatibility/subjects/{subject}/versions/{version}")
    async def compatible_with_version(
        subject: str, version: str, request: Request, normalize: bool = False, verbose: bool = False
    ) -> JSONResponse:
        spec = spec_from(await _body(request))
        problems = await call("schema_check")(subject, spec, parse_version(version), normalize)
        return _answer(_compatibility_json(problems, verbose))

    @r.post("/compatibility/subjects/{subject}/versions")
    async def compatible_with_all(
        subject: str, request: Request, normalize: bool = False, verbose: bool = False
    ) -> JSONResponse:
        spec = spec_from(await _body(request))
        problems = await call("schema_check")(subject, spec, None, normalize)
        return _answer(_compatibility_json(problems, verbose))


def _write_routes(r: APIRouter, call: Callable[[str], Callable[..., Any]]) -> None:
    @r.post("/subjects/{subject}/versions")
    async def register(subject: str, request: Request, normalize: bool = False) -> JSONResponse:
        body = await _body(request)
        spec = spec_from(body)
        schema_id = _optional_int(body, "id")
        version = _optional_int(body, "version")
        registered = await call("schema_register")(subject, spec, normalize, schema_id, version)
        return _answer(registered_json(registered))


def _admin_routes(r: APIRouter, call: Callable[[str], Callable[..., Any]]) -> None:
    @r.delete("/subjects/{subject}")
    async def delete_subject(subject: str, permanent: bool = False) -> JSONResponse:
        return _answer(await call("schema_delete_subject")(subject, permanent))

    @r.delete("/subjects/{subject}/versions/{version}")
    async def delete_version(subject: str, version: str, permanent: bool = False) -> JSONResponse:
        return _answer(await call("schema_delete_version")(subject, parse_version(version), permanent))


def _config_routes(r: APIRouter, call: Callable[[str], Callable[..., Any]]) -> None:
    async def put_config(subject: str | None, request: Request) -> JSONResponse:
        body = await _body(request)
        level = body.get("compatibility", body.get("compatibilityLevel"))
        normalize = body.get("normalize")
        if (
            level is not None
            and not isinstance(level, str)
            or normalize is not None
            and not isinstance(normalize, bool)
        ):
            raise RegistryError(
                UNPROCESSABLE, "Unprocessable entity: malformed `compatibility` or `normalize`"
            )
        settings = await call("schema_set_settings")(subject, level, normalize)
        out: dict[str, Any] = {"compatibility": settings.compatibility}
        if settings.normalize is not None:
            out["normalize"] = settings.normalize
        return _answer(out)

    @r.put("/config")
    async def set_global_config(request: Request) -> JSONResponse:
        return await put_config(None, request)

    @r.put("/config/{subject}")
    async def set_subject_config(subject: str, request: Request) -> JSONResponse:
        return await put_config(subject, request)

    @r.delete("/config")
    async def delete_global_config() -> JSONResponse:
        return _answer(_config_json(await call("schema_delete_settings")(None)))

    @r.delete("/config/{subject}")
    async def delete_subject_config(subject: str) -> JSONResponse:
        return _answer(_config_json(await call("schema_delete_settings")(subject)))


def _mode_routes(r: APIRouter, call: Callable[[str], Callable[..., Any]]) -> None:
    async def put_mode(subject: str | None, request: Request, force: bool) -> JSONResponse:
        mode = (await _body(request)).get("mode")
        if not isinstance(mode, str):
            raise RegistryError(UNPROCESSABLE, "Unprocessable entity: `mode` must be a string")
        return _answer({"mode": await call("schema_set_mode")(subject, mode[:32], force)})

    @r.put("/mode")
    async def set_global_mode(request: Request, force: bool = False) -> JSONResponse:
        return await put_mode(None, request, force)

    @r.put("/mode/{subject}")
    async def set_subject_mode(subject: str, request: Request, force: bool = False) -> JSONResponse:
        return await put_mode(subject, request, force)

    @r.delete("/mode/{subject}")
    async def delete_subject_mode(subject: str) -> JSONResponse:
        return _answer({"mode": await call("schema_delete_mode")(subject)})


def _compatibility_json(problems: list[str], verbose: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"is_compatible": not problems}
    if verbose:
        out["messages"] = problems
    return out


def _id(schema_id: int) -> int:
    if not 1 <= schema_id <= MAX_VERSION:
        raise RegistryError(SCHEMA_NOT_FOUND, f"Schema {schema_id} not found")
    return schema_id


def _optional_int(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None or value == -1 and key == "id":
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_VERSION:
        raise RegistryError(
            UNPROCESSABLE, f"Unprocessable entity: `{key}` must be an integer from 1 to {MAX_VERSION}"
        )
    return value
