"""The agent's zone from its Kubernetes node (agent.kube_zone), asked of a real HTTP server on
loopback that answers `GET /api/v1/nodes/<name>` as the Kubernetes API does: the label is
the zone, a node without it gives none, a refusal fails the start with one line naming RBAC."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from skiff.agent.config import AgentConfig
from skiff.agent.kube_zone import ZONE_LABEL, ZoneLookupError, node_zone, with_node_zone

TOKEN = "sa-token-123"
NODES = {
    "node-a": {
        "metadata": {"name": "node-a", "labels": {ZONE_LABEL: "eu-west-1a", "kubernetes.io/os": "linux"}}
    },
    "node-bare": {"metadata": {"name": "node-bare", "labels": {}}},
}


class _Api(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self._answer(403, {"kind": "Status", "reason": "Forbidden"})
            return
        name = self.path.removeprefix("/api/v1/nodes/")
        node = NODES.get(name)
        self._answer(200 if node else 404, node or {"kind": "Status", "reason": "NotFound"})

    def _answer(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
        pass


@pytest.fixture
def api() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def token(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


def test_the_zone_label_of_the_node_is_the_zone(api: str, token: Path) -> None:
    assert node_zone("node-a", api_url=api, token_file=token) == "eu-west-1a"


def test_a_node_without_the_label_gives_no_zone(api: str, token: Path) -> None:
    assert node_zone("node-bare", api_url=api, token_file=token) is None


def test_a_refusal_names_the_permission_needed(api: str, token: Path, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong"
    wrong.write_text("nope")
    with pytest.raises(ZoneLookupError, match="HTTP 403.*get on nodes"):
        node_zone("node-a", api_url=api, token_file=wrong)
    with pytest.raises(ZoneLookupError, match="HTTP 404"):
        node_zone("node-gone", api_url=api, token_file=token)
    with pytest.raises(ZoneLookupError, match="service account token"):
        node_zone("node-a", api_url=api, token_file=tmp_path / "absent")


def test_outside_a_pod_the_lookup_fails_in_one_line(monkeypatch: pytest.MonkeyPatch, token: Path) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    config = AgentConfig.from_env({"SKIFF_ZONE_FROM_NODE": "node-a"})
    with pytest.raises(SystemExit, match="cannot start: zone of node node-a: not in a Kubernetes pod"):
        with_node_zone(config)


def test_a_configured_zone_wins_and_no_node_means_no_lookup() -> None:
    config = AgentConfig.from_env({"SKIFF_ZONE": "z1", "SKIFF_ZONE_FROM_NODE": "node-a"})
    assert with_node_zone(config) is config
    plain = AgentConfig.from_env({})
    assert with_node_zone(plain) is plain and plain.zone is None
