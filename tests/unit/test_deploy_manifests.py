"""The Kubernetes manifests in deploy/kubernetes: every overlay renders with kustomize, every
rendered object is valid against the Kubernetes schemas (strict: unknown fields refused),
and every environment variable the manifests give a Skiff container is one Skiff reads.

Beyond validity, what a user relies on: the image's name and tag come from kustomize
`images:` (dev pulls only if not present, for images loaded into kind or minikube); the
dev overlay is a whole cluster (PostgreSQL, an S3 store, the Job creating the bucket, and
every Secret and ConfigMap it names generated); every Secret production names is made by
deploy/kubernetes/create-secrets.sh; every pod runs as a non-root user; long-running
containers have startup, readiness and liveness probes; production spreads over zones and
nodes; the agents' grace period covers the preStop pause plus their own shutdown.

kustomize is `kubectl kustomize` (scripts/system-deps.sh installs kubectl); the schemas come
with the `kubernetes-validate` package. A missing kubectl fails the test, it does not skip it.
The Dockerfile is checked in tests/unit/test_deploy_dockerfile.py.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from skiff.agent.config import ENV_PREFIX, AgentConfig

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.33.0"
# Variables read by software other than Skiff's own configuration: botocore's standard AWS
# settings and the postgres image's, plus variables that only feed `$(VAR)` expansion.
FOREIGN_ENV = re.compile(r"^(AWS_[A-Z_]+|POSTGRES_[A-Z_]+|PGDATA)$")
SOURCE_PACKAGES = ("agent", "metadata", "compactor", "spark", "fileformat", "cli")


def _kustomize_dirs() -> list[Path]:
    dirs = [KUBE / "base"] + sorted(p for p in (KUBE / "overlays").iterdir() if p.is_dir())
    return [d for d in dirs if (d / "kustomization.yaml").exists()]


def _render(directory: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is needed to render the kustomize overlays (bash scripts/system-deps.sh)"
    out = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, f"kustomize {directory}: {out.stderr}"
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def _containers(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    spec = obj.get("spec", {})
    if obj["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    pod = spec.get("template", {}).get("spec", {})
    yield from pod.get("initContainers", [])
    yield from pod.get("containers", [])


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj.get("spec", {})
    if obj["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    pod: dict[str, Any] = spec.get("template", {}).get("spec", {})
    return pod


def _is_skiff(container: dict[str, Any]) -> bool:
    """Whether a container runs the Skiff image, whatever registry and tag an overlay sets."""
    repository = str(container.get("image", "")).rsplit("/", 1)[-1]
    return repository.split(":", 1)[0].split("@", 1)[0] == "skiff"


def _skiff_env_read() -> set[str]:
    """Every `SKIFF_*` name Skiff reads: AgentConfig's fields, and the literal names in the
    source (CLI flags' defaults, the metadata service, the compactor, Spark's helpers)."""
    names = {ENV_PREFIX + f.name.upper() for f in dataclasses.fields(AgentConfig)}
    for package in SOURCE_PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            names.update(re.findall(r"\bSKIFF_[A-Z0-9_]+\b", path.read_text(encoding="utf-8")))
    return names


RENDERED = {d.relative_to(KUBE).as_posix(): _render(d) for d in _kustomize_dirs()} if KUBE.exists() else {}


def test_every_overlay_renders_the_whole_system() -> None:
    assert set(RENDERED) >= {"base", "overlays/dev", "overlays/production"}
    for name, docs in RENDERED.items():
        kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
        for expected in [
            ("Deployment", "skiff-agent"),
            ("Deployment", "skiff-metadata"),
            ("Service", "skiff-bootstrap"),
            ("Service", "skiff-metadata"),
            ("HorizontalPodAutoscaler", "skiff-agent"),
            ("PodDisruptionBudget", "skiff-agent"),
            ("CronJob", "skiff-compactor"),
            ("NetworkPolicy", "skiff-metadata"),
        ]:
            assert expected in kinds, f"{name} lacks {expected}"


# The Prometheus Operator's kinds (PodMonitor, PrometheusRule) have no schema in
# kubernetes-validate: tests/unit/test_monitoring_manifests.py checks them.
OPERATOR_API = "monitoring.coreos.com/"


@pytest.mark.parametrize("overlay", sorted(RENDERED))
def test_manifests_are_valid_kubernetes_objects(overlay: str) -> None:
    for doc in RENDERED[overlay]:
        if doc["apiVersion"].startswith(OPERATOR_API):
            continue
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:  # pragma: no cover - the failure message
            pytest.fail(f"{overlay}: {doc['kind']}/{doc['metadata']['name']}: {exc}")


@pytest.mark.parametrize("overlay", sorted(RENDERED))
def test_every_environment_variable_is_one_skiff_reads(overlay: str) -> None:
    docs = RENDERED[overlay]
    config_maps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
    known = _skiff_env_read()
    for doc in docs:
        for container in _containers(doc):
            if not _is_skiff(container):
                continue  # PostgreSQL and other images read their own variables
            names = [e["name"] for e in container.get("env", [])]
            for source in container.get("envFrom", []):
                ref = source.get("configMapRef")
                if ref and ref["name"] in config_maps:
                    names += list(config_maps[ref["name"]])
            expanded = {
                m for e in container.get("env", []) for m in re.findall(r"\$\((\w+)\)", e.get("value", ""))
            }
            for name in names:
                if name in expanded or FOREIGN_ENV.match(name):
                    continue
                where = f"{overlay}: {doc['kind']}/{doc['metadata']['name']}/{container['name']}"
                assert name in known, f"{where} sets {name}, which Skiff does not read"


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A throwaway certificate and key, standing in for the Secrets the pods mount."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "skiff-test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "tls.crt", directory / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


@pytest.mark.parametrize("overlay", sorted(RENDERED))
def test_agent_settings_in_the_manifests_parse(overlay: str, tmp_path: Path) -> None:
    """The agent's literal settings are valid values of their fields (AgentConfig checks
    types and ranges at start-up, so a typo would crash-loop every pod). Files the pods
    mount from Secrets are replaced by throwaway ones of the same kind; each must lie in a
    directory the container mounts."""
    agent = next(
        d for d in RENDERED[overlay] if d["kind"] == "Deployment" and d["metadata"]["name"] == "skiff-agent"
    )
    container = next(_containers(agent))
    fields = {ENV_PREFIX + f.name.upper() for f in dataclasses.fields(AgentConfig)}
    config_maps = {
        d["metadata"]["name"]: d.get("data", {}) for d in RENDERED[overlay] if d["kind"] == "ConfigMap"
    }
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        ref = source.get("configMapRef")
        if ref and ref["name"] in config_maps:
            env.update(config_maps[ref["name"]])
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = re.sub(r"\$\(\w+\)", "127.0.0.1", e["value"])
    env = {k: v for k, v in env.items() if k in fields}
    assert env, "the agent Deployment sets no agent settings"
    mounts = [m["mountPath"] for m in container.get("volumeMounts", [])]
    cert, key = _self_signed(tmp_path)
    token = tmp_path / "token"
    token.write_text("t" * 32)
    for name, value in env.items():
        if value.startswith("/"):
            assert any(value.startswith(m.rstrip("/") + "/") for m in mounts), (
                f"{name}={value} is not mounted"
            )
            env[name] = str(key if value.endswith(".key") else cert if value.endswith(".crt") else token)
    AgentConfig.from_env(env)  # raises ValueError naming the field on a bad value


def test_probes_point_at_declared_ports() -> None:
    for overlay, docs in RENDERED.items():
        for doc in docs:
            for container in _containers(doc):
                ports = {p.get("name") for p in container.get("ports", [])} | {
                    p["containerPort"] for p in container.get("ports", [])
                }
                for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                    action = container.get(probe, {})
                    target = action.get("httpGet") or action.get("tcpSocket")
                    if target:
                        assert target["port"] in ports, f"{overlay}: {doc['metadata']['name']} {probe} port"


# --------------------------------------------------------------------------- the image


def _kustomization(directory: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((directory / "kustomization.yaml").read_text(encoding="utf-8"))
    return loaded


def _skiff_containers(docs: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for doc in docs:
        for container in _containers(doc):
            if _is_skiff(container):
                yield f"{doc['kind']}/{doc['metadata']['name']}/{container['name']}", container


def test_base_manifests_name_the_image_without_a_registry_or_tag() -> None:
    """The sources say `image: skiff`; only kustomize `images:` decides the real name."""
    for path in sorted((KUBE / "base").glob("*.yaml")):
        for line in path.read_text(encoding="utf-8").splitlines():
            match = re.match(r"\s*image:\s*(\S+)", line)
            if match and "skiff" in match.group(1):
                assert match.group(1) == "skiff", f"{path.name}: {line.strip()}"


@pytest.mark.parametrize("overlay", ["overlays/dev", "overlays/production"])
def test_overlays_set_the_image_name_and_tag(overlay: str) -> None:
    entry = next(i for i in _kustomization(KUBE / overlay)["images"] if i["name"] == "skiff")
    expected = f"{entry['newName']}:{entry['newTag']}"
    found = list(_skiff_containers(RENDERED[overlay]))
    assert len(found) >= 3, f"{overlay}: agent, metadata and compactor at least"
    for where, container in found:
        assert container["image"] == expected, f"{overlay}: {where}"


def test_an_overlay_on_top_can_retarget_the_image(tmp_path: Path) -> None:
    """What `kustomize edit set image skiff=...` writes: every Skiff container follows."""
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": [os.path.relpath(KUBE / "overlays" / "dev", tmp_path)],  # must be relative
                "images": [{"name": "skiff", "newName": "registry.test/team/skiff", "newTag": "1.2.3"}],
            }
        ),
        encoding="utf-8",
    )
    for where, container in _skiff_containers(_render(tmp_path)):
        assert container["image"] == "registry.test/team/skiff:1.2.3", where


def test_dev_pulls_images_only_if_not_present() -> None:
    """kind and minikube load images into the node; a pull of `skiff:dev` would fail."""
    for doc in RENDERED["overlays/dev"]:
        for container in _containers(doc):
            assert container.get("imagePullPolicy") == "IfNotPresent", (
                f"{doc['kind']}/{doc['metadata']['name']}/{container['name']}"
            )


# --------------------------------------------------------------------------- dev is a whole cluster


def _by_kind_and_name(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def _referenced(docs: list[dict[str, Any]], kind: str) -> dict[str, set[str]]:
    """Secret (or ConfigMap) names the pods use, each with the keys they pick (empty: all)."""
    ref_key = "secretKeyRef" if kind == "Secret" else "configMapKeyRef"
    from_key = "secretRef" if kind == "Secret" else "configMapRef"
    out: dict[str, set[str]] = {}
    for doc in docs:
        pod = _pod_spec(doc)
        for container in _containers(doc):
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get(ref_key)
                if ref:
                    out.setdefault(ref["name"], set()).add(ref["key"])
            for source in container.get("envFrom", []):
                if from_key in source:
                    out.setdefault(source[from_key]["name"], set())
        for volume in pod.get("volumes", []):
            source = volume.get("secret") if kind == "Secret" else volume.get("configMap")
            if source:
                name = source.get("secretName") or source.get("name")
                out.setdefault(name, set()).update(i["key"] for i in source.get("items", []))
    return out


def test_dev_overlay_contains_postgres_s3_and_the_bucket_job() -> None:
    objects = _by_kind_and_name(RENDERED["overlays/dev"])
    for expected in [
        ("StatefulSet", "skiff-postgres"),
        ("Service", "skiff-postgres"),
        ("StatefulSet", "skiff-s3"),
        ("Service", "skiff-s3"),
        ("Job", "skiff-create-bucket"),
    ]:
        assert expected in objects, f"the dev overlay lacks {expected}"
    config = next(d["data"] for d in RENDERED["overlays/dev"] if d["kind"] == "ConfigMap")
    s3_port = objects[("Service", "skiff-s3")]["spec"]["ports"][0]["port"]
    assert config["AWS_ENDPOINT_URL"] == f"http://skiff-s3:{s3_port}"
    assert config["SKIFF_BUCKET_URL"].startswith("s3://")
    job = objects[("Job", "skiff-create-bucket")]
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert "SKIFF_BUCKET_URL" in container["args"][0], "the Job creates the bucket Skiff is told"
    assert {"configMapRef": {"name": "skiff-config"}} in [
        {k: {"name": v["name"]}} for s in container["envFrom"] for k, v in s.items()
    ]


def _decoded(secret: dict[str, Any]) -> dict[str, str]:
    import base64

    data = {k: base64.b64decode(v).decode() for k, v in secret.get("data", {}).items()}
    data.update(secret.get("stringData", {}))
    return data


def test_dev_overlay_generates_every_secret_and_config_map_it_names() -> None:
    docs = RENDERED["overlays/dev"]
    for kind in ("Secret", "ConfigMap"):
        generated = {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}
        for name, keys in _referenced(docs, kind).items():
            assert name in generated, f"dev names the {kind} {name} but does not generate it"
            data = _decoded(generated[name]) if kind == "Secret" else generated[name]["data"]
            assert keys <= set(data), f"{kind} {name} lacks {keys - set(data)}"


def test_dev_credentials_agree() -> None:
    """Skiff signs with the keys SeaweedFS knows; metadata reaches the PostgreSQL pod."""
    import json

    docs = RENDERED["overlays/dev"]
    secrets = {d["metadata"]["name"]: _decoded(d) for d in docs if d["kind"] == "Secret"}
    aws = next(v for k, v in secrets.items() if k.startswith("skiff-aws"))
    identities = json.loads(
        next(v for k, v in secrets.items() if k.startswith("skiff-s3-identities"))["identities.json"]
    )
    keys = [(c["accessKey"], c["secretKey"]) for i in identities["identities"] for c in i["credentials"]]
    assert (aws["AWS_ACCESS_KEY_ID"], aws["AWS_SECRET_ACCESS_KEY"]) in keys
    postgres = next(v for k, v in secrets.items() if k.startswith("skiff-postgres"))
    assert postgres["url"] == f"postgresql://skiff:{postgres['password']}@skiff-postgres:5432/skiff"


# --------------------------------------------------------------------------- production secrets


def _script_secrets(tmp_path: Path) -> dict[str, dict[str, Any]]:
    cert, key = _self_signed(tmp_path)
    out = subprocess.run(
        [
            "bash",
            str(KUBE / "create-secrets.sh"),
            "--dry-run",
            "--namespace",
            "skiff",
            "--postgres-url",
            "postgresql://skiff:pw@db.internal:5432/skiff",
            "--metadata-cert",
            str(cert),
            "--metadata-key",
            str(key),
            "--metadata-ca",
            str(cert),
            "--kafka-cert",
            str(cert),
            "--kafka-key",
            str(key),
            "--aws-access-key-id",
            "AKIDEXAMPLE",
            "--aws-secret-access-key",
            "secret-example",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(out.stdout) if d}


def test_create_secrets_makes_every_secret_production_names(tmp_path: Path) -> None:
    from skiff.metadata.server.auth import TokenTable

    made = _script_secrets(tmp_path)
    for name, keys in _referenced(RENDERED["overlays/production"], "Secret").items():
        assert name in made, f"production names the Secret {name}; create-secrets.sh does not make it"
        assert keys <= set(_decoded(made[name])), f"{name} lacks {keys - set(_decoded(made[name]))}"
    for name, secret in made.items():
        assert secret["metadata"]["namespace"] == "skiff", name
    tokens = TokenTable.parse(_decoded(made["skiff-metadata-tokens"])["tokens"], "tokens")
    assert tokens.roles_for(_decoded(made["skiff-agent-token"])["token"]) == {"agent"}
    assert tokens.roles_for(_decoded(made["skiff-compactor-token"])["token"]) == {"compactor"}
    assert made["skiff-kafka-tls"]["type"] == "kubernetes.io/tls"


def test_create_secrets_refuses_missing_input_in_one_line() -> None:
    out = subprocess.run(
        ["bash", str(KUBE / "create-secrets.sh"), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2
    assert out.stderr.strip() == "create-secrets.sh: --postgres-url is required"


# --------------------------------------------------------------------------- pods


@pytest.mark.parametrize("overlay", sorted(RENDERED))
def test_every_pod_runs_as_a_non_root_user(overlay: str) -> None:
    for doc in RENDERED[overlay]:
        pod = _pod_spec(doc)
        for container in _containers(doc):
            where = f"{overlay}: {doc['kind']}/{doc['metadata']['name']}/{container['name']}"
            context = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
            assert context.get("runAsNonRoot") is True, where
            assert isinstance(context.get("runAsUser"), int) and context["runAsUser"] > 0, where
            assert context.get("allowPrivilegeEscalation") is False, where
            assert context.get("capabilities", {}).get("drop") == ["ALL"], where
            if _is_skiff(container):
                assert context.get("readOnlyRootFilesystem") is True, where


@pytest.mark.parametrize("overlay", sorted(RENDERED))
def test_long_running_containers_have_probes(overlay: str) -> None:
    for doc in RENDERED[overlay]:
        if doc["kind"] not in ("Deployment", "StatefulSet"):
            continue
        for container in _containers(doc):
            where = f"{overlay}: {doc['kind']}/{doc['metadata']['name']}/{container['name']}"
            probes = ("readinessProbe", "livenessProbe") + (("startupProbe",) if _is_skiff(container) else ())
            for probe in probes:
                assert probe in container, f"{where} has no {probe}"
            if _is_skiff(container):
                assert container["lifecycle"]["preStop"], f"{where} has no preStop pause"


def _prestop_seconds(container: dict[str, Any]) -> int:
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep", command
    return int(command[1])


@pytest.mark.parametrize("overlay", sorted(RENDERED))
def test_agent_grace_period_covers_the_prestop_pause_and_the_shutdown(overlay: str) -> None:
    """Kubernetes counts the preStop hook inside the grace period; the agent's own drain
    (shutdown_timeout_ms, as the manifests set it or its default) must fit in the rest."""
    agent = _by_kind_and_name(RENDERED[overlay])[("Deployment", "skiff-agent")]
    container = next(_containers(agent))
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    shutdown_ms = int(env.get(ENV_PREFIX + "SHUTDOWN_TIMEOUT_MS") or AgentConfig().shutdown_timeout_ms)
    grace_s = agent["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert _prestop_seconds(container) + shutdown_ms / 1000 < grace_s


@pytest.mark.parametrize("overlay", sorted(RENDERED))
def test_env_references_name_earlier_variables(overlay: str) -> None:
    """Kubernetes expands `$(VAR)` only from variables defined before it in the list (an
    overlay's patch puts its entries first); anything else stays the literal text."""
    for doc in RENDERED[overlay]:
        for container in _containers(doc):
            seen: set[str] = set()
            for e in container.get("env", []):
                for ref in re.findall(r"\$\((\w+)\)", e.get("value", "")):
                    assert ref in seen, (
                        f"{overlay}: {doc['metadata']['name']}: {e['name']} uses $({ref}) too early"
                    )
                seen.add(e["name"])
            for ref in re.findall(r"\$\((\w+)\)", " ".join(container.get("args", []))):
                assert ref in seen, f"{overlay}: {doc['metadata']['name']} args use $({ref}), undefined"


@pytest.mark.parametrize("overlay", sorted(RENDERED))
def test_agents_have_an_external_listener_on_a_host_port(overlay: str) -> None:
    """Clients outside the cluster: every agent listens on EXTERNAL, published as the same
    host port on its node, and advertises $(EXTERNAL_HOST) there (Kafka operators' way)."""
    from skiff.agent.network.listeners import parse_endpoints

    agent = _by_kind_and_name(RENDERED[overlay])[("Deployment", "skiff-agent")]
    container = next(_containers(agent))
    env = {e["name"]: e.get("value") for e in container["env"]}
    bound = {e.name: e.port for e in parse_endpoints(env[ENV_PREFIX + "LISTENERS"])}
    advertised = {
        e.name: (e.host, e.port)
        for e in parse_endpoints(env[ENV_PREFIX + "ADVERTISED_LISTENERS"], "advertised_listeners")
    }
    assert advertised["EXTERNAL"] == ("$(EXTERNAL_HOST)", bound["EXTERNAL"])
    host_ports = {p["containerPort"]: p.get("hostPort") for p in container["ports"]}
    assert host_ports[bound["EXTERNAL"]] == bound["EXTERNAL"]
    assert agent["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0, "a surge pod cannot get the host port"


@pytest.mark.parametrize("overlay", sorted(RENDERED))
def test_agents_read_their_zone_from_their_node(overlay: str) -> None:
    """The zone label of the agent's node reaches the agent: its node name from the downward
    API in SKIFF_ZONE_FROM_NODE, and its service account bound to a role that may get nodes
    (and nothing more)."""
    objects = _by_kind_and_name(RENDERED[overlay])
    agent = objects[("Deployment", "skiff-agent")]
    pod = _pod_spec(agent)
    env = {e["name"]: e for e in next(_containers(agent))["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env[ENV_PREFIX + "ZONE_FROM_NODE"]["value"] == "$(NODE_NAME)"
    account = pod["serviceAccountName"]
    assert ("ServiceAccount", account) in objects
    bindings = [
        b
        for (kind, _), b in objects.items()
        if kind == "ClusterRoleBinding" and any(s["name"] == account for s in b["subjects"])
    ]
    assert len(bindings) == 1
    role = objects[("ClusterRole", bindings[0]["roleRef"]["name"])]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]


def test_production_spreads_agents_and_metadata_over_zones_and_nodes() -> None:
    objects = _by_kind_and_name(RENDERED["overlays/production"])
    for name in ("skiff-agent", "skiff-metadata"):
        spec = objects[("Deployment", name)]["spec"]["template"]["spec"]
        keys = {c["topologyKey"] for c in spec.get("topologySpreadConstraints", [])}
        assert keys == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}, name
        for constraint in spec["topologySpreadConstraints"]:
            assert constraint["labelSelector"]["matchLabels"] == {"app.kubernetes.io/name": name}


def test_compactor_has_a_read_only_root_and_a_scratch_dir() -> None:
    for overlay, docs in RENDERED.items():
        cronjob = _by_kind_and_name(docs)[("CronJob", "skiff-compactor")]
        container = next(_containers(cronjob))
        assert container["securityContext"]["readOnlyRootFilesystem"] is True, overlay
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in _pod_spec(cronjob)["volumes"]}
        assert "emptyDir" in volumes[mounts["/tmp"]], overlay


def test_the_documented_external_host_patch_advertises_it(tmp_path: Path) -> None:
    """docs/operations.md's kind example: an overlay over dev setting EXTERNAL_HOST."""
    docs = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    block = docs.split("# then a kustomization.yaml of your own, in a folder beside overlays/dev:\n", 1)[1]
    lines = block.split("\n\n", 1)[0].splitlines()
    kustomization = yaml.safe_load("\n".join(line[4:] for line in lines))
    (tmp_path / "dev").symlink_to(KUBE / "overlays" / "dev")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "kustomization.yaml").write_text(yaml.safe_dump(kustomization), encoding="utf-8")
    agent = _by_kind_and_name(_render(mine))[("Deployment", "skiff-agent")]
    env = next(_containers(agent))["env"]
    names = [e["name"] for e in env]
    assert env[names.index("EXTERNAL_HOST")]["value"] == "127.0.0.1"
    assert names.index("EXTERNAL_HOST") < names.index(ENV_PREFIX + "ADVERTISED_LISTENERS")


@pytest.mark.parametrize("overlay", sorted(RENDERED))
def test_every_skiff_process_told_the_bucket_gets_its_credentials(overlay: str) -> None:
    """Agents write the bucket, the compactor rewrites it and metadata checks a committed
    object exists before accepting it (a HEAD): without the keys every produce fails."""
    for where, container in _skiff_containers(RENDERED[overlay]):
        sources = container.get("envFrom", [])
        config = [s["configMapRef"]["name"] for s in sources if "configMapRef" in s]
        secrets = [s["secretRef"]["name"] for s in sources if "secretRef" in s]
        if any(name.startswith("skiff-config") for name in config):
            assert any(name.startswith("skiff-aws") for name in secrets), f"{overlay}: {where}"
