"""The PySpark data source that reads topics straight from the bucket (batch and streaming).

    from spark import SkiffDataSource, skiff_session

`SkiffDataSource` and `skiff_session` need the `spark` extra (pyspark, pyarrow, numba):
they are imported on first use, so `import spark` alone stays cheap.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SkiffDataSource", "register", "skiff_session"]


def __getattr__(name: str) -> Any:
    if name == "SkiffDataSource":
        from spark.source import SkiffDataSource

        return SkiffDataSource
    if name in ("skiff_session", "register"):
        from spark import session

        return getattr(session, name)
    raise AttributeError(name)
