"""Print the authorization table of docs/security.md, generated from the handlers'
declarations (agent.handlers._access): `python -m skiff.agent.handlers.access_table`."""

from __future__ import annotations

from skiff.agent.handlers import default_registry
from skiff.agent.handlers._access import markdown_table


def registry_table() -> str:
    """The table for every API the agent serves, in api-key order."""
    return markdown_table([(s.name, s.api_key, s.access) for s in default_registry().specs()])


if __name__ == "__main__":
    print(registry_table(), end="")
