"""How `read_topic_table` reaches a table whose warehouse is on S3, at unit level (hadoop-aws,
Spark's s3a filesystem, cannot be had on this machine, so no Spark session reads s3a here;
tests/component/test_tables_s3.py materializes and reads such a table with pyiceberg):

- Iceberg's `s3://bucket/key` data-file paths become `s3a://bucket/key`, others unchanged;
- the s3a settings come from the same standard AWS variables as the materializer's S3
  FileIO (fileformat.tables_layout.catalog_properties), so both reach the same bucket.
"""

from __future__ import annotations

from skiff.fileformat.tables_layout import catalog_properties, warehouse_for
from skiff.spark.tables import s3a_settings, spark_path

AWS = {
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
    "AWS_ACCESS_KEY_ID": "ak",
    "AWS_SECRET_ACCESS_KEY": "sk",
    "AWS_REGION": "eu-west-1",
}


def test_s3_paths_become_s3a_and_others_stay() -> None:
    key = "data/tables/skiff/orders/data/00000-0-a.parquet"
    assert spark_path(f"s3://bucket/{key}") == f"s3a://bucket/{key}"
    assert (
        spark_path("file:///tmp/b/tables/skiff/t/data/x.parquet")
        == "file:///tmp/b/tables/skiff/t/data/x.parquet"
    )
    assert spark_path(f"s3a://bucket/{key}") == f"s3a://bucket/{key}"
    assert spark_path("gs://bucket/x.parquet") == "gs://bucket/x.parquet"


def test_s3a_settings_match_the_materializers_file_io() -> None:
    conf = s3a_settings(AWS)
    props = catalog_properties("sqlite:///m.db", warehouse_for("s3://bucket/data"), AWS)
    assert conf["spark.hadoop.fs.s3a.endpoint"] == props["s3.endpoint"] == "http://127.0.0.1:9000"
    assert conf["spark.hadoop.fs.s3a.access.key"] == props["s3.access-key-id"] == "ak"
    assert conf["spark.hadoop.fs.s3a.secret.key"] == props["s3.secret-access-key"] == "sk"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == props["s3.region"] == "eu-west-1"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"  # bucket in the path, not the host
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"  # an http:// endpoint
    assert "spark.hadoop.fs.s3a.aws.credentials.provider" not in conf  # static keys: s3a's default


def test_s3a_settings_session_token_and_defaults() -> None:
    temporary = s3a_settings({**AWS, "AWS_SESSION_TOKEN": "tok", "AWS_ENDPOINT_URL": "https://s3.example"})
    assert temporary["spark.hadoop.fs.s3a.session.token"] == "tok"
    assert temporary["spark.hadoop.fs.s3a.aws.credentials.provider"].endswith(
        "TemporaryAWSCredentialsProvider"
    )
    assert "spark.hadoop.fs.s3a.connection.ssl.enabled" not in temporary  # https stays on
    # no settings at all (real AWS, an instance role): s3a's own endpoint and provider chain
    assert s3a_settings({}) == {}
    assert s3a_settings({"AWS_DEFAULT_REGION": "us-east-2"}) == {
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-2"
    }
