"""Every shell command README.md and docs/*.md show is run by a test or listed, with its
reason, as one that cannot run here (tests/support/doc_commands.py): a command added to the
docs fails this test until it is classified, and a classified command that left the docs
fails it too."""

from __future__ import annotations

from collections import Counter

from tests.support.doc_commands import CANNOT_RUN, RUN_ELSEWHERE, RUN_HERE, all_commands, commands_of


def test_every_documented_command_is_classified_once() -> None:
    keys = {c.key for c in all_commands()}
    lists = [*RUN_HERE, *RUN_ELSEWHERE, *CANNOT_RUN]
    assert [k for k, n in Counter(lists).items() if n > 1] == []
    assert sorted(keys - set(lists)) == [], "documented commands no test runs and no reason excuses"
    assert sorted(set(lists) - keys) == [], "classified commands the docs no longer show"


def test_every_exclusion_says_why() -> None:
    assert all(len(reason) > 30 for reason in [*CANNOT_RUN.values(), *RUN_ELSEWHERE.values()])
    assert len(RUN_HERE) + len(RUN_ELSEWHERE) >= len(CANNOT_RUN) // 2  # most of what can run, runs


def test_extraction_joins_continuations_and_heredocs() -> None:
    text = "```sh\n# a comment\nfoo --a \\\n  --b\n\npython - <<'EOF'\nprint(1)\n\nEOF\nbar\n```\n```\nnot a command\n```\n"
    assert [c.text for c in commands_of(text, "x.md")] == [
        "foo --a \\\n  --b",
        "python - <<'EOF'\nprint(1)\n\nEOF",
        "bar",
    ]
