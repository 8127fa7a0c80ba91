"""The packages install and import as one namespace, `skiff.*`, and nothing generic.

pyproject.toml lists every subpackage by hand (setuptools' `find` cannot map the top-level
folders into `skiff`): a folder with an `__init__.py` missing from the list would be left out
of a wheel, so this test compares the two. A second check runs Python from outside the
checkout, where only what was installed is importable."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("agent", "metadata", "compactor", "fileformat", "spark", "cli")


def test_every_package_folder_is_installed_under_skiff() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    on_disk = {
        "skiff." + ".".join(init.parent.relative_to(ROOT).parts)
        for folder in FOLDERS
        for init in (ROOT / folder).rglob("__init__.py")
    }
    assert on_disk - listed == set(), "add these to [tool.setuptools] packages"
    assert listed - on_disk == set(), "these are listed but have no folder"
    assert config["package-dir"] == {f"skiff.{f}": f for f in FOLDERS}
    assert not any(p.split(".")[0] in FOLDERS for p in listed), "a generic top-level package"


def test_outside_the_checkout_only_the_skiff_namespace_imports(tmp_path: Path) -> None:
    script = (
        "import importlib.util as u, json\n"
        f"print(json.dumps({{n: u.find_spec(n) is not None for n in {list(FOLDERS)}}}))\n"
        "import skiff.agent.handlers, skiff.metadata.wire.http_client, skiff.compactor.dedup, "
        "skiff.fileformat.segment, skiff.spark, skiff.cli\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    found = done.stdout.strip().splitlines()[-1]
    assert json.loads(found) == dict.fromkeys(FOLDERS, False), "a generic top-level name is importable"
