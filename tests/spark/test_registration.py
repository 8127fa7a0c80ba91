"""`import skiff.spark` where a Spark session is already running (a notebook, the pyspark
shell) registers the "skiff" format on that session."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import skiff.spark
from pyspark.sql.datasource import DataSourceRegistration


def test_importing_the_package_registers_the_format_on_the_running_session(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    registered: list[str] = []
    monkeypatch.setattr(
        DataSourceRegistration, "register", lambda self, source: registered.append(source.name())
    )
    assert type(spark).getActiveSession() is not None
    importlib.reload(skiff.spark)  # what a first `import skiff.spark` runs
    assert registered == ["skiff"]
