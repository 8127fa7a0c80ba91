"""How every `skiff` command fails: one line on stderr naming the cause, and an exit code.

    skiff <command>: <cause>

Exit codes follow Kafka's tools and argparse: 2 for usage errors (argparse prints its own
usage line and exits 2), 1 for runtime errors (metadata down, storage refused, a port in
use, a missing file), 130 for Ctrl-C. No traceback is printed unless `--debug` (or
SKIFF_DEBUG=1) is given; then the traceback precedes the line.

`describe(exc)` is the one place that maps known exceptions to their line; anything it
does not know becomes `unexpected <Type>: <message>` with a hint to rerun with `--debug`.
Log records keep their message but lose their traceback unless debugging
(`TracebackFreeFormatter`), so a library's `log.exception` cannot turn a clean failure into
forty lines.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import sys
import traceback
from collections.abc import Iterable

EXIT_RUNTIME = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

DEBUG_ENV = "SKIFF_DEBUG"


class CommandError(Exception):
    """A refusal the command states itself (printed as its message, exit 1)."""


class UsageError(CommandError):
    """A missing or contradictory flag found after parsing (exit 2, as argparse's)."""


class PortInUse(CommandError):
    """A port this command must listen on is taken."""


def debug_from_env() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _first_line(text: str) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[0] if lines else ""


def _storage(exc: Exception) -> str | None:
    from skiff.fileformat.objectstore.errors import ObjectNotFound, StorageError, StorageUnavailable

    if isinstance(exc, ObjectNotFound):
        return f"object not found: {exc.key or _first_line(str(exc))}"
    if isinstance(exc, StorageUnavailable):
        return f"object store unavailable: {_first_line(str(exc))}"
    if isinstance(exc, StorageError):
        return f"object store refused: {_first_line(str(exc))}"
    return None


def _metadata(exc: Exception) -> str | None:
    from skiff.metadata.errors import MetadataError, MetadataUnavailable
    from skiff.metadata.wire.credentials import CredentialsError

    if isinstance(exc, MetadataUnavailable):
        text = _first_line(str(exc))
        return text if "metadata" in text else f"metadata service unavailable: {text}"
    if isinstance(exc, MetadataError):
        return f"metadata refused: {_first_line(exc.message)} (Kafka error code {exc.error_code})"
    if isinstance(exc, CredentialsError):
        return _first_line(str(exc))
    return None


def _botocore(exc: Exception) -> str | None:
    """Errors raised by boto before the store's boundary translates them (client creation)."""
    module = type(exc).__module__ or ""
    if not module.startswith(("botocore", "boto3", "aiobotocore")):
        return None
    name = type(exc).__name__
    if name in ("NoCredentialsError", "PartialCredentialsError"):
        return "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or a profile)"
    return f"S3: {_first_line(str(exc))}"


def _database(exc: Exception) -> str | None:
    module = type(exc).__module__ or ""
    if not module.startswith("sqlalchemy"):
        return None
    name = type(exc).__name__
    if name in ("ArgumentError", "NoSuchModuleError"):
        return f"invalid database URL: {_first_line(str(exc))}"
    orig = getattr(exc, "orig", None)
    return f"database: {_first_line(str(orig if orig is not None else exc))}"


def _os_error(exc: Exception) -> str | None:
    if isinstance(exc, FileNotFoundError):
        return f"no such file: {exc.filename or _first_line(str(exc))}"
    if isinstance(exc, PermissionError):
        return f"permission denied: {exc.filename or _first_line(str(exc))}"
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        return f"address already in use: {_first_line(exc.strerror or str(exc))}"
    if isinstance(exc, OSError):
        return _first_line(str(exc)) or type(exc).__name__
    return None


def describe(exc: BaseException) -> str:
    """The one-line cause of `exc`, as a `skiff` command states it."""
    if isinstance(exc, CommandError):  # the command's own words, all of them on one line
        return " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    if isinstance(exc, Exception):
        for known in (_storage, _metadata, _botocore, _database, _os_error):
            line = known(exc)
            if line is not None:
                return line
    text = _first_line(str(exc))
    return (
        f"unexpected {type(exc).__name__}{': ' + text if text else ''} (rerun with --debug for the traceback)"
    )


def report(command: str, exc: BaseException, *, debug: bool) -> int:
    """Print `exc` as the command's one line (after its traceback when debugging)."""
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    print(f"skiff {command}: {describe(exc)}", file=sys.stderr, flush=True)
    return EXIT_USAGE if isinstance(exc, UsageError) else EXIT_RUNTIME


class TracebackFreeFormatter(logging.Formatter):
    """A log formatter that prints records without their traceback (the line stays)."""

    def formatException(self, ei: object) -> str:  # noqa: N802 (logging's name)
        return ""

    def format(self, record: logging.LogRecord) -> str:
        saved = record.exc_info, record.exc_text, record.stack_info
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        try:
            return super().format(record)
        finally:
            record.exc_info, record.exc_text, record.stack_info = saved


def check_ports_free(host: str, ports: Iterable[tuple[str, int]]) -> None:
    """Raise `PortInUse` naming the first of `ports` (label, port) that cannot be bound on
    `host`; port 0 (any free port) is skipped. Checked before a server starts, so a clash
    is one line before anything is announced; the server's own bind still decides."""
    for label, port in ports:
        if not port:
            continue
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            # as the servers do: a port in TIME_WAIT is free, one with a listener is not
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise PortInUse(f"{label} {host}:{port} is already in use") from exc
                raise
