"""Every `skiff` command fails with one line: `python -m skiff.cli ...` as a subprocess on
each expected failure path (metadata down, no S3 credentials, an unreachable bucket, a
missing object or file, a bad database URL, a port in use), asserting the exit code (1 for
runtime errors, 2 for usage errors), exactly one non-empty stderr line naming the cause,
and no traceback; with `--debug` (or SKIFF_DEBUG=1) the traceback is there.

Ports "in use" are held by a listening socket of this test; a "down" service is a port
this test bound and closed (nothing listens there).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from skiff.metadata.service import MetadataService

from tests.component.test_metadata_http import ServerThread

TIMEOUT_S = 120


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SKIFF_"))}
    env.update(extra)
    return env


def _skiff(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "skiff.cli", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=env if env is not None else _env(),
        stdin=subprocess.DEVNULL,
    )


def _one_line(proc: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _closed_port() -> int:
    """A port nothing listens on (bound and released: the kernel does not reuse it at once)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def metadata_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A metadata service on an empty SQLite database."""
    db = tmp_path_factory.mktemp("md") / "metadata.db"
    service = MetadataService.from_url(f"sqlite:///{db}")
    try:
        with ServerThread(service) as url:
            yield url
    finally:
        service.close()


def test_compact_with_metadata_down() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    proc = _skiff("compact", "--once", "--bucket", "memory://b", "--metadata", url)
    _one_line(proc, 1, "skiff compact:", "metadata")


def test_compact_without_s3_credentials(metadata_url: str, tmp_path: Path) -> None:
    env = _env(
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_EC2_METADATA_DISABLED="true",
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{_closed_port()}",
    )
    proc = _skiff("compact", "--once", "--bucket", "s3://skiff-missing", "--metadata", metadata_url, env=env)
    _one_line(proc, 1, "skiff compact:")


def test_compact_with_an_unreachable_bucket(metadata_url: str) -> None:
    env = _env(
        AWS_ACCESS_KEY_ID="test",
        AWS_SECRET_ACCESS_KEY="test",
        AWS_REGION="us-east-1",
        AWS_MAX_ATTEMPTS="1",
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{_closed_port()}",
    )
    proc = _skiff("compact", "--once", "--bucket", "s3://skiff-bucket", "--metadata", metadata_url, env=env)
    _one_line(proc, 1, "skiff compact:")


def test_compact_usage_error_is_exit_2(metadata_url: str) -> None:
    _one_line(_skiff("compact", "--once"), 2, "--metadata")
    # no --bucket and the metadata service serves none
    _one_line(_skiff("compact", "--once", "--metadata", metadata_url), 2, "--bucket")


@pytest.fixture(scope="module")
def metadata_with_bucket(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A metadata service that serves a bucket URL (memory://served)."""
    db = tmp_path_factory.mktemp("md") / "metadata.db"
    service = MetadataService.from_url(f"sqlite:///{db}", bucket_url="memory://served")
    try:
        with ServerThread(service) as url:
            yield url
    finally:
        service.close()


def test_compact_takes_the_bucket_from_metadata_and_refuses_another(metadata_with_bucket: str) -> None:
    fine = _skiff("compact", "--once", "--json", "--metadata", metadata_with_bucket)
    assert fine.returncode == 0, fine.stderr
    same = _skiff(
        "compact", "--once", "--json", "--metadata", metadata_with_bucket, "--bucket", "memory://served/"
    )
    assert same.returncode == 0, same.stderr
    other = _skiff("compact", "--once", "--metadata", metadata_with_bucket, "--bucket", "memory://elsewhere")
    _one_line(other, 1, "skiff compact:", "memory://elsewhere", "memory://served")


def test_inspect_missing_file_and_object(tmp_path: Path) -> None:
    missing = tmp_path / "nothing.seg"
    _one_line(_skiff("inspect", str(missing)), 1, "skiff inspect:", str(missing))
    _one_line(_skiff("inspect", "memory://b/segments/nothing.seg"), 1, "skiff inspect:", "not found")


def test_metadata_with_a_bad_db_url() -> None:
    proc = _skiff("metadata", "--db", "not a url", "--port", str(_closed_port()))
    _one_line(proc, 1, "skiff metadata:", "--db")


def test_metadata_with_its_port_in_use(held_port: int, tmp_path: Path) -> None:
    proc = _skiff("metadata", "--db", f"sqlite:///{tmp_path / 'md.db'}", "--port", str(held_port))
    _one_line(proc, 1, "skiff metadata:", str(held_port), "in use")


def test_agent_with_its_port_in_use(held_port: int) -> None:
    args = ["agent", "--bucket", "memory://b", "--metadata", "http://127.0.0.1:1"]
    proc = _skiff(*args, "--port", str(held_port), "--metrics-port", "0")
    _one_line(proc, 1, "skiff agent:", str(held_port), "in use")


@pytest.mark.parametrize("taken", ["kafka", "metadata"])
def test_playground_with_a_port_in_use(taken: str, held_port: int, tmp_path: Path) -> None:
    ports = {"kafka": str(_closed_port()), "metadata": str(_closed_port())}
    ports[taken] = str(held_port)
    proc = _skiff(
        "playground",
        "--data-dir",
        str(tmp_path),
        "--port",
        ports["kafka"],
        "--metadata-port",
        ports["metadata"],
        "--compaction-interval-ms",
        "0",
    )
    _one_line(proc, 1, "skiff playground:", str(held_port), "in use")
    assert "is up" not in proc.stdout


def test_debug_prints_the_traceback(tmp_path: Path) -> None:
    missing = str(tmp_path / "nothing.seg")
    for proc in (
        _skiff("--debug", "inspect", missing),
        _skiff("inspect", missing, env=_env(SKIFF_DEBUG="1")),
    ):
        assert proc.returncode == 1
        assert "Traceback" in proc.stderr
        assert proc.stderr.strip().splitlines()[-1].startswith("skiff inspect: no such file")
