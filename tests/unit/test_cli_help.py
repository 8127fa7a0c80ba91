"""Every flag of every `skiff` subcommand has help text naming its default and, when the
code reads one for it, its environment variable.

Which variable feeds which flag is found by behaviour, not by reading the code: for every
`SKIFF_*` name in the CLI's sources the parser is built again with that variable set, and
each flag whose default changed reads it. Flags whose environment is read after parsing
(the agent's config fields) say so in their help already (`[env SKIFF_...; default ...]`).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from skiff.cli import _build_parser

CLI_DIR = Path(__file__).resolve().parents[2] / "cli"
SENTINELS = ("12345", "true")  # an int parses both ways; a bool only from the second


def _parsers(
    parser: argparse.ArgumentParser, path: str = "skiff"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, f"{path} {name}")


def _flags(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser, argparse.Action]]:
    for path, p in _parsers(parser):
        for action in p._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            yield path, p, action


def _key(path: str, action: argparse.Action) -> str:
    return f"{path} {'/'.join(action.option_strings) or action.dest}"


def _defaults(parser: argparse.ArgumentParser) -> dict[str, object]:
    return {_key(path, a): a.default for path, _, a in _flags(parser)}


def _env_names() -> set[str]:
    text = "\n".join(p.read_text() for p in CLI_DIR.glob("*.py"))
    return set(re.findall(r"\bSKIFF_[A-Z0-9_]*[A-Z0-9]\b", text))


def _readers(env: str, baseline: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> set[str]:
    for value in SENTINELS:
        with monkeypatch.context() as m:
            m.setenv(env, value)
            try:
                changed = _defaults(_build_parser())
            except (ValueError, SystemExit):
                continue
        return {k for k, v in changed.items() if v != baseline[k]}
    return set()


def _has_default(action: argparse.Action) -> bool:
    """A flag whose default is a value to name (not unset, not a switch's off)."""
    return bool(action.option_strings) and action.default not in (None, False, [], argparse.SUPPRESS)


def test_every_flag_has_help_with_its_default() -> None:
    bare = []
    for path, _, action in _flags(_build_parser()):
        text = action.help or ""
        if not text or text == argparse.SUPPRESS:
            bare.append(_key(path, action))
        elif _has_default(action) and "default" not in text:
            bare.append(f"{_key(path, action)} (no default named)")
    assert bare == []


def test_every_env_variable_is_named_in_its_flags_help(monkeypatch: pytest.MonkeyPatch) -> None:
    for env in _env_names():
        monkeypatch.delenv(env, raising=False)
    baseline = _defaults(_build_parser())
    helps = {_key(path, a): a.help or "" for path, _, a in _flags(_build_parser())}
    missing = []
    found = 0
    for env in sorted(_env_names()):
        for key in _readers(env, baseline, monkeypatch):
            found += 1
            if env not in helps[key]:
                missing.append(f"{key}: reads {env}")
    assert found > 10  # the detection works: many flags read the environment
    assert missing == []


def test_help_renders_for_every_subcommand() -> None:
    """`%(default)s` and friends expand: a bad format string fails here, not at a user's --help."""
    for _, p in _parsers(_build_parser()):
        assert p.format_help()
