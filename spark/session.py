"""Getting a SparkSession with the `skiff` format registered.

`skiff_session()` builds (or reuses) a session and registers `SkiffDataSource`;
`register(spark)` registers it on a session you already have. Python workers use this
interpreter (`PYSPARK_PYTHON`, unless already set). Arrow batches cross from
the Python workers to the JVM, so the session keeps Spark's defaults for Arrow.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from skiff.spark.source import SkiffDataSource


def register(spark: Any) -> Any:
    """Register the `skiff` format on `spark` and return it."""
    spark.dataSource.register(SkiffDataSource)
    return spark


def skiff_session(
    app_name: str = "skiff", master: str | None = "local[*]", conf: dict[str, str] | None = None
) -> Any:
    """A SparkSession (built, or the active one) with the `skiff` format registered.

    `master` None leaves it to spark-submit; `conf` adds Spark settings."""
    from pyspark.sql import SparkSession

    # Python workers run the reader: by default Spark starts them with `python3` from PATH,
    # which may lack pyarrow and this package; use this interpreter unless told otherwise.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    return register(builder.getOrCreate())
