"""What `skiff topics`, `groups` and `users` share: the cluster flags (`--metadata` or
`--bootstrap-server`, resolved flag > env > profile > default: skiff.cli.profile), running
one command with clear failures, and output as a rich table or as JSON.

Tables print to stdout without colour when stdout is not a terminal, with every cell in
full (no truncation or wrapping: scripts cut columns as they do Kafka's tools' output).
Errors go to stderr as one line, `skiff <command>: <message>`, and exit status 1 (the
command line's top level prints them: skiff.cli.errors).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from skiff.cli.bootstrap import metadata_url_from_agent
from skiff.cli.errors import CommandError
from skiff.cli.profile import DEFAULT_METADATA_URL, DEFAULT_TIMEOUT_MS, Connection, resolve
from skiff.metadata.wire.operations import MetadataClient

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "CommandError",
    "add_connection_arguments",
    "agents_bootstrap",
    "connect",
    "print_json",
    "print_table",
    "run_command",
    "stdout_console",
]


_PRECEDENCE = "flag > env > profile > default; profile: $XDG_CONFIG_HOME/skiff/config.toml"


def add_connection_arguments(parser: argparse.ArgumentParser, *, json_flag: bool = True) -> None:
    """The cluster flags of every admin command; their values are resolved after parsing
    (skiff.cli.profile: flag > env > profile > default), so a missing or broken profile is
    one line from the command, not a failure to build the parser."""
    parser.add_argument(
        "--metadata",
        dest="metadata_url",
        default=None,
        metavar="URL",
        help="metadata service URL (or a database URL) (env SKIFF_METADATA_URL, profile metadata_url;"
        f" default: {DEFAULT_METADATA_URL}; {_PRECEDENCE})",
    )
    parser.add_argument(
        "--bootstrap-server",
        default=None,
        metavar="HOST:PORT",
        help="an agent's Kafka address instead of --metadata: the command asks it for the metadata URL"
        " (env SKIFF_BOOTSTRAP_SERVER, profile bootstrap_server; default: unset)",
    )
    parser.add_argument(
        "--command-config",
        default=None,
        metavar="FILE",
        help="Kafka client properties (key=value) for talking to agents, as Kafka's tools take"
        " (profile table [kafka]; default: unset)",
    )
    parser.add_argument(
        "--metadata-token-file",
        default=None,
        metavar="FILE",
        help="file holding the metadata bearer token (env SKIFF_METADATA_TOKEN_FILE, or the token in"
        " SKIFF_METADATA_TOKEN; profile metadata_token_file; default: unset)",
    )
    parser.add_argument(
        "--metadata-ca-file",
        default=None,
        metavar="PEM",
        help="CA bundle of an https:// metadata service (env SKIFF_METADATA_CA_FILE, profile"
        " metadata_ca_file; default: the system's)",
    )
    parser.add_argument(
        "--timeout-ms",
        type=int,
        default=None,
        help="timeout of one call to metadata or an agent (env SKIFF_METADATA_TIMEOUT_MS, profile"
        f" timeout_ms; default: {DEFAULT_TIMEOUT_MS})",
    )
    if json_flag:
        parser.add_argument("--json", action="store_true", help="machine-readable output")


def connect(args: argparse.Namespace) -> tuple[Connection, str, dict[str, Any]]:
    """The resolved connection, the metadata URL (asked of the agent for a bootstrap
    server) and the metadata client's credential arguments; the connection is kept on
    `args.connection` for commands that also talk to agents."""
    conn = resolve(args)
    url = conn.metadata_url
    if url is None:
        assert conn.bootstrap_server is not None
        url = metadata_url_from_agent(conn.bootstrap_server, conn.kafka_config, conn.timeout_ms)
    creds: dict[str, Any] = {}
    if conn.token_file:
        creds["token_file"] = conn.token_file
    if conn.ca_file:
        creds["ca_file"] = conn.ca_file
    args.connection = conn
    return conn, url, creds


def run_command(name: str, args: argparse.Namespace, body: Callable[[MetadataClient], Awaitable[int]]) -> int:
    """Open the metadata client, run `body`, close; failures propagate to the command line's
    top level, which prints them as one line (skiff.cli.errors)."""
    from skiff.metadata.wire.connect import open_metadata_client

    for logger in ("httpx", "httpcore"):  # one INFO line per call is noise here
        logging.getLogger(logger).setLevel(logging.WARNING)
    conn, url, creds = connect(args)

    async def main() -> int:
        client = open_metadata_client(url, timeout_s=conn.timeout_ms / 1000, **creds)
        try:
            return await body(client)
        finally:
            await client.close()

    return asyncio.run(main())


MAX_BOOTSTRAP_AGENTS = 3  # librdkafka needs one; a few survive one being down


async def agents_bootstrap(md: MetadataClient, why: str) -> str:
    """`bootstrap.servers` for a command that must ask an agent (`why`) but was given only
    the metadata service: a few of the live ready agents metadata lists."""
    agents = [a for a in await md.live_agents() if a.ready]
    if not agents:
        raise CommandError(f"{why}, and no agent is live and ready")
    return ",".join(f"{a.host}:{a.port}" for a in agents[:MAX_BOOTSTRAP_AGENTS])


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=False))


def stdout_console() -> Console:
    """The console of a command's output: on a terminal, rich's own; piped (not a TTY), plain
    text with no colour or escapes and one long line per row (never wrapped at 80 columns)."""
    from rich.console import Console

    if sys.stdout.isatty():
        return Console(highlight=False)
    return Console(highlight=False, force_terminal=False, no_color=True, soft_wrap=True, width=100_000)


def print_table(columns: Sequence[str], rows: Sequence[Sequence[object]], title: str | None = None) -> None:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    console = stdout_console()  # piped output: one long line per row, never cut at 80 columns
    table = Table(*columns, title=title, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False)
    for col in table.columns:
        col.no_wrap = True
        col.overflow = "ignore"
    for row in rows:
        table.add_row(*(Text("-" if v is None else str(v)) for v in row))  # Text: no markup
    console.print(table)
