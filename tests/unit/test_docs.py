"""The configuration reference names every setting the agent accepts."""

from __future__ import annotations

from pathlib import Path

from skiff.agent.config import describe_fields
from skiff.metadata.configs import CONFIG_DEFS

DOC = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()


def test_every_agent_setting_is_documented() -> None:
    missing = [
        f"{flag} / {env}"
        for flag, env, _, _ in describe_fields()
        if f"`{flag}`" not in DOC or f"`{env}`" not in DOC
    ]
    assert not missing, f"docs/configuration.md lacks {missing}"


def test_every_topic_config_is_documented() -> None:
    missing = [name for name in CONFIG_DEFS if f"`{name}`" not in DOC]
    assert not missing, f"docs/configuration.md lacks {missing}"
