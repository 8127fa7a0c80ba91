"""A read-only Apache Iceberg REST catalog over the topics' tables, at `/iceberg` (reader role).

The materializer (compactor.tables) keeps each table in pyiceberg's SQL catalog inside the
metadata database (tables `iceberg_tables`, `iceberg_namespace_properties`; catalog name
`skiff`, fileformat.tables_layout). Engines that attach SQL/JDBC catalogs read those rows
directly; engines that speak only the REST catalog protocol (pyiceberg's `RestCatalog`,
DuckDB's `ATTACH ... (TYPE iceberg)`, Snowflake's catalog integration, Trino's and Spark's
`rest` catalogs) attach here: `uri = <metadata URL>/iceberg`, the token as a bearer token.

Served (the Iceberg REST OpenAPI spec's read side): `GET /v1/config` (with the endpoints this
server implements, so clients never try the others), `GET /v1/namespaces`,
`GET|HEAD /v1/namespaces/{ns}`, `GET /v1/namespaces/{ns}/tables`,
`GET|HEAD /v1/namespaces/{ns}/tables/{table}`: the table's current metadata location from the
catalog row and its metadata JSON read from the bucket (metadata files under the bucket's
`tables/` prefix only; gzip-compressed `.gz.metadata.json` too; at most
`MAX_METADATA_BYTES`). Engines then read the data files from the bucket with their own
credentials (no credential vending). Writes (create, commit, drop) are not served: tables
change only through the materializer. Errors use the spec's body,
`{"error": {"message", "type", "code"}}`.
"""

from __future__ import annotations

import gzip
import json
from typing import Any
from urllib.parse import unquote

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from skiff.fileformat.objectstore.errors import ObjectNotFound
from skiff.fileformat.tables_layout import CATALOG_NAME, TABLES_PREFIX
from skiff.metadata.db import read_tx
from skiff.metadata.server.auth import allow
from skiff.metadata.server.bucket import LazyBucket
from skiff.metadata.wire.roles import READER
from sqlalchemy import text
from sqlalchemy.exc import OperationalError, ProgrammingError

PREFIX = "/iceberg"
MAX_METADATA_BYTES = 64 * 1024 * 1024
NAMESPACE_SEPARATOR = "\x1f"
ENDPOINTS = [
    "GET /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
]


class IcebergError(Exception):
    def __init__(self, code: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.code, self.kind, self.message = code, kind, message

    def response(self) -> JSONResponse:
        body = {"error": {"message": self.message, "type": self.kind, "code": self.code}}
        return JSONResponse(body, status_code=self.code)


class CatalogRows:
    """pyiceberg's SQL catalog rows of catalog `skiff` (none until a materializer ran)."""

    def __init__(self, bucket: LazyBucket) -> None:
        self.bucket = bucket

    def _rows(self, sql: str, **params: Any) -> list[Any]:
        try:
            with read_tx(self.bucket.service.engine) as conn:
                return list(conn.execute(text(sql), {"catalog": CATALOG_NAME, **params}))
        except (OperationalError, ProgrammingError):  # pyiceberg has not created its tables yet
            return []

    def namespaces(self) -> list[str]:
        tables = self._rows(
            "SELECT DISTINCT table_namespace FROM iceberg_tables WHERE catalog_name = :catalog"
        )
        props = self._rows(
            "SELECT DISTINCT namespace FROM iceberg_namespace_properties WHERE catalog_name = :catalog"
        )
        return sorted({r[0] for r in tables} | {r[0] for r in props})

    def tables(self, namespace: str) -> list[str]:
        rows = self._rows(
            "SELECT table_name FROM iceberg_tables WHERE catalog_name = :catalog AND table_namespace = :ns"
            " ORDER BY table_name",
            ns=namespace,
        )
        return [r[0] for r in rows]

    def metadata_location(self, namespace: str, table: str) -> str:
        rows = self._rows(
            "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = :catalog"
            " AND table_namespace = :ns AND table_name = :t",
            ns=namespace,
            t=table,
        )
        if not rows or not rows[0][0]:
            raise IcebergError(404, "NoSuchTableException", f"Table does not exist: {namespace}.{table}")
        return str(rows[0][0])

    def metadata(self, location: str) -> dict[str, Any]:
        """The table metadata JSON at `location`, which must lie under the bucket's tables/."""
        base = self.bucket.url().rstrip("/") + "/"
        if not location.startswith(base + TABLES_PREFIX):
            raise IcebergError(500, "ServiceFailureException", "the table's metadata is outside this bucket")
        key = location[len(base) :]
        store = self.bucket.store()
        try:
            if store.head(key).size > MAX_METADATA_BYTES:
                raise IcebergError(500, "ServiceFailureException", "the table's metadata file is too large")
            raw = store.get(key)
        except ObjectNotFound:
            raise IcebergError(404, "NoSuchTableException", "the table's metadata file is gone") from None
        if key.endswith(".gz.metadata.json"):
            raw = gzip.decompress(raw)
        return dict(json.loads(raw))


async def _answer(fn: Any) -> Response:
    try:
        return JSONResponse(await run_in_threadpool(fn))
    except IcebergError as e:
        return e.response()


def _for_method(got: Response, request: Request) -> Response:
    """HEAD answers 204 (exists) or the error's status, with no body."""
    if request.method != "HEAD":
        return got
    return Response(status_code=204 if got.status_code == 200 else got.status_code)


def _namespace_of(raw: str) -> str:
    parts = unquote(raw).split(NAMESPACE_SEPARATOR)
    if len(parts) != 1 or not parts[0]:  # the tables live in one single-level namespace
        raise IcebergError(404, "NoSuchNamespaceException", f"Namespace does not exist: {raw}")
    return parts[0]


def _known(rows: CatalogRows, raw: str) -> str:
    ns = _namespace_of(raw)
    if ns not in rows.namespaces():
        raise IcebergError(404, "NoSuchNamespaceException", f"Namespace does not exist: {ns}")
    return ns


def iceberg_router(bucket: LazyBucket) -> APIRouter:
    rows = CatalogRows(bucket)
    r = APIRouter(prefix=PREFIX, dependencies=[allow(READER)], tags=["iceberg"])

    @r.get("/v1/config")
    async def config() -> Response:
        return JSONResponse({"defaults": {}, "overrides": {}, "endpoints": ENDPOINTS})

    @r.get("/v1/namespaces")
    async def namespaces() -> Response:
        return await _answer(lambda: {"namespaces": [[ns] for ns in rows.namespaces()]})

    async def namespace(namespace: str, request: Request) -> Response:
        got = await _answer(lambda: {"namespace": [_known(rows, namespace)], "properties": {}})
        return _for_method(got, request)

    r.add_api_route("/v1/namespaces/{namespace}", namespace, methods=["GET"], name="load_namespace")
    r.add_api_route("/v1/namespaces/{namespace}", namespace, methods=["HEAD"], name="namespace_exists")

    @r.get("/v1/namespaces/{namespace}/tables")
    async def tables(namespace: str) -> Response:
        def load() -> dict[str, Any]:
            ns = _known(rows, namespace)
            return {"identifiers": [{"namespace": [ns], "name": t} for t in rows.tables(ns)]}

        return await _answer(load)

    async def table(namespace: str, table: str, request: Request) -> Response:
        def load() -> dict[str, Any]:
            location = rows.metadata_location(_namespace_of(namespace), unquote(table))
            if request.method == "HEAD":
                return {}
            return {"metadata-location": location, "metadata": rows.metadata(location), "config": {}}

        return _for_method(await _answer(load), request)

    path = "/v1/namespaces/{namespace}/tables/{table}"
    r.add_api_route(path, table, methods=["GET"], name="load_table")
    r.add_api_route(path, table, methods=["HEAD"], name="table_exists")

    return r
