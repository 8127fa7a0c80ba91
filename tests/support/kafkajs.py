"""KafkaJS, the Node.js Kafka client, for the tests that check what its own suite found
(issue 23 item 6). A pytest plugin module. Fixture:

* `kafkajs` (session scope) -> `KafkaJS`: `tests/js/kafkajs_admin.js` with KafkaJS installed,
  `KafkaJS.admin(bootstrap, operation, *args)` runs one admin operation and returns its one
  JSON answer.

Where KafkaJS comes from: `tests/js/package.json` pins it (2.2.4, no dependencies of its own);
the first use copies it to `.cache/js/` in the repo root (git-ignored) and runs `npm install`
there from the npm registry, under a file lock (parallel sessions install once); later runs
and sessions reuse it (reinstalled when package.json changes). Node.js and npm come from
Debian's packages (scripts/system-deps.sh). A missing `node` or `npm` or a failed install FAILS
the test (pytest.fail); nothing here skips.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SOURCE_DIR = REPO_ROOT / "tests" / "js"
CACHE_DIR = REPO_ROOT / ".cache" / "js"
INSTALL_TIMEOUT_S = 300
RUN_TIMEOUT_S = 60


class KafkaJSError(AssertionError):
    pass


@dataclass(frozen=True)
class KafkaJS:
    node: str
    directory: Path  # holds node_modules/kafkajs and the scripts

    def admin(self, bootstrap: str, operation: str, *args: object) -> dict[str, Any]:
        done = subprocess.run(
            [self.node, str(self.directory / "kafkajs_admin.js"), bootstrap, operation, *map(str, args)],
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            cwd=self.directory,
        )
        if done.returncode != 0:
            raise KafkaJSError(f"kafkajs {operation} failed ({done.returncode}): {done.stderr.strip()}")
        answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return answer


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _install(node: str, npm: str) -> Path:
    stamp = hashlib.sha256((SOURCE_DIR / "package.json").read_bytes()).hexdigest()[:16]
    with _locked(CACHE_DIR / ".lock"):
        for script in SOURCE_DIR.glob("*.js"):  # the scripts change more often than the package
            shutil.copy2(script, CACHE_DIR / script.name)
        marker = CACHE_DIR / f".installed-{stamp}"
        if marker.exists() and (CACHE_DIR / "node_modules" / "kafkajs").is_dir():
            return CACHE_DIR
        shutil.copy2(SOURCE_DIR / "package.json", CACHE_DIR / "package.json")
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--no-package-lock"],
            cwd=CACHE_DIR,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
        )
        if done.returncode != 0:
            pytest.fail(f"npm install of KafkaJS failed in {CACHE_DIR}: {done.stderr.strip()[-2000:]}")
        for old in CACHE_DIR.glob(".installed-*"):
            old.unlink()
        marker.touch()
        return CACHE_DIR


@pytest.fixture(scope="session")
def kafkajs() -> KafkaJS:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail(
            "KafkaJS needs Node.js and npm on PATH (scripts/system-deps.sh installs Debian's nodejs and npm)"
        )
    return KafkaJS(node, _install(node, npm))
