"""The dev overlay's S3 store and bucket Job, run for real outside Kubernetes.

`kubectl kustomize deploy/kubernetes/overlays/dev` is rendered; SeaweedFS is started with
the StatefulSet's own arguments (`weed server -s3 -s3.config=...`, with the identity file
from the generated Secret), rebound to free loopback ports; then the bucket Job's
command runs with the environment the Job gets (the ConfigMap skiff-config and the
Secret skiff-aws, with AWS_ENDPOINT_URL pointed at the loopback port). What this proves:
the identity file's format is one SeaweedFS accepts, the keys Skiff is given are the
ones it knows, the Job creates the bucket of SKIFF_BUCKET_URL and succeeds again when
the bucket exists, and a wrong key is refused (the store is not open).
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from tests.support.s3servers import HOST, ServerProcess, find_binary, free_port_pairs

ROOT = Path(__file__).resolve().parents[2]
DEV = ROOT / "deploy" / "kubernetes" / "overlays" / "dev"

pytestmark = [pytest.mark.s3, pytest.mark.slow]


def _rendered() -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is needed to render the kustomize overlays (bash scripts/system-deps.sh)"
    out = subprocess.run(
        [kubectl, "kustomize", str(DEV)], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _named(docs: list[dict[str, Any]], kind: str, prefix: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"].startswith(prefix))


def _secret(docs: list[dict[str, Any]], prefix: str) -> dict[str, str]:
    data = _named(docs, "Secret", prefix)["data"]
    return {k: base64.b64decode(v).decode() for k, v in data.items()}


class DevStore:
    def __init__(self, docs: list[dict[str, Any]], endpoint_url: str) -> None:
        self.docs = docs
        self.endpoint_url = endpoint_url
        self.keys = _secret(docs, "skiff-aws")
        self.config = _named(docs, "ConfigMap", "skiff-config")["data"]

    def job_env(self, tmp_path: Path, **overrides: str) -> dict[str, str]:
        """The Job's environment (envFrom skiff-config, skiff-aws), on this machine."""
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        env.update(self.config)
        env.update(self.keys)
        env["AWS_ENDPOINT_URL"] = self.endpoint_url
        env.update(overrides)
        return env

    def run_job(self, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        job = _named(self.docs, "Job", "skiff-create-bucket")
        container = job["spec"]["template"]["spec"]["containers"][0]
        command = [sys.executable, *container["command"][1:], *container["args"]]  # python -c SCRIPT
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)


def _seaweed_argv(docs: list[dict[str, Any]], workdir: Path) -> tuple[list[str], int]:
    """The StatefulSet's `weed` arguments, with the data dir, address, ports and identity
    file moved to this machine (everything else as the manifest says)."""
    statefulset = _named(docs, "StatefulSet", "skiff-s3")
    container = statefulset["spec"]["template"]["spec"]["containers"][0]
    identities = workdir / "identities.json"
    identities.write_text(_secret(docs, "skiff-s3-identities")["identities.json"], encoding="utf-8")
    (workdir / "data").mkdir()
    master, volume, filer, s3 = free_port_pairs(4)
    moved = {
        "-dir": str(workdir / "data"),
        "-ip": HOST,
        "-ip.bind": HOST,
        "-s3.port": str(s3),
        "-s3.config": str(identities),
    }
    argv = [find_binary("weed")]
    for arg in container["args"]:
        name, sep, _ = arg.partition("=")
        argv.append(f"{name}={moved[name]}" if sep and name in moved else arg)
    argv += [
        f"-master.port={master}",
        f"-master.port.grpc={master + 10000}",
        f"-volume.port={volume}",
        f"-volume.port.grpc={volume + 10000}",
        f"-filer.port={filer}",
        f"-filer.port.grpc={filer + 10000}",
        f"-filer.localSocket={workdir / 'filer.sock'}",
        f"-s3.port.grpc={s3 + 10000}",
        f"-s3.localSocket={workdir / 's3.sock'}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-webdav=false",
        "-volume.preStopSeconds=0",
    ]
    return argv, s3


@pytest.fixture(scope="module")
def dev_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStore]:
    """One store for the module (SeaweedFS takes seconds to start)."""
    tmp_path = tmp_path_factory.mktemp("dev-s3")
    docs = _rendered()
    argv, s3_port = _seaweed_argv(docs, tmp_path)
    proc = ServerProcess(
        "weed server (dev overlay)", argv, {"PATH": "/usr/bin:/bin"}, tmp_path / "weed.log", tmp_path
    )
    store = DevStore(docs, f"http://{HOST}:{s3_port}")
    client = boto3.client(
        "s3",
        endpoint_url=store.endpoint_url,
        region_name=store.config["AWS_REGION"],
        aws_access_key_id=store.keys["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=store.keys["AWS_SECRET_ACCESS_KEY"],
    )
    try:
        proc.wait_ready(lambda: isinstance(client.list_buckets().get("Buckets"), list))
        yield store
    finally:
        proc.stop()


def test_the_bucket_job_creates_the_bucket_with_the_dev_keys(dev_store: DevStore, tmp_path: Path) -> None:
    bucket = dev_store.config["SKIFF_BUCKET_URL"].removeprefix("s3://").split("/")[0]
    first = dev_store.run_job(dev_store.job_env(tmp_path))
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == f"bucket {bucket} ready"
    again = dev_store.run_job(dev_store.job_env(tmp_path))  # a re-run (Job retry) is harmless
    assert again.returncode == 0, again.stderr
    client = boto3.client(
        "s3",
        endpoint_url=dev_store.endpoint_url,
        region_name=dev_store.config["AWS_REGION"],
        aws_access_key_id=dev_store.keys["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=dev_store.keys["AWS_SECRET_ACCESS_KEY"],
    )
    client.put_object(Bucket=bucket, Key="cluster-1/probe", Body=b"x")
    assert client.get_object(Bucket=bucket, Key="cluster-1/probe")["Body"].read() == b"x"


def test_the_dev_store_refuses_other_keys(dev_store: DevStore, tmp_path: Path) -> None:
    refused = dev_store.run_job(dev_store.job_env(tmp_path, AWS_SECRET_ACCESS_KEY="not-the-dev-key"))
    assert refused.returncode != 0
    assert "SignatureDoesNotMatch" in refused.stderr or "AccessDenied" in refused.stderr
