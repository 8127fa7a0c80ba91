"""The process harness's port choice (tests.support.agents.spawn_skiff): a port free_port()
chose can be taken by someone else before the spawned process binds it. A taken Kafka port
stops `skiff agent` with a one-line error and a taken /metrics port is logged while the agent
runs on without the endpoint; either way the harness chooses again instead of handing the
test an agent whose endpoint answers "connection refused" (a CI failure of test_zones)."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import agents
from tests.support.agents import METRICS_PORT_TAKEN, SkiffProcess, agent_args


def _choices(monkeypatch: pytest.MonkeyPatch, first: list[int]) -> None:
    """free_port() answers `first`, then the kernel's choices."""
    real = agents.free_port
    queue = list(first)
    monkeypatch.setattr(agents, "free_port", lambda: queue.pop(0) if queue else real())


def _agent(tmp_path: Path) -> list[str]:
    (tmp_path / "bucket").mkdir(exist_ok=True)
    return agent_args(
        f"file://{tmp_path / 'bucket'}", f"sqlite:///{tmp_path / 'm.db'}", "--metrics-port", "{metrics_port}"
    )


def test_a_taken_metrics_port_is_chosen_again(
    spawn_skiff: Callable[..., SkiffProcess], held_port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _choices(monkeypatch, [agents.free_port(), held_port])
    p = spawn_skiff(*_agent(tmp_path))
    assert p.metrics_port is not None and p.metrics_port != held_port
    first = tmp_path / "skiff-0-agent-1.log"
    assert METRICS_PORT_TAKEN in first.read_text() and str(held_port) in first.read_text()
    assert METRICS_PORT_TAKEN not in p.log.read_text()
    with urllib.request.urlopen(f"http://127.0.0.1:{p.metrics_port}/healthz", timeout=10) as r:
        assert r.status == 200


def test_a_taken_kafka_port_is_chosen_again(
    spawn_skiff: Callable[..., SkiffProcess], held_port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _choices(monkeypatch, [held_port])
    p = spawn_skiff(*_agent(tmp_path))
    assert p.port != held_port and p.alive()
    assert "already in use" in (tmp_path / "skiff-0-agent-1.log").read_text()
    with socket.create_connection(("127.0.0.1", p.port), timeout=5):
        pass


def test_a_port_the_test_asked_for_is_not_chosen_again(
    spawn_skiff: Callable[..., SkiffProcess], held_port: int, tmp_path: Path
) -> None:
    with pytest.raises(pytest.fail.Exception, match="already in use"):
        spawn_skiff(*_agent(tmp_path), port=held_port)
