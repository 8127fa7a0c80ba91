"""docs/architecture.md names every module (scripts/module_map.py generates the list)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _load():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("module_map", ROOT / "scripts" / "module_map.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["module_map"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_the_module_map_is_current() -> None:
    assert _load().main(["--check"]) == 0, "run: python scripts/module_map.py"


def test_the_map_lists_each_module_with_its_docstring(tmp_path: Path) -> None:
    mm = _load()
    (tmp_path / "agent" / "net").mkdir(parents=True)
    (tmp_path / "agent" / "__init__.py").write_text('"""The agent."""\n')
    (tmp_path / "agent" / "net" / "__init__.py").write_text("")
    (tmp_path / "agent" / "net" / "server.py").write_text(
        '"""The listener. More words here.\\n\\nDetail."""\n'
    )
    for p in mm.PACKAGES:
        (tmp_path / p).mkdir(exist_ok=True)
    text = mm.render(tmp_path)
    assert "| `skiff.agent.net.server` | The listener. |" in text
    assert "| `skiff.agent` | 3 (subpackages: 1) |" in text
    doc = f"before\n{mm.START}\nold\n{mm.END}\nafter"
    assert mm.rewrite(doc, "NEW") == "before\nNEW\nafter"
