"""Getting a SparkSession with the `skiff` format registered.

`skiff_session()` builds (or reuses) a session and registers `SkiffDataSource`;
`register(spark)` registers it on a session you already have. Both turn on
`spark.sql.python.filterPushdown.enabled`, so batch reads get the query's filters
(`spark.pushdown`). Python workers use this
interpreter (`PYSPARK_PYTHON`, unless already set). Arrow batches cross from
the Python workers to the JVM, so the session keeps Spark's defaults for Arrow.

A local session (master `local`, `local[N]`, `local[*]`, ...) binds its driver to
loopback: `spark.driver.host` and `spark.driver.bindAddress` are 127.0.0.1 unless the
caller set them (`conf`, or `SPARK_LOCAL_IP`/`SPARK_LOCAL_HOSTNAME`, which Spark reads for
the same two settings), and `SPARK_LOCAL_IP` is set to 127.0.0.1 for the JVM when neither
variable is. Spark's own default is the machine's first non-loopback interface,
which a laptop behind a VPN or a locked-down host does not expect, and a local session's
executors live in the driver's JVM, so nothing needs to reach it from outside. A session
for a cluster (`master` None: spark-submit decides, or a cluster URL) keeps Spark's
default: executors on other machines must reach the driver.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from skiff.spark.source import SkiffDataSource

LOOPBACK = "127.0.0.1"
DRIVER_ADDRESS_KEYS = ("spark.driver.host", "spark.driver.bindAddress")
# Environment variables Spark derives the driver's address from when the keys are unset.
DRIVER_ADDRESS_ENV = ("SPARK_LOCAL_IP", "SPARK_LOCAL_HOSTNAME")
# Spark 4.x hands a Python data source the query's filters only with this on (default off).
FILTER_PUSHDOWN_KEY = "spark.sql.python.filterPushdown.enabled"


def register(spark: Any) -> Any:
    """Register the `skiff` format on `spark`, turn on Python data source filter pushdown
    (a runtime SQL setting; batch reads prune their plan with it), and return `spark`."""
    spark.conf.set(FILTER_PUSHDOWN_KEY, "true")
    spark.dataSource.register(SkiffDataSource)
    return spark


def skiff_session(
    app_name: str = "skiff", master: str | None = "local[*]", conf: dict[str, str] | None = None
) -> Any:
    """A SparkSession (built, or the active one) with the `skiff` format registered.

    `master` None leaves it to spark-submit; `conf` adds Spark settings. A local master
    binds the driver to 127.0.0.1 unless `conf` or the environment says otherwise
    (module docstring)."""
    from pyspark.sql import SparkSession

    # Python workers run the reader: by default Spark starts them with `python3` from PATH,
    # which may lack pyarrow and this package; use this interpreter unless told otherwise.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = driver_conf(master, conf)
    if _is_local(master) and not any(os.environ.get(name) for name in DRIVER_ADDRESS_ENV):
        # Before the JVM starts: Spark then never looks up the machine's other interfaces
        # (without it, it logs one it would use, and its block manager may advertise it).
        os.environ["SPARK_LOCAL_IP"] = LOOPBACK
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    return register(builder.getOrCreate())


def driver_conf(master: str | None, conf: dict[str, str] | None) -> dict[str, str]:
    """`conf` plus the loopback driver address for a local `master` (the keys the caller
    did not set, and none if the environment names an address)."""
    settings = dict(conf or {})
    if not _is_local(master) or any(os.environ.get(name) for name in DRIVER_ADDRESS_ENV):
        return settings
    for key in DRIVER_ADDRESS_KEYS:
        settings.setdefault(key, LOOPBACK)
    return settings


def _is_local(master: str | None) -> bool:
    return master is not None and (master == "local" or master.startswith("local["))
