"""The module map of docs/architecture.md, generated from the code so that it cannot drift.

Every module of the product packages (agent, metadata, compactor, fileformat, spark, cli;
not the migrations' version scripts), grouped by package, with the first sentence of its
docstring, and the number of modules per package. Written between the markers
`<!-- module-map:start -->` and `<!-- module-map:end -->` of docs/architecture.md.

    python scripts/module_map.py           # rewrite the section
    python scripts/module_map.py --check   # exit 1 if the section is stale (CI, a unit test)
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("fileformat", "metadata", "agent", "compactor", "spark", "cli")
DOC = ROOT / "docs" / "architecture.md"
START, END = "<!-- module-map:start -->", "<!-- module-map:end -->"


def _summary(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    first = " ".join(doc.split("\n\n")[0].split())
    end = first.find(". ")
    return (first if end < 0 else first[: end + 1]).replace("|", "\\|")


def _modules(root: Path, package: str) -> list[tuple[str, Path]]:
    out = []
    for path in sorted((root / package).rglob("*.py")):
        rel = path.relative_to(root)
        if "versions" in rel.parts or path.name == "__main__.py":
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out.append(("skiff." + ".".join(parts), path))
    return out


def render(root: Path = ROOT) -> str:
    lines = [START, "", "| package | modules |", "|---|---|"]
    tables: list[str] = []
    for package in PACKAGES:
        mods = _modules(root, package)
        subpackages = [m for m, p in mods if p.name == "__init__.py" and m != f"skiff.{package}"]
        lines.append(f"| `skiff.{package}` | {len(mods)} (subpackages: {len(subpackages)}) |")
        tables += ["", f"**`skiff.{package}`**", "", "| module | what it is |", "|---|---|"]
        tables += [f"| `{name}` | {_summary(path)} |" for name, path in mods]
    return "\n".join([*lines, *tables, "", END])


def rewrite(text: str, section: str) -> str:
    start, end = text.index(START), text.index(END) + len(END)
    return text[:start] + section + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate the module map of docs/architecture.md.")
    parser.add_argument("--check", action="store_true", help="exit 1 if the section is stale")
    args = parser.parse_args(argv)
    text = DOC.read_text(encoding="utf-8")
    new = rewrite(text, render())
    if args.check:
        if new != text:
            print(
                "docs/architecture.md's module map is stale: run python scripts/module_map.py",
                file=sys.stderr,
            )
            return 1
        return 0
    DOC.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
