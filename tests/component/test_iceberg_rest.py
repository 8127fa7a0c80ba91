"""The metadata service's read-only Iceberg REST catalog (`/iceberg`,
metadata.server.iceberg_rest): pyiceberg's `RestCatalog` lists and loads the tables that the
SQL catalog in the metadata database holds (as the materializer writes them) and reads the
same rows; the reader token is needed; unknown tables and namespaces are the spec's errors;
writes are not served."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
from skiff.fileformat.tables_layout import CATALOG_NAME, NAMESPACE, catalog_properties, warehouse_for
from skiff.metadata.server.app import create_app
from skiff.metadata.server.auth import TokenTable
from skiff.metadata.service import MetadataService

from tests.support.served_app import Served

READER = "r" * 24
ROWS = pa.table({"partition": pa.array([0, 1, 0], pa.int32()), "offset": pa.array([0, 0, 1], pa.int64())})


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(metadata URL, SQLAlchemy URL of its database) with one table `skiff.orders`."""
    from pyiceberg.catalog.sql import SqlCatalog

    db_url = f"sqlite:///{tmp_path / 'm.db'}"
    bucket = f"file://{tmp_path / 'bucket'}"
    (tmp_path / "bucket").mkdir()
    svc = MetadataService.from_url(db_url, bucket_url=bucket)
    catalog = SqlCatalog(CATALOG_NAME, **catalog_properties(db_url, warehouse_for(bucket)))
    catalog.create_namespace_if_not_exists(NAMESPACE)
    catalog.create_table((NAMESPACE, "orders"), schema=ROWS.schema).append(ROWS)
    catalog.engine.dispose()
    app = Served(
        create_app(svc, tokens=TokenTable.parse(f"reader:{READER}", "test"), lag_sample_interval_ms=0)
    )
    try:
        yield app.url(), db_url
    finally:
        app.close()
        svc.close()


def test_pyiceberg_reads_the_tables_through_the_rest_catalog(served: tuple[str, str]) -> None:
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    url, _ = served
    rest = RestCatalog("skiff", uri=f"{url}/iceberg", token=READER)
    assert rest.list_namespaces() == [("skiff",)]
    assert rest.list_tables("skiff") == [("skiff", "orders")]
    assert rest.table_exists("skiff.orders") and not rest.table_exists("skiff.nope")
    table = rest.load_table("skiff.orders")
    assert table.scan().to_arrow().sort_by(
        [("partition", "ascending"), ("offset", "ascending")]
    ).to_pylist() == [
        {"partition": 0, "offset": 0},
        {"partition": 0, "offset": 1},
        {"partition": 1, "offset": 0},
    ]
    with pytest.raises(NoSuchTableError):
        rest.load_table("skiff.nope")
    with pytest.raises(NoSuchNamespaceError):
        rest.list_tables("other")


def test_duckdb_attaches_the_rest_catalog(served: tuple[str, str]) -> None:
    """DuckDB's iceberg extension (and the httpfs and avro ones it needs, from their PyPI
    packages: no download) attaches the catalog with the reader token and reads the table."""
    import duckdb
    import duckdb_extension_avro
    import duckdb_extension_httpfs
    import duckdb_extension_iceberg

    url, _ = served
    con = duckdb.connect(
        config={"allow_unsigned_extensions": "true", "autoinstall_known_extensions": "false"}
    )
    for package, name in (
        (duckdb_extension_httpfs, "httpfs"),
        (duckdb_extension_avro, "avro"),
        (duckdb_extension_iceberg, "iceberg"),
    ):
        assert package.__file__ is not None
        (ext,) = Path(package.__file__).parent.glob(f"extensions/*/{name}.duckdb_extension")
        con.execute(f"LOAD '{ext}'")
    con.execute(f"CREATE SECRET reader (TYPE iceberg, TOKEN '{READER}')")
    con.execute(f"ATTACH 'skiff' AS lake (TYPE iceberg, SECRET reader, ENDPOINT '{url}/iceberg')")
    assert con.execute("SELECT * FROM lake.skiff.orders ORDER BY 1, 2").fetchall() == [(0, 0), (0, 1), (1, 0)]


def test_the_catalog_needs_a_token_and_serves_no_writes(served: tuple[str, str]) -> None:
    url, _ = served
    with httpx.Client(base_url=f"{url}/iceberg") as http:
        assert http.get("/v1/config").status_code == 401
        auth = {"authorization": f"Bearer {READER}"}
        config = http.get("/v1/config", headers=auth).json()
        assert all(e.split()[0] in ("GET", "HEAD") for e in config["endpoints"])
        gone = http.get("/v1/namespaces/skiff/tables/nope", headers=auth)
        assert gone.status_code == 404 and gone.json()["error"]["type"] == "NoSuchTableException"
        write = http.post("/v1/namespaces/skiff/tables", headers=auth, json={"name": "x"})
        assert write.status_code == 405
