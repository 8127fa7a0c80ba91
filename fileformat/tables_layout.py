"""Where a topic's Iceberg table lives and how its snapshots say what they hold: the contract
between the materializer that writes tables (compactor.tables) and the readers that combine a
table with the topic's fresh tail (spark.tables). Pure values and string work, no pyiceberg.

- catalog: pyiceberg's SQL catalog over the metadata database, catalog name `CATALOG_NAME`,
  namespace `NAMESPACE`, table `skiff.table.name` or the topic's name with dots as
  underscores (`table_name_for`); the same tables Apache Iceberg's JDBC catalog reads;
- data and metadata files under the bucket's `TABLES_PREFIX` (`warehouse_for`);
- each snapshot's summary property `OFFSETS_PROPERTY`: JSON {partition: next offset} of
  everything the table holds after that snapshot (`covered_offsets` parses it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

CATALOG_NAME = "skiff"
NAMESPACE = "skiff"
OFFSETS_PROPERTY = "skiff.offsets"
TABLES_PREFIX = "tables/"

_S3_ENV = {
    "s3.endpoint": "AWS_ENDPOINT_URL",
    "s3.access-key-id": "AWS_ACCESS_KEY_ID",
    "s3.secret-access-key": "AWS_SECRET_ACCESS_KEY",
    "s3.session-token": "AWS_SESSION_TOKEN",
    "s3.region": "AWS_REGION",
}


def warehouse_for(bucket_url: str) -> str:
    """The tables' prefix under the bucket URL the agents write to."""
    return bucket_url.rstrip("/") + "/" + TABLES_PREFIX.rstrip("/")


def table_name_for(topic: str, configured: str | None) -> str:
    return configured or topic.replace(".", "_")


def sqlalchemy_url(db_url: str) -> str:
    """The metadata database URL as SQLAlchemy wants it for pyiceberg (psycopg 3 for PostgreSQL)."""
    for prefix in ("postgresql://", "postgres://", "postgresql+psycopg2://"):
        if db_url.startswith(prefix):
            return "postgresql+psycopg://" + db_url[len(prefix) :]
    return db_url


def catalog_properties(
    catalog_uri: str, warehouse: str, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """pyiceberg's SqlCatalog properties: the database, the warehouse, and for s3:// the
    endpoint and credentials from the standard AWS settings."""
    env = os.environ if env is None else env
    props = {"uri": sqlalchemy_url(catalog_uri), "warehouse": warehouse}
    if warehouse.startswith("s3://"):
        props.update({k: env[v] for k, v in _S3_ENV.items() if env.get(v)})
        if "s3.region" not in props and env.get("AWS_DEFAULT_REGION"):
            props["s3.region"] = env["AWS_DEFAULT_REGION"]
    return props


def covered_offsets(summary: Mapping[str, str] | None) -> dict[int, int]:
    """{partition: next offset} a snapshot's summary says the table holds ({} for none)."""
    raw = None if summary is None else summary.get(OFFSETS_PROPERTY)
    return {int(p): int(o) for p, o in json.loads(raw).items()} if raw else {}


def offsets_summary(offsets: Mapping[int, int]) -> dict[str, str]:
    """The summary properties recording `offsets` ({partition: next offset})."""
    return {OFFSETS_PROPERTY: json.dumps({str(p): o for p, o in sorted(offsets.items())})}
