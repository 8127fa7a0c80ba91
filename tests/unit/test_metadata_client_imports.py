"""The HTTP metadata client is cheap to import: a fresh interpreter that imports it (or
opens an HTTP client through `metadata.wire.connect.open_metadata_client`) has loaded no
SQLAlchemy, no database driver and none of the service or server modules. The
import-linter contract in pyproject.toml checks the static imports; this checks what
actually gets loaded, lazy imports and package __init__ files included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEAVY = [
    "sqlalchemy",
    "alembic",
    "psycopg",
    "fastapi",
    "skiff.metadata.service",
    "skiff.metadata.db",
    "skiff.metadata.server.app",
]


def _loaded_after(code: str) -> list[str]:
    probe = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "code",
    [
        "import skiff.metadata.wire.http_client",
        "from skiff.metadata.wire.connect import open_metadata_client\n"
        "c = open_metadata_client('http://127.0.0.1:1')\n"
        "assert type(c).__name__ == 'HttpMetadataClient'",
    ],
)
def test_http_client_loads_no_database_code(code: str) -> None:
    modules = _loaded_after(code)
    assert "httpx" in modules and "skiff.metadata.wire.http_client" in modules
    loaded = [m for m in HEAVY if m in modules or any(x.startswith(m + ".") for x in modules)]
    assert loaded == []


def test_the_probe_sees_the_database_side_when_it_is_loaded() -> None:
    """The same probe notices SQLAlchemy when the in-process client is imported (so the
    test above cannot pass by looking at the wrong interpreter)."""
    modules = _loaded_after("import skiff.metadata.server.local_client")
    assert "sqlalchemy" in modules and "skiff.metadata.service" in modules
