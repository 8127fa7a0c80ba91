"""`skiff schemas` (cli/schemas.py) as a user runs it: a `skiff` process against a metadata service
over HTTP with tokens (writer registers, admin deletes and sets config), its output piped
(plain text or --json), refusals as one line with Confluent's code, and what it registered
seen by Confluent's own registry client at the same URL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from skiff.metadata.server.app import create_app
from skiff.metadata.server.auth import TokenTable
from skiff.metadata.service import MetadataService

from tests.support.served_app import Served

TOKENS = {role: f"{role}-token-{'z' * 24}" for role in ("reader", "writer", "admin")}
V1 = '{"type":"record","name":"User","fields":[{"name":"name","type":"string"}]}'
V2 = '{"type":"record","name":"User","fields":[{"name":"name","type":"string"},{"name":"age","type":"int","default":0}]}'
BAD = '{"type":"record","name":"User","fields":[{"name":"name","type":"string"},{"name":"x","type":"int"}]}'


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    svc = MetadataService.from_url(f"sqlite:///{tmp_path}/m.db")
    tokens = TokenTable.parse("\n".join(f"{r}:{t}" for r, t in TOKENS.items()), "test")
    served = Served(create_app(svc, tokens=tokens))
    try:
        yield served.url()
    finally:
        served.close()
        svc.close()


def _skiff(url: str, role: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SKIFF_"))}
    env.update(SKIFF_METADATA_URL=url, SKIFF_METADATA_TOKEN=TOKENS[role])
    return subprocess.run(
        [sys.executable, "-m", "skiff.cli", "schemas", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        input=stdin,
    )


def test_register_get_check_config_delete(url: str, tmp_path: Path) -> None:
    (tmp_path / "v1.avsc").write_text(V1)
    reg = _skiff(url, "writer", "register", "users-value", "--schema", str(tmp_path / "v1.avsc"))
    assert (reg.returncode, reg.stdout.strip(), reg.stderr) == (0, "users-value version 1: schema id 1", "")
    piped = _skiff(url, "writer", "register", "users-value", "--schema", "-", "--json", stdin=V2)
    assert piped.returncode == 0 and json.loads(piped.stdout)["version"] == 2
    listed = _skiff(url, "reader", "list", "--json")
    assert json.loads(listed.stdout) == ["users-value"]
    got = _skiff(url, "reader", "get", "users-value", "--version", "1")
    assert got.stdout.splitlines() == ["subject users-value version 1 id 1 type AVRO", V1]
    check = _skiff(url, "reader", "check", "users-value", "--schema", "-", stdin=BAD)
    assert check.returncode == 1 and check.stdout.startswith("incompatible:")
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in check.stdout
    refused = _skiff(url, "writer", "register", "users-value", "--schema", "-", stdin=BAD)
    assert refused.returncode == 1 and refused.stdout == ""
    assert len(refused.stderr.splitlines()) == 1 and refused.stderr.startswith("skiff schemas: error 409:")
    # writers register but do not change config; admin does
    denied = _skiff(url, "writer", "config", "users-value", "--compatibility", "none")
    assert denied.returncode == 1 and "needs the role admin" in denied.stderr
    assert (
        _skiff(url, "admin", "config", "users-value", "--compatibility", "none").stdout.strip()
        == "users-value: NONE"
    )
    assert _skiff(url, "writer", "register", "users-value", "--schema", "-", stdin=BAD).returncode == 0
    deleted = _skiff(url, "admin", "delete", "users-value", "--version", "latest")
    assert deleted.stdout.strip() == "users-value version 3 deleted"
    with SchemaRegistryClient({"url": url, "basic.auth.user.info": f"r:{TOKENS['reader']}"}) as sr:
        assert sr.get_versions("users-value") == [1, 2]
        assert sr.get_compatibility("users-value") == "NONE"


def test_usage_errors_are_one_line(url: str) -> None:
    bad_version = _skiff(url, "reader", "get", "users-value", "--version", "zero")
    assert bad_version.returncode == 1
    assert bad_version.stderr.strip() == "skiff schemas: --version must be a number or latest, got 'zero'"
    missing = _skiff(url, "reader", "get", "nope")
    assert missing.stderr.strip() == "skiff schemas: error 40401: Subject 'nope' not found."
    bad_ref = _skiff(url, "writer", "register", "s", "--schema", "-", "--reference", "x", stdin=V1)
    assert bad_ref.stderr.strip() == "skiff schemas: --reference must be NAME=SUBJECT:VERSION, got 'x'"
    no_level = _skiff(url, "admin", "config", "--compatibility", "sideways")
    assert no_level.returncode == 2 and "invalid choice" in no_level.stderr
