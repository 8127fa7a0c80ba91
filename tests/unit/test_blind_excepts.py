"""Blind excepts only at documented boundaries (issue 20).

A blind except is `except:`, `except Exception` or `except BaseException` (alone or in a
tuple). In the product packages each one must either re-raise what it caught (a bare
`raise` as the handler's last statement: cleanup on the way out, nothing swallowed) or be
a boundary that says so on its `except` line with a `# boundary: <why>` comment: a task's
top level that must not die, a connection's handler loop, a command line's top level.
Everything else catches the exceptions that really occur.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("agent", "metadata", "compactor", "fileformat", "spark", "cli")
MARKER = "# boundary:"
BLIND = {"Exception", "BaseException"}

EXEMPT: set[str] = set()  # no file is exempt
EXEMPT_PREFIXES: tuple[str, ...] = ()


def _is_blind(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(n, ast.Name) and n.id in BLIND for n in names)


def _reraises(handler: ast.ExceptHandler) -> bool:
    last = handler.body[-1]
    return isinstance(last, ast.Raise) and last.exc is None


def blind_excepts_without_marker(source: str) -> list[int]:
    """Line numbers of the blind excepts in `source` that neither re-raise nor carry the marker."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        blind = isinstance(node, ast.ExceptHandler) and _is_blind(node) and not _reraises(node)
        if blind and MARKER not in lines[node.lineno - 1]:
            found.append(node.lineno)
    return sorted(found)


def _exempt(rel: str) -> bool:
    return rel in EXEMPT or rel.startswith(EXEMPT_PREFIXES)


def test_the_check_finds_blind_excepts_and_accepts_boundaries_and_reraises() -> None:
    source = (
        "try:\n    a()\nexcept Exception:\n    pass\n"  # 3: blind
        "try:\n    a()\nexcept:\n    pass\n"  # 7: bare
        "try:\n    a()\nexcept (ValueError, BaseException) as e:\n    log(e)\n"  # 11: in a tuple
        "try:\n    a()\nexcept Exception:  # boundary: the task must not die\n    pass\n"
        "try:\n    a()\nexcept BaseException:\n    cleanup()\n    raise\n"  # re-raises
        "try:\n    a()\nexcept (OSError, ValueError):\n    pass\n"  # narrow
    )
    assert blind_excepts_without_marker(source) == [3, 7, 11]


def test_product_packages_have_blind_excepts_only_at_documented_boundaries() -> None:
    offenders = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if _exempt(rel):
                continue
            for line in blind_excepts_without_marker(path.read_text(encoding="utf-8")):
                offenders.append(f"{rel}:{line}")
    assert offenders == [], (
        "blind except without a `# boundary: <why>` comment on its line: catch the exceptions "
        "that really occur, or document the boundary"
    )


def test_exemptions_name_existing_files() -> None:
    for rel in EXEMPT:
        assert (REPO / rel).exists(), f"{rel} is gone: take it off EXEMPT"
