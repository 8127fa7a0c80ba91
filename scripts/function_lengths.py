"""Length budgets: no function or method in the product packages over 70 lines, and no
module over 600.

A function's length is the count of source lines from its `def` (decorators not counted)
to its last line, as `ast` reports them (`end_lineno - lineno + 1`), so a docstring and
comments inside the body count. Every function and method in the product packages (the
top-level folders agent, metadata, compactor, fileformat, spark, cli) is checked; nested
functions are checked on their own and count inside their enclosing function too.

The functions already over the limit when the budget came in (issue 20) are listed in
`scripts/function_lengths_allowed.txt`, one `path:qualname` a line (`#` starts a comment),
where qualname is the dotted chain of enclosing classes and functions, e.g.
`agent/metrics.py:Metrics.collect`. The list may only shrink: an entry that is now within
the limit, or names no function, is an error as well, so the line must be deleted.

A module's length is its count of lines. The modules over 600 lines when that budget came
in are listed in `scripts/module_lengths_allowed.txt`, one `path ceiling` a line: such a
module may not grow past its ceiling, and an entry whose module is now within 600 lines, or
is gone, is an error (delete the line). Split a module by job, not by line count.

Usage: python scripts/function_lengths.py [--root DIR] [--allowlist FILE] [--max-lines N]
    [--module-allowlist FILE] [--max-module-lines N]
Exit status 0 when every function and module is within budget, 1 otherwise (one line per
problem).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from pathlib import Path

PACKAGES = ("agent", "metadata", "compactor", "fileformat", "spark", "cli")
MAX_LINES = 70
ALLOWLIST = Path("scripts") / "function_lengths_allowed.txt"
MAX_MODULE_LINES = 600
MODULE_ALLOWLIST = Path("scripts") / "module_lengths_allowed.txt"

_FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, _FunctionNode]]:
    """(qualname, node) of every function and method under `tree`, nested ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            name = f"{prefix}{node.name}"
            yield name, node
            yield from _functions(node, f"{name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            # Functions defined under `if`/`try`/`with` at module or class level.
            yield from _functions(node, prefix)


def function_lengths(root: Path) -> dict[str, int]:
    """`path:qualname` -> length in lines for every function in the product packages."""
    lengths: dict[str, int] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
            for qualname, node in _functions(tree):
                end = node.end_lineno if node.end_lineno is not None else node.lineno
                # Two same-named definitions (e.g. a property's getter and setter): keep the longer.
                key = f"{rel}:{qualname}"
                lengths[key] = max(lengths.get(key, 0), end - node.lineno + 1)
    return lengths


def read_allowlist(path: Path) -> list[str]:
    if not path.exists():
        return []
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        entry = line.split("#", 1)[0].strip()
        if entry:
            entries.append(entry)
    return entries


def problems(root: Path, allowlist: list[str], max_lines: int = MAX_LINES) -> list[str]:
    """One message per function over budget and per allowlist entry that must go."""
    lengths = function_lengths(root)
    allowed = set(allowlist)
    found = []
    for key, length in sorted(lengths.items()):
        if length > max_lines and key not in allowed:
            found.append(f"{key}: {length} lines, over the limit of {max_lines}: split it")
    for key in sorted(allowed):
        if key not in lengths:
            found.append(f"{key}: allowlisted but no such function: delete its line from the allowlist")
        elif lengths[key] <= max_lines:
            found.append(
                f"{key}: allowlisted but now {lengths[key]} lines, within the limit of {max_lines}: "
                "delete its line from the allowlist"
            )
    return found


def module_lengths(root: Path) -> dict[str, int]:
    """path -> lines for every module in the product packages."""
    return {
        path.relative_to(root).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for package in PACKAGES
        for path in sorted((root / package).rglob("*.py"))
    }


def read_module_allowlist(path: Path) -> dict[str, int]:
    """`path ceiling` lines -> {path: ceiling}; a line without a whole-number ceiling is an error."""
    ceilings = {}
    for entry in read_allowlist(path):
        name, _, ceiling = entry.partition(" ")
        if not ceiling.strip().isdigit():
            raise SystemExit(f"{path}: {entry!r}: expected 'path ceiling', e.g. 'agent/config.py 726'")
        ceilings[name] = int(ceiling)
    return ceilings


def module_problems(root: Path, ceilings: dict[str, int], max_lines: int = MAX_MODULE_LINES) -> list[str]:
    """One message per module over budget or its ceiling, and per allowlist entry that must go."""
    lengths = module_lengths(root)
    found = []
    for name, length in sorted(lengths.items()):
        ceiling = ceilings.get(name)
        if length > max_lines and ceiling is None:
            found.append(f"{name}: {length} lines, over the module limit of {max_lines}: split it by job")
        elif ceiling is not None and length > max(ceiling, max_lines):
            found.append(
                f"{name}: {length} lines, over its allowlisted ceiling of {ceiling}: split it by job "
                "(the ceilings only come down)"
            )
    for name in sorted(ceilings):
        if name not in lengths:
            found.append(f"{name}: allowlisted but no such module: delete its line from the module allowlist")
        elif lengths[name] <= max_lines:
            found.append(
                f"{name}: allowlisted but now {lengths[name]} lines, within the module limit of "
                f"{max_lines}: delete its line from the module allowlist"
            )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_root = Path(__file__).resolve().parent.parent
    parser.add_argument("--root", type=Path, default=default_root, help="the repository's top folder")
    parser.add_argument("--allowlist", type=Path, help=f"default: ROOT/{ALLOWLIST.as_posix()}")
    parser.add_argument("--max-lines", type=int, default=MAX_LINES)
    parser.add_argument("--module-allowlist", type=Path, help=f"default: ROOT/{MODULE_ALLOWLIST.as_posix()}")
    parser.add_argument("--max-module-lines", type=int, default=MAX_MODULE_LINES)
    args = parser.parse_args(argv)
    allowlist_path = args.allowlist if args.allowlist is not None else args.root / ALLOWLIST
    module_path = args.module_allowlist if args.module_allowlist is not None else args.root / MODULE_ALLOWLIST
    found = problems(args.root, read_allowlist(allowlist_path), args.max_lines)
    found_modules = module_problems(args.root, read_module_allowlist(module_path), args.max_module_lines)
    for line in found + found_modules:
        print(line)
    if found:
        print(f"{len(found)} function-length problem(s); the allowlist is {allowlist_path}", file=sys.stderr)
    if found_modules:
        print(
            f"{len(found_modules)} module-length problem(s); the allowlist is {module_path}", file=sys.stderr
        )
    return 1 if found or found_modules else 0


if __name__ == "__main__":
    sys.exit(main())
