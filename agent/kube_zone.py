"""The agent's zone from its Kubernetes node: the `topology.kubernetes.io/zone` label.

The downward API gives a pod its node's name (`spec.nodeName`) but not the node's labels,
so an agent told `zone_from_node` (`SKIFF_ZONE_FROM_NODE=$(NODE_NAME)`) and no `zone` asks
the Kubernetes API once at start-up: `GET /api/v1/nodes/<name>` with the pod's service
account token (which needs `get` on nodes: deploy/kubernetes/base/agents.yaml binds a
ClusterRole granting only that), and takes the label's value as its zone.

- the API unreachable or refusing (no RBAC, no token) fails the start with one line: the
  operator asked for a zone and would otherwise get cross-zone traffic silently;
- a node without the label (kind, minikube, a single-zone cluster) gives no zone, logged:
  the agent then routes like one without `zone`.

The in-cluster API address, token and CA come from the standard places
(`KUBERNETES_SERVICE_HOST`/`_PORT`, /var/run/secrets/kubernetes.io/serviceaccount/);
`api_url`, `token_file` and `ca_file` override them (tests). Blocking, once, before the
agent's loop runs; the answer is bounded (`MAX_NODE_BYTES`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from skiff.agent.zones import valid_zone

if TYPE_CHECKING:
    from skiff.agent.config import AgentConfig

log = logging.getLogger(__name__)

ZONE_LABEL = "topology.kubernetes.io/zone"
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
MAX_NODE_BYTES = 4 * 1024 * 1024  # a Node object is a few KiB; images lists can grow
TIMEOUT_S = 10.0


class ZoneLookupError(Exception):
    """The node could not be read (the message says why, for a one-line start failure)."""


def in_cluster_api_url(env: dict[str, str] | None = None) -> str:
    env = dict(os.environ) if env is None else env
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise ZoneLookupError("not in a Kubernetes pod (KUBERNETES_SERVICE_HOST is not set)")
    if ":" in host:  # an IPv6 service address
        host = f"[{host}]"
    return f"https://{host}:{port}"


def zone_of_node(node: dict[str, object]) -> str | None:
    """The node object's zone label, if it has a valid one (pure)."""
    metadata = node.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    value = labels.get(ZONE_LABEL) if isinstance(labels, dict) else None
    return valid_zone(value) if isinstance(value, str) else None


def node_zone(
    node_name: str,
    *,
    api_url: str | None = None,
    token_file: Path | None = None,
    ca_file: Path | None = None,
) -> str | None:
    """The zone label of node `node_name` (None if it has none); ZoneLookupError if the API
    cannot tell."""
    base = api_url or in_cluster_api_url()
    token_path = token_file or SERVICE_ACCOUNT_DIR / "token"
    ca_path = ca_file or SERVICE_ACCOUNT_DIR / "ca.crt"
    try:
        token = token_path.read_text(encoding="utf-8").strip()
    except OSError as e:
        raise ZoneLookupError(f"cannot read the service account token {token_path}: {e}") from None
    context = None
    if base.startswith("https://"):
        try:
            context = ssl.create_default_context(cafile=str(ca_path))
        except (OSError, ssl.SSLError) as e:
            raise ZoneLookupError(f"cannot load the cluster CA {ca_path}: {e}") from None
    url = f"{base.rstrip('/')}/api/v1/nodes/{urllib.parse.quote(node_name, safe='')}"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context) as response:
            raw = response.read(MAX_NODE_BYTES + 1)
    except urllib.error.HTTPError as e:
        hint = " (the agent's service account needs get on nodes)" if e.code in (401, 403) else ""
        raise ZoneLookupError(f"GET {url}: HTTP {e.code}{hint}") from None
    except (urllib.error.URLError, OSError) as e:
        raise ZoneLookupError(f"GET {url}: {e}") from None
    if len(raw) > MAX_NODE_BYTES:
        raise ZoneLookupError(f"GET {url}: answer larger than {MAX_NODE_BYTES} bytes")
    try:
        node = json.loads(raw)
    except ValueError as e:
        raise ZoneLookupError(f"GET {url}: not JSON: {e}") from None
    if not isinstance(node, dict):
        raise ZoneLookupError(f"GET {url}: not a Node object")
    zone = zone_of_node(node)
    if zone is None:
        log.info("node %s has no %s label: this agent has no zone", node_name, ZONE_LABEL)
    return zone


def with_node_zone(config: AgentConfig) -> AgentConfig:
    """`config` with its zone read from the node `zone_from_node` names, when it names one and
    no zone is set; SystemExit (one line) if the node cannot be read."""
    if config.zone is not None or not config.zone_from_node:
        return config
    try:
        zone = node_zone(config.zone_from_node)
    except ZoneLookupError as e:
        raise SystemExit(f"skiff agent: cannot start: zone of node {config.zone_from_node}: {e}") from None
    return dataclasses.replace(config, zone=zone)
