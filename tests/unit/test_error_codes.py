"""Kafka error codes have one source, kio's `ErrorCode`: no product module defines its own
integer constant named like one (`metadata/errors.py` defines its names from kio's enum)."""

from __future__ import annotations

import ast
from pathlib import Path

from kio.schema.errors import ErrorCode
from skiff.metadata import errors

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("agent", "metadata", "compactor", "fileformat", "spark", "cli")
CODE_NAMES = {m.name.upper() for m in ErrorCode}

# Copies allowed (none: every module imports its names from skiff.metadata.errors or uses
# ErrorCode).
KNOWN_COPIES: dict[str, set[str]] = {}


def _is_int_literal(node: ast.expr | None) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) is int


def _code_copies(path: Path) -> set[str]:
    """Module-level `NAME = <int>` whose NAME is an ErrorCode member's, upper-cased (class
    bodies are not scanned: an enum's NONE = 0 is not a Kafka code)."""
    found = set()
    for node in ast.parse(path.read_text()).body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        for t in targets:
            if isinstance(t, ast.Name) and t.id in CODE_NAMES and _is_int_literal(value):
                found.add(t.id)
    return found


def test_no_product_module_copies_a_kafka_error_code() -> None:
    copies = {}
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            names = _code_copies(path)
            if names:
                copies[rel] = names
    assert "metadata/errors.py" not in copies  # it defines them from ErrorCode
    new = {f: n - KNOWN_COPIES.get(f, set()) for f, n in copies.items()}
    assert {f: n for f, n in new.items() if n} == {}, "use kio's ErrorCode (or skiff.metadata.errors)"
    stale = {f: n - copies.get(f, set()) for f, n in KNOWN_COPIES.items()}
    assert {f: n for f, n in stale.items() if n} == {}, "a copy is gone: shrink KNOWN_COPIES"


def test_metadata_error_names_are_kios_numbers() -> None:
    for name in CODE_NAMES:
        if hasattr(errors, name):
            assert getattr(errors, name) == ErrorCode[name.lower()], name
    assert ErrorCode.illegal_generation == errors.CONFLICT
