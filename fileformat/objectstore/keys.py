"""Keys of the bucket that are not segment files.

Segment files live under `segments/` (agents) and `compacted/` (the compactor). Skiff's own
small objects live under `_skiff/`: they are never segments, never listed in metadata, and
the garbage collector's orphan scan never asks metadata about them (compactor.gc).

    _skiff/readiness/<agent id>   an agent's readiness probe object (agent.health),
                                  rewritten every readiness_probe_interval_ms; one not
                                  rewritten for the GC's orphan grace belongs to a gone
                                  agent and is deleted.

The agent id is percent-encoded (every byte but letters, digits and `_.-~`), and a leading
`.` too, so that any id makes a valid key (`base.validate_key`).
"""

from __future__ import annotations

from urllib.parse import quote

INTERNAL_PREFIX = "_skiff/"
READINESS_PREFIX = INTERNAL_PREFIX + "readiness/"


def readiness_key(agent_id: str) -> str:
    name = quote(agent_id, safe="")
    if name.startswith("."):
        name = "%2E" + name[1:]
    return READINESS_PREFIX + name


def is_internal(key: str) -> bool:
    """True for Skiff's own objects (not segments; see the module docstring)."""
    return key.startswith(INTERNAL_PREFIX)
