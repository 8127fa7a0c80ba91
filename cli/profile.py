"""Which cluster an admin command talks to: its flags, `SKIFF_*` variables, the profile file.

A user types the cluster once, in the profile (`$XDG_CONFIG_HOME/skiff/config.toml`, by
default `~/.config/skiff/config.toml`; `SKIFF_CONFIG` names another file), TOML:

    metadata_url = "http://metadata.example:9093"     # or: bootstrap_server = "agent-1:9092"
    metadata_token_file = "~/.config/skiff/admin.token"
    metadata_ca_file = "/etc/ssl/skiff-ca.pem"
    timeout_ms = 10000

    [kafka]                                            # client properties for --bootstrap-server
    "security.protocol" = "SASL_SSL"                   # (librdkafka names, as --command-config)
    "sasl.mechanism" = "SCRAM-SHA-512"

Every setting is taken from the first place that sets it: the flag, then its variable
(`SKIFF_METADATA_URL`, `SKIFF_BOOTSTRAP_SERVER`, `SKIFF_METADATA_TOKEN_FILE`,
`SKIFF_METADATA_CA_FILE`, `SKIFF_METADATA_TIMEOUT_MS`), then the profile, then the default.
The cluster itself is one choice: a metadata URL and a bootstrap server are two ways to
name it, so the first level that names either decides (`--bootstrap-server` on the command
line beats `SKIFF_METADATA_URL`); both at the same level is a usage error. With a bootstrap
server the command asks that agent for the metadata URL (`skiff.cli.bootstrap`). With none
of them, the playground's `http://127.0.0.1:9093`.

Only the keys above are read; any other key is an error (a typo must not silently fall
back to the default cluster). The file is read once per command, at most 64 KiB.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skiff.cli.errors import CommandError, UsageError

DEFAULT_METADATA_URL = "http://127.0.0.1:9093"
DEFAULT_TIMEOUT_MS = 10_000
MAX_PROFILE_BYTES = 64 * 1024
MAX_KAFKA_PROPERTIES = 100

ENV_CONFIG = "SKIFF_CONFIG"
# setting -> its environment variable (the same names the agent and Spark read)
ENV_NAMES = {
    "metadata_url": "SKIFF_METADATA_URL",
    "bootstrap_server": "SKIFF_BOOTSTRAP_SERVER",
    "metadata_token_file": "SKIFF_METADATA_TOKEN_FILE",
    "metadata_ca_file": "SKIFF_METADATA_CA_FILE",
    "timeout_ms": "SKIFF_METADATA_TIMEOUT_MS",
}
PROFILE_KEYS = frozenset(ENV_NAMES) | {"kafka"}


@dataclass(frozen=True)
class Connection:
    """Where an admin command goes, and where each part of the answer came from."""

    metadata_url: str | None  # None: ask `bootstrap_server` for it
    bootstrap_server: str | None
    token_file: str | None = None
    ca_file: str | None = None
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    kafka_config: dict[str, str] = field(default_factory=dict)
    source: str = "default"  # flag, env, profile or default: who named the cluster


def profile_path(env: Mapping[str, str]) -> Path:
    """`SKIFF_CONFIG`, else `$XDG_CONFIG_HOME/skiff/config.toml`, else under ~/.config."""
    if env.get(ENV_CONFIG):
        return Path(env[ENV_CONFIG]).expanduser()
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "skiff" / "config.toml"


def load_profile(path: Path, *, required: bool = False) -> dict[str, Any]:
    """The profile's settings ({} when there is no file, unless `required`)."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_PROFILE_BYTES + 1)
    except FileNotFoundError:
        if required:
            raise CommandError(f"profile {path} (named by {ENV_CONFIG}) does not exist") from None
        return {}
    except OSError as e:
        raise CommandError(f"cannot read profile {path}: {e.strerror or e}") from None
    if len(raw) > MAX_PROFILE_BYTES:
        raise CommandError(f"profile {path} is larger than {MAX_PROFILE_BYTES} bytes")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise CommandError(f"profile {path} is not valid TOML: {e}") from None
    unknown = sorted(set(data) - PROFILE_KEYS)
    if unknown:
        raise CommandError(
            f"profile {path}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(PROFILE_KEYS))})"
        )
    kafka = data.get("kafka", {})
    if not isinstance(kafka, dict) or len(kafka) > MAX_KAFKA_PROPERTIES:
        raise CommandError(f"profile {path}: [kafka] must be a table of at most {MAX_KAFKA_PROPERTIES} keys")
    return data


def read_properties(path: str) -> dict[str, str]:
    """A Kafka tool's `--command-config` file: `key=value` lines, `#` comments."""
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")[:MAX_PROFILE_BYTES]
    except OSError as e:
        raise CommandError(f"cannot read --command-config {path}: {e.strerror or e}") from None
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise CommandError(f"--command-config {path}: expected key=value, got {line!r}")
        out[key.strip()] = value.strip()
    return out


def _levels(
    args: Any, env: Mapping[str, str], profile: Mapping[str, Any]
) -> list[tuple[str, dict[str, Any]]]:
    flags = {
        "metadata_url": getattr(args, "metadata_url", None),
        "bootstrap_server": getattr(args, "bootstrap_server", None),
        "metadata_token_file": getattr(args, "metadata_token_file", None),
        "metadata_ca_file": getattr(args, "metadata_ca_file", None),
        "timeout_ms": getattr(args, "timeout_ms", None),
    }
    from_env = {k: env.get(name) or None for k, name in ENV_NAMES.items()}
    return [("flag", flags), ("env", from_env), ("profile", dict(profile))]


def resolve(args: Any, env: Mapping[str, str] | None = None) -> Connection:
    """The connection of an admin command (module docstring: flag > env > profile > default)."""
    env = os.environ if env is None else env
    path = profile_path(env)
    profile = load_profile(path, required=bool(env.get(ENV_CONFIG)))
    levels = _levels(args, env, profile)
    metadata_url, bootstrap, source = None, None, "default"
    for level, values in levels:
        if values.get("metadata_url") and values.get("bootstrap_server"):
            where = {"flag": "the command line", "env": "the environment", "profile": str(path)}[level]
            raise UsageError(f"{where} names both a metadata URL and a bootstrap server: give one")
        if values.get("metadata_url") or values.get("bootstrap_server"):
            metadata_url, bootstrap, source = (
                values.get("metadata_url"),
                values.get("bootstrap_server"),
                level,
            )
            break
    if metadata_url is None and bootstrap is None:
        metadata_url = DEFAULT_METADATA_URL

    def first(key: str) -> Any:
        return next((v[key] for _, v in levels if v.get(key) not in (None, "")), None)

    timeout = first("timeout_ms")
    try:
        timeout_ms = DEFAULT_TIMEOUT_MS if timeout is None else int(timeout)
    except (TypeError, ValueError):
        raise UsageError(f"timeout_ms must be an integer, got {timeout!r}") from None
    kafka = {str(k): str(v) for k, v in profile.get("kafka", {}).items()}
    if getattr(args, "command_config", None):
        kafka.update(read_properties(args.command_config))  # the flag beats the profile's table
    # An environment token beats a profile's token file (flag > env > profile); the client
    # reads SKIFF_METADATA_TOKEN itself when no file is passed.
    token_file = levels[0][1]["metadata_token_file"] or (
        None if env.get("SKIFF_METADATA_TOKEN") else first("metadata_token_file")
    )
    ca_file = first("metadata_ca_file")
    return Connection(
        metadata_url=None if metadata_url is None else str(metadata_url),
        bootstrap_server=None if bootstrap is None else str(bootstrap),
        token_file=None if token_file is None else str(Path(str(token_file)).expanduser()),
        ca_file=None if ca_file is None else str(Path(str(ca_file)).expanduser()),
        timeout_ms=timeout_ms,
        kafka_config=kafka,
        source=source,
    )
