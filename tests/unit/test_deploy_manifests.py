"""The Kubernetes manifests in deploy/kubernetes: every overlay renders with kustomize, every
rendered object is valid against the Kubernetes schemas (strict: unknown fields refused),
and every environment variable the manifests give a Skiff container is one Skiff reads.

kustomize is `kubectl kustomize` (scripts/system-deps.sh installs kubectl); the schemas come
with the `kubernetes-validate` package. A missing kubectl fails the test, it does not skip it.
"""

from __future__ import annotations

import dataclasses
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


@pytest.mark.parametrize("overlay", sorted(RENDERED))
def test_manifests_are_valid_kubernetes_objects(overlay: str) -> None:
    for doc in RENDERED[overlay]:
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
            if not str(container.get("image", "")).startswith("skiff"):
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
                for probe in ("readinessProbe", "livenessProbe"):
                    http = container.get(probe, {}).get("httpGet")
                    if http:
                        assert http["port"] in ports, f"{overlay}: {doc['metadata']['name']} {probe} port"
