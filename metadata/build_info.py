"""Which Skiff this is: the installed distribution's version (`skiff-broker` in
pyproject.toml), or `unknown` when the code runs from a checkout that was never installed.

Agents send it with every heartbeat (`AgentInfo.version`), so `skiff agents list` and the
console show which agents run which version during a rolling upgrade; agents and the
metadata service export it as `skiff_build_info{version}`; `skiff --version` prints it."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from prometheus_client.core import GaugeMetricFamily

DISTRIBUTION = "skiff-broker"
MAX_VERSION_CHARS = 64  # what metadata stores of an agent's version (metadata.schema: agents)


def _installed_version() -> str:
    try:
        return version(DISTRIBUTION)[:MAX_VERSION_CHARS]
    except PackageNotFoundError:
        return "unknown"


SKIFF_VERSION = _installed_version()


def build_info_family() -> GaugeMetricFamily:
    """`skiff_build_info{version}` = 1: the version of the process serving /metrics (the
    Prometheus convention for versions: join on it, count by it)."""
    family = GaugeMetricFamily(
        "skiff_build_info", "The Skiff version this process runs (always 1)", labels=["version"]
    )
    family.add_metric([SKIFF_VERSION], 1)
    return family
