"""A local session binds its driver to loopback unless told otherwise (issue 25).

The shared session of the Spark tests is built by `skiff_session` without a driver address
(tests/spark/conftest.py), so its conf shows the default; `driver_conf` is checked
directly for the cases that must not get it (a user's own address, the environment's, a
cluster master)."""

from __future__ import annotations

import pytest
from skiff.spark.session import driver_conf


def test_shared_local_session_binds_the_driver_to_loopback(spark) -> None:  # type: ignore[no-untyped-def]
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.master").startswith("local")
    assert conf.get("spark.driver.host") == "127.0.0.1"
    assert conf.get("spark.driver.bindAddress") == "127.0.0.1"


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]"])
def test_local_masters_default_to_loopback(master: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    monkeypatch.delenv("SPARK_LOCAL_HOSTNAME", raising=False)
    assert driver_conf(master, {"spark.ui.enabled": "false"}) == {
        "spark.ui.enabled": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
    }


def test_a_configured_address_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    monkeypatch.delenv("SPARK_LOCAL_HOSTNAME", raising=False)
    conf = driver_conf("local[2]", {"spark.driver.host": "10.0.0.5"})
    assert conf == {"spark.driver.host": "10.0.0.5", "spark.driver.bindAddress": "127.0.0.1"}
    conf = driver_conf("local[2]", {"spark.driver.bindAddress": "0.0.0.0"})
    assert conf == {"spark.driver.bindAddress": "0.0.0.0", "spark.driver.host": "127.0.0.1"}


def test_the_environment_address_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_LOCAL_IP", "10.0.0.5")
    assert driver_conf("local[2]", None) == {}


@pytest.mark.parametrize("master", [None, "spark://head:7077", "yarn", "k8s://https://api:6443"])
def test_cluster_masters_keep_sparks_default(master: str | None) -> None:
    assert driver_conf(master, {"a": "b"}) == {"a": "b"}
