"""scripts/function_lengths.py: the 70-line budget per function, the 600-line budget per module,
and their shrinking allowlists."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "function_lengths.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("function_lengths", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fl = _load()


def _function(name: str, body_lines: int, indent: str = "") -> str:
    """A function of exactly `body_lines + 1` lines (its def and `body_lines` statements)."""
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(body_lines))
    return f"{indent}def {name}():\n{body}"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    agent = tmp_path / "agent"
    (agent / "handlers").mkdir(parents=True)
    (agent / "__init__.py").write_text("")
    (agent / "short.py").write_text(_function("fine", 69))  # 70 lines: at the limit
    (agent / "handlers" / "long.py").write_text(
        _function("too_long", 70)  # 71 lines
        + "\n\nclass Box:\n"
        + _function("method", 80, indent="    ")  # 81 lines
    )
    (tmp_path / "compactor").mkdir()
    (tmp_path / "compactor" / "old.py").write_text(_function("legacy", 100))
    # Not a product package: never checked.
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(_function("test_long", 200))
    return tmp_path


def _write_allowlist(root: Path, *entries: str) -> Path:
    path = root / "scripts" / "function_lengths_allowed.txt"
    path.parent.mkdir(exist_ok=True)
    path.write_text("# today's offenders\n" + "".join(f"{e}\n" for e in entries))
    return path


def test_lengths_count_def_to_last_line_with_qualnames(tree: Path) -> None:
    lengths = fl.function_lengths(tree)
    assert lengths == {
        "agent/short.py:fine": 70,
        "agent/handlers/long.py:too_long": 71,
        "agent/handlers/long.py:Box.method": 81,
        "compactor/old.py:legacy": 101,
    }


def test_over_long_functions_fail_unless_allowlisted(tree: Path) -> None:
    _write_allowlist(tree, "compactor/old.py:legacy  # split pending")
    found = fl.problems(tree, fl.read_allowlist(tree / fl.ALLOWLIST))
    assert len(found) == 2
    assert found[0].startswith("agent/handlers/long.py:Box.method: 81 lines")
    assert found[1].startswith("agent/handlers/long.py:too_long: 71 lines")


def test_everything_allowlisted_passes_through_the_command_line(tree: Path) -> None:
    _write_allowlist(
        tree,
        "compactor/old.py:legacy",
        "agent/handlers/long.py:too_long",
        "agent/handlers/long.py:Box.method",
    )
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(tree)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == ""


def test_the_allowlist_only_shrinks(tree: Path) -> None:
    # An allowlisted function now within the limit, and one that no longer exists: both
    # must be taken off the list.
    allowlist = _write_allowlist(
        tree,
        "compactor/old.py:legacy",
        "agent/handlers/long.py:too_long",
        "agent/handlers/long.py:Box.method",
        "agent/short.py:fine",
        "agent/gone.py:removed",
    )
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(tree), "--allowlist", str(allowlist)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines == [
        "agent/gone.py:removed: allowlisted but no such function: delete its line from the allowlist",
        "agent/short.py:fine: allowlisted but now 70 lines, within the limit of 70: "
        "delete its line from the allowlist",
    ]


def test_the_repository_keeps_its_budget() -> None:
    assert fl.problems(REPO, fl.read_allowlist(REPO / fl.ALLOWLIST)) == []


def _module(root: Path, rel: str, lines: int) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"x{i} = {i}\n" for i in range(lines)))


def test_modules_over_600_lines_fail_unless_allowlisted_under_their_ceiling(tmp_path: Path) -> None:
    _module(tmp_path, "agent/fine.py", 600)
    _module(tmp_path, "agent/big.py", 601)
    _module(tmp_path, "cli/listed.py", 650)
    _module(tmp_path, "cli/grown.py", 700)
    _module(tmp_path, "tests/huge.py", 5000)  # not a product package
    assert fl.module_lengths(tmp_path) == {
        "agent/big.py": 601,
        "agent/fine.py": 600,
        "cli/grown.py": 700,
        "cli/listed.py": 650,
    }
    found = fl.module_problems(tmp_path, {"cli/listed.py": 650, "cli/grown.py": 690})
    assert found == [
        "agent/big.py: 601 lines, over the module limit of 600: split it by job",
        "cli/grown.py: 700 lines, over its allowlisted ceiling of 690: split it by job (the ceilings only come down)",
    ]


def test_the_module_allowlist_only_shrinks(tmp_path: Path) -> None:
    _module(tmp_path, "agent/split.py", 400)
    path = tmp_path / "scripts" / "module_lengths_allowed.txt"
    path.parent.mkdir()
    path.write_text("# offenders\nagent/split.py 640\nagent/gone.py 700  # deleted\n")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "agent/gone.py: allowlisted but no such module: delete its line from the module allowlist",
        "agent/split.py: allowlisted but now 400 lines, within the module limit of 600: "
        "delete its line from the module allowlist",
    ]
    path.write_text("agent/split.py\n")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 1 and "expected 'path ceiling'" in done.stderr


def test_the_repository_keeps_its_module_budget() -> None:
    assert fl.module_problems(REPO, fl.read_module_allowlist(REPO / fl.MODULE_ALLOWLIST)) == []
