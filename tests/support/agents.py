"""Pytest plugin: real Skiff processes for end-to-end tests.

- `playground`: `skiff playground` as a subprocess on free ports with a temporary data
  directory (SQLite + file:// bucket), yielding its bootstrap address.
- `spawn_skiff`: a factory for `skiff <args>` subprocesses (`skiff metadata`, `skiff agent`,
  ...) on free ports, for multi-agent clusters over a real S3 server and PostgreSQL.
- `agent_args`: the `skiff agent` arguments most tests start it with (a bucket, a metadata
  URL, 127.0.0.1 and the port `spawn_skiff` picks).

Every process logs to a file in the test's temp dir; a process that does not come up in
time fails the test with its log, and every process is killed at teardown.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.s3servers import free_port

REPO = Path(__file__).resolve().parents[2]


def wait_for_port(
    port: int, proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 30.0, *, unless: str | None = None
) -> bool:
    """Until something listens on `port` (True); False as soon as `log` holds `unless` (the
    process said it could not take the port); a failed test if the process exits or time
    runs out first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if unless is not None and unless in log.read_text(errors="replace"):
            return False
        if proc.poll() is not None:
            pytest.fail(
                f"process exited with {proc.returncode} before listening on {port}:\n{log.read_text()}"
            )
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"nothing listened on port {port} within {timeout_s}s:\n{log.read_text()}")


def skiff_command() -> list[str]:
    exe = shutil.which("skiff", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "skiff.cli"]


def child_pids(pid: int) -> list[int]:
    """The live (not zombie) processes whose parent is `pid`, from /proc: a pod's workers."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                out.append(int(entry))
    return out


def agent_args(bucket_url: str, metadata_url: str, *extra: str) -> list[str]:
    """`skiff agent` on `bucket_url` and `metadata_url`, listening on 127.0.0.1 at the port
    `spawn_skiff` substitutes for `{port}`; `extra` arguments follow."""
    return [
        "agent",
        "--bucket",
        bucket_url,
        "--metadata",
        metadata_url,
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
        *extra,
    ]


@dataclass
class SkiffProcess:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    metrics_port: int | None = None  # /metrics, /healthz and /readyz, when `{metrics_port}` chose it

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def alive(self) -> bool:
        return self.proc.poll() is None


# What a skiff process logs when a port chosen for it was taken in the meantime: free_port()
# closes its probe socket before the process binds, and another process (a client's outgoing
# connection, another test's server) may take the port in between. The Kafka listener's clash
# stops the process with a one-line error; the /metrics endpoint's is logged and the process
# runs without it (agent.metrics.serve_metrics), which a test would only notice much later
# as "connection refused".
KAFKA_PORT_TAKEN = "already in use"
METRICS_PORT_TAKEN = "cannot serve /metrics"
SPAWN_ATTEMPTS = 3


def _spawn(
    args: list[str], port: int, log: Path, env: dict[str, str] | None = None, metrics_port: int | None = None
) -> SkiffProcess:
    full_env = {**os.environ, **(env or {})}
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    with log.open("ab") as out:
        proc = subprocess.Popen(
            skiff_command() + args, stdout=out, stderr=subprocess.STDOUT, env=full_env, cwd=str(REPO)
        )
    p = SkiffProcess(proc, port, log, args, env or {}, metrics_port)
    try:
        wait_for_port(port, proc, log)
        if metrics_port is not None and not wait_for_port(metrics_port, proc, log, unless=METRICS_PORT_TAKEN):
            pytest.fail(f"{METRICS_PORT_TAKEN} on {metrics_port}:\n{log.read_text()}")
    except BaseException:  # pytest.fail is one: the process must not outlive the failed set-up
        p.kill()
        raise
    return p


def _port_taken(log: Path) -> bool:
    text = log.read_text(errors="replace")
    return KAFKA_PORT_TAKEN in text or METRICS_PORT_TAKEN in text


@pytest.fixture
def spawn_skiff(tmp_path: Path) -> Iterator[Callable[..., SkiffProcess]]:
    """Start `skiff <args>` with `{port}` (and `{metrics_port}`, when an argument holds it)
    substituted by free ports, each answering before this returns; killed at teardown. A
    chosen port taken before the process bound it is chosen again (SPAWN_ATTEMPTS times):
    the race free_port() cannot close is the harness's, not the product's."""
    started: list[SkiffProcess] = []

    def spawn(*args: str, env: dict[str, str] | None = None, port: int | None = None) -> SkiffProcess:
        wants_metrics = any("{metrics_port}" in a for a in args)
        for attempt in range(1, SPAWN_ATTEMPTS + 1):
            chosen = port or free_port()
            metrics_port = free_port() if wants_metrics else None
            argv = [
                a.replace("{port}", str(chosen)).replace("{metrics_port}", str(metrics_port)) for a in args
            ]
            log = tmp_path / f"skiff-{len(started)}-{argv[0]}-{attempt}.log"
            try:
                p = _spawn(argv, chosen, log, env, metrics_port)
            except pytest.fail.Exception:
                if port is not None or attempt == SPAWN_ATTEMPTS or not _port_taken(log):
                    raise
                continue
            started.append(p)
            return p
        raise AssertionError("unreachable")

    yield spawn
    for p in started:
        p.kill(signal.SIGTERM)


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port with a listener on 127.0.0.1 (taken) for the test's duration."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


@pytest.fixture(scope="module")
def playground(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("playground")
    port, mport = free_port(), free_port()
    log = data / "playground.log"
    p = _spawn(
        ["playground", "--data-dir", str(data / "data"), "--port", str(port), "--metadata-port", str(mport)],
        port,
        log,
        {"SKIFF_DEFAULT_PARTITIONS": "3"},
    )
    yield p.bootstrap
    p.kill(signal.SIGTERM)
