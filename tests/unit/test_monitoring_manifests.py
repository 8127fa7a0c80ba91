"""deploy/monitoring (the alerts and the Grafana dashboard) and the production overlay's scrape
configs, checked without a cluster (tests/component/test_dashboard_rules.py checks the
expressions against what a running system exports, and runs promtool).

- The Prometheus Operator's kinds (PodMonitor, PrometheusRule) are not in kubernetes-validate:
  each is checked against a strict schema of the fields used here (written from the
  operator's monitoring.coreos.com/v1 API; unknown fields refused, as the API server's
  pruning would silently drop them).
- The PodMonitors select the agent and metadata pods and name ports those pods declare; the
  metadata one speaks HTTPS, with the CA and the reader token from Secrets that
  deploy/kubernetes/create-secrets.sh makes (the token is the reader role's); a
  NetworkPolicy lets Prometheus reach the metadata port.
- The dashboard is Grafana JSON whose panels fit the 24-column grid without overlapping,
  each query on the `datasource` variable; it ships as the ConfigMap Grafana's sidecar
  loads, byte for byte the file.
- Every alert has a severity, a summary and a description, and a unique name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from skiff.metadata.server.auth import TokenTable

from tests.unit.test_deploy_manifests import (
    KUBE,
    RENDERED,
    _by_kind_and_name,
    _decoded,
    _render,
    _script_secrets,
)

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
PRODUCTION = "overlays/production"

_SECRET_KEY = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "key"],
    "properties": {"name": {"type": "string"}, "key": {"type": "string"}, "optional": {"type": "boolean"}},
}
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}
_METADATA = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": {"type": "string"}, "labels": _LABELS, "namespace": {"type": "string"}},
}
POD_MONITOR = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PodMonitor"},
        "metadata": _METADATA,
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "podMetricsEndpoints"],
            "properties": {
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"matchLabels": _LABELS},
                },
                "podMetricsEndpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["port"],
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                            "scheme": {"enum": ["http", "https"]},
                            "authorization": {
                                "type": "object",
                                "additionalProperties": False,
                                "properties": {"type": {"const": "Bearer"}, "credentials": _SECRET_KEY},
                            },
                            "tlsConfig": {
                                "type": "object",
                                "additionalProperties": False,
                                "properties": {
                                    "ca": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "properties": {"secret": _SECRET_KEY},
                                    },
                                    "serverName": {"type": "string"},
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}
_RULE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["alert", "expr", "for", "labels", "annotations"],
    "properties": {
        "alert": {"type": "string", "pattern": "^Skiff[A-Za-z]+$"},
        "expr": {"type": "string"},
        "for": {"type": "string", "pattern": "^[0-9]+[smh]$"},
        "labels": {
            "type": "object",
            "additionalProperties": False,
            "required": ["severity"],
            "properties": {"severity": {"enum": ["warning", "critical"]}},
        },
        "annotations": {
            "type": "object",
            "additionalProperties": False,
            "required": ["summary", "description"],
            "properties": {"summary": {"type": "string"}, "description": {"type": "string"}},
        },
    },
}
PROMETHEUS_RULE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": _METADATA,
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["groups"],
            "properties": {
                "groups": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["name", "rules"],
                        "properties": {
                            "name": {"type": "string"},
                            "rules": {"type": "array", "items": _RULE},
                        },
                    },
                }
            },
        },
    },
}
SCHEMAS = {"PodMonitor": POD_MONITOR, "PrometheusRule": PROMETHEUS_RULE}


def _operator_objects(overlay: str) -> list[dict[str, Any]]:
    return [d for d in RENDERED[overlay] if d["apiVersion"].startswith("monitoring.coreos.com/")]


def _pod_monitors() -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in _operator_objects(PRODUCTION) if d["kind"] == "PodMonitor"}


def test_production_has_the_monitors_the_alerts_and_the_dashboard() -> None:
    kinds = {(d["kind"], d["metadata"]["name"]) for d in RENDERED[PRODUCTION]}
    assert {
        ("PodMonitor", "skiff-agent"),
        ("PodMonitor", "skiff-metadata"),
        ("PrometheusRule", "skiff"),
        ("ConfigMap", "skiff-grafana-dashboard"),
        ("NetworkPolicy", "skiff-metadata-metrics"),
    } <= kinds


@pytest.mark.parametrize("overlay", sorted(RENDERED))
def test_operator_objects_match_their_schemas(overlay: str) -> None:
    for doc in _operator_objects(overlay):
        assert doc["kind"] in SCHEMAS, f"{overlay}: no schema for {doc['kind']}"
        jsonschema.validate(doc, SCHEMAS[doc["kind"]])


def test_the_schemas_refuse_unknown_fields() -> None:
    monitor = json.loads(json.dumps(_pod_monitors()["skiff-agent"]))
    monitor["spec"]["podMetricsEndpoints"][0]["bearerToken"] = "x"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(monitor, POD_MONITOR)


def _pods_selected(monitor: dict[str, Any]) -> list[dict[str, Any]]:
    wanted = monitor["spec"]["selector"]["matchLabels"]
    return [
        d
        for d in RENDERED[PRODUCTION]
        if d["kind"] == "Deployment"
        and wanted.items() <= d["spec"]["template"]["metadata"].get("labels", {}).items()
    ]


def test_pod_monitors_select_pods_and_their_declared_ports() -> None:
    for name, monitor in _pod_monitors().items():
        deployments = _pods_selected(monitor)
        assert [d["metadata"]["name"] for d in deployments] == [name]
        container = deployments[0]["spec"]["template"]["spec"]["containers"][0]
        ports = {p.get("name") for p in container["ports"]}
        for endpoint in monitor["spec"]["podMetricsEndpoints"]:
            assert endpoint["port"] in ports, f"{name}: no port {endpoint['port']}"
            assert endpoint["path"] == "/metrics"


def test_metadata_is_scraped_over_tls_with_the_reader_token(tmp_path: Path) -> None:
    metadata = _by_kind_and_name(RENDERED[PRODUCTION])[("Deployment", "skiff-metadata")]
    env = {e["name"] for e in metadata["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "SKIFF_METADATA_TLS_CERT" in env and "SKIFF_METADATA_TOKENS_FILE" in env
    (endpoint,) = _pod_monitors()["skiff-metadata"]["spec"]["podMetricsEndpoints"]
    assert endpoint["scheme"] == "https"
    made = _script_secrets(tmp_path)
    token_ref = endpoint["authorization"]["credentials"]
    ca_ref = endpoint["tlsConfig"]["ca"]["secret"]
    for ref in (token_ref, ca_ref):
        assert ref["name"] in made, f"create-secrets.sh does not make {ref['name']}"
        assert ref["key"] in _decoded(made[ref["name"]]), ref
    tokens = TokenTable.parse(_decoded(made["skiff-metadata-tokens"])["tokens"], "tokens")
    assert tokens.roles_for(_decoded(made[token_ref["name"]])[token_ref["key"]]) == {"reader"}


def test_prometheus_may_reach_the_metadata_port() -> None:
    objects = _by_kind_and_name(RENDERED[PRODUCTION])
    policy = objects[("NetworkPolicy", "skiff-metadata-metrics")]["spec"]
    assert policy["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "skiff-metadata"}
    (rule,) = policy["ingress"]
    assert rule["ports"] == [{"port": 9093, "protocol": "TCP"}]
    service_port = objects[("Service", "skiff-metadata")]["spec"]["ports"][0]["port"]
    assert service_port == 9093


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((MONITORING / "grafana-dashboard.json").read_text(encoding="utf-8"))
    return loaded


def test_the_dashboard_ships_as_the_sidecars_config_map() -> None:
    (config_map,) = [
        d
        for d in _render(MONITORING)
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "skiff-grafana-dashboard"
    ]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["data"]["skiff.json"] == (MONITORING / "grafana-dashboard.json").read_text(
        encoding="utf-8"
    )
    assert (KUBE / "overlays" / "production" / "monitoring.yaml").exists()


def test_dashboard_panels_fit_the_grid_and_use_the_datasource_variable() -> None:
    dashboard = _dashboard()
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: dict[tuple[int, int], str] = {}
    for panel in panels:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(set(refs)) == len(refs), panel["title"]
        assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"]), panel["title"]


def test_alert_names_are_unique() -> None:
    rule = yaml.safe_load((MONITORING / "prometheus-rules.yaml").read_text(encoding="utf-8"))
    names = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert len(names) == len(set(names))
