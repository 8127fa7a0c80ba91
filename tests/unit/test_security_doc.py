"""docs/security.md's authorization table is the one generated from the handlers'
declarations (`python -m skiff.agent.handlers.access_table`): the docs cannot drift from the code."""

from __future__ import annotations

from pathlib import Path

from skiff.agent.handlers.access_table import registry_table

DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"
START = "<!-- generated: authorization table (python -m skiff.agent.handlers.access_table) -->\n"
END = "<!-- end of generated table -->"


def test_the_security_guide_holds_the_generated_authorization_table() -> None:
    text = DOC.read_text()
    assert START in text and END in text
    table = text.split(START, 1)[1].split(END, 1)[0]
    assert table == registry_table(), "regenerate: python -m skiff.agent.handlers.access_table"


def test_the_table_names_every_advertised_api() -> None:
    table = registry_table()
    for name in (
        "AlterUserScramCredentials (51)",
        "DescribeUserScramCredentials (50)",
        "ListTransactions (66)",
    ):
        assert name in table
