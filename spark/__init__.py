"""The PySpark data source that reads topics straight from the bucket (batch and streaming).

    from skiff.spark import SkiffDataSource, skiff_session

`SkiffDataSource` and `skiff_session` need the `spark` extra (pyspark, pyarrow, numba):
they are imported on first use, so `import skiff.spark` alone stays cheap. Imported where a
Spark session is already running (a notebook, `pyspark` shell), `import skiff.spark`
registers the "skiff" format on it, so `spark.read.format("skiff")` works at once; elsewhere
`skiff_session()` builds a session with it, and `register(spark)` adds it to any other.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["SkiffDataSource", "register", "skiff_session"]


def __getattr__(name: str) -> Any:
    if name == "SkiffDataSource":
        from skiff.spark.source import SkiffDataSource

        return SkiffDataSource
    if name in ("skiff_session", "register"):
        from skiff.spark import session

        return getattr(session, name)
    raise AttributeError(name)


def _register_on_the_active_session() -> None:
    """Register "skiff" on the session already running, if any (without importing pyspark
    when nothing has: no session can be running then)."""
    sql = sys.modules.get("pyspark.sql")
    if sql is None:
        return
    active = sql.SparkSession.getActiveSession()
    if active is not None:
        from skiff.spark import session

        session.register(active)


_register_on_the_active_session()
