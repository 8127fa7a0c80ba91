"""What `skiff topics` and `skiff groups` share: the metadata connection flags, running
one async command with clear failures, and output as a rich table or as JSON.

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
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from skiff.cli.errors import CommandError
from skiff.metadata.wire.operations import MetadataClient

DEFAULT_METADATA_URL = "http://127.0.0.1:9093"


if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "CommandError",
    "add_connection_arguments",
    "print_json",
    "print_table",
    "run_command",
    "stdout_console",
]


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metadata",
        dest="metadata_url",
        default=os.environ.get("SKIFF_METADATA_URL", DEFAULT_METADATA_URL),
        help=f"metadata service URL (or a database URL); default $SKIFF_METADATA_URL or {DEFAULT_METADATA_URL}",
    )
    parser.add_argument(
        "--timeout-ms",
        type=int,
        default=int(os.environ.get("SKIFF_METADATA_TIMEOUT_MS", "10000")),
        help="timeout of one call to the metadata service (env SKIFF_METADATA_TIMEOUT_MS; default: %(default)s)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run_command(name: str, args: argparse.Namespace, body: Callable[[MetadataClient], Awaitable[int]]) -> int:
    """Open the metadata client, run `body`, close; failures propagate to the command line's
    top level, which prints them as one line (skiff.cli.errors)."""
    from skiff.metadata.wire.connect import open_metadata_client

    for logger in ("httpx", "httpcore"):  # one INFO line per call is noise here
        logging.getLogger(logger).setLevel(logging.WARNING)

    async def main() -> int:
        client = open_metadata_client(args.metadata_url, timeout_s=args.timeout_ms / 1000)
        try:
            return await body(client)
        finally:
            await client.close()

    return asyncio.run(main())


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
