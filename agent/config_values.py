"""How a setting's name and text become a flag, a variable and a typed value.

`some_name` is the flag `--some-name` and the variable `SKIFF_SOME_NAME`. Integers accept
`_` separators and the binary suffixes `KiB`, `MiB`, `GiB` (also `k`, `m`, `g`: `8MiB`,
`100_000`); booleans accept `1/0, true/false, yes/no, on/off`; an empty string sets an
optional field to None. Knows nothing of `AgentConfig`'s fields (see `agent.config`).
"""

from __future__ import annotations

from typing import Any

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

ENV_PREFIX = "SKIFF_"


def env_var(field_name: str) -> str:
    return ENV_PREFIX + field_name.upper()


def flag(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


_SUFFIXES = {"kib": KiB, "mib": MiB, "gib": GiB, "k": KiB, "m": MiB, "g": GiB}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def parse_value(name: str, kind: tuple[type, bool], raw: str) -> Any:
    tp, optional = kind
    text = raw.strip()
    if optional and text == "":
        return None
    try:
        if tp is bool:
            low = text.lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise ValueError("expected true/false")
        if tp is int:
            low = text.lower().replace("_", "")
            for suffix, mult in _SUFFIXES.items():
                if low.endswith(suffix):
                    return int(low[: -len(suffix)]) * mult
            return int(low)
        if tp is str:
            return raw
    except ValueError as e:
        raise ValueError(f"invalid value {raw!r} for {name} ({env_var(name)}): {e}") from None
    raise TypeError(f"unsupported config field type {tp!r} for {name}")
