"""`skiff users`: SCRAM users in metadata (what SASL/PLAIN and SASL/SCRAM logins check).

    skiff users list   [--metadata URL | --bootstrap-server H:P] [--json]
    skiff users create NAME [...] [--mechanism SCRAM-SHA-256|SCRAM-SHA-512]...
                       [--password P | --password-file FILE] [--iterations N]
    skiff users delete NAME [...] [--mechanism M]...

`create` salts and derives the credential here (`metadata.security.scram_types.make_credential`:
random 32-byte salt, PBKDF2 with `--iterations`, default 8192) and sends only salt,
iterations, StoredKey and ServerKey: the password never leaves this process. Without
`--mechanism` it creates both SCRAM-SHA-256 and SCRAM-SHA-512 (and replaces existing ones,
which is how a password is changed). The password comes from `--password`, else the first
line of `--password-file` (`-`: standard input), else `SKIFF_USER_PASSWORD`, else a prompt.
`delete` without `--mechanism` removes every credential of the user. Agents see a change
within their `scram_credential_cache_ms` (5 s by default).

The cluster is `--metadata` (the metadata service URL, http://..., or a database URL) or
`--bootstrap-server` (an agent, asked for the metadata URL), from the flag, `SKIFF_*`, or
the profile (skiff.cli.profile). Exit status 0 on success, 1 when metadata refuses
(message on stderr), 2 on usage errors.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from typing import Any

from rich.table import Table
from skiff.cli.admin_common import add_connection_arguments, connect, stdout_console
from skiff.metadata.errors import MetadataError, MetadataUnavailable
from skiff.metadata.security.scram_types import DEFAULT_ITERATIONS, MECHANISM_CODES, make_credential


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("users", help="SCRAM users (SASL/PLAIN and SASL/SCRAM logins)")
    p.set_defaults(run=run_users)
    ops = p.add_subparsers(dest="users_command", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        add_connection_arguments(q, json_flag=False)  # --metadata or --bootstrap-server (cli.profile)

    ls = ops.add_parser("list", help="users and their SCRAM mechanisms")
    common(ls)
    ls.add_argument("--json", action="store_true", help="machine-readable output")

    cr = ops.add_parser("create", help="create a user, or set a new password")
    common(cr)
    cr.add_argument("name", help="the user name (SCRAM principal User:NAME)")
    cr.add_argument(
        "--mechanism", action="append", choices=sorted(MECHANISM_CODES), help="repeatable; default both"
    )
    cr.add_argument("--password", default=None, help="the password (visible in ps; prefer --password-file)")
    cr.add_argument("--password-file", default=None, help="first line is the password ('-': standard input)")
    cr.add_argument(
        "--iterations",
        type=int,
        default=DEFAULT_ITERATIONS,
        help="PBKDF2 iterations (4096-16384; default: %(default)s)",
    )

    rm = ops.add_parser("delete", help="delete a user's credentials")
    common(rm)
    rm.add_argument("name", help="the user name")
    rm.add_argument(
        "--mechanism", action="append", choices=sorted(MECHANISM_CODES), help="repeatable; default all"
    )


def _password(args: argparse.Namespace) -> str:
    if args.password is not None:
        return str(args.password)
    if args.password_file is not None:
        if args.password_file == "-":
            return sys.stdin.readline().rstrip("\r\n")
        with open(args.password_file, encoding="utf-8") as f:
            return f.readline().rstrip("\r\n")
    env = os.environ.get("SKIFF_USER_PASSWORD")
    if env is not None:
        return env
    first = getpass.getpass(f"password for {args.name}: ")
    if getpass.getpass("again: ") != first:
        raise ValueError("the passwords differ")
    return first


def _run(args: argparse.Namespace, md: Any) -> int:
    """`md`: a blocking metadata client (metadata.wire.connect.open_sync_metadata_client)."""
    out = stdout_console()
    if args.users_command == "list":
        infos = md.describe_scram_users(None)
        if args.json:
            users: dict[str, list[dict[str, object]]] = {}
            for i in infos:
                users.setdefault(i.user, []).append({"mechanism": i.mechanism, "iterations": i.iterations})
            print(json.dumps([{"user": u, "credentials": c} for u, c in users.items()]))
            return 0
        table = Table("user", "mechanism", "iterations")
        for i in infos:
            table.add_row(i.user, i.mechanism, str(i.iterations))
        out.print(table)
        return 0
    mechanisms = args.mechanism or sorted(MECHANISM_CODES)
    if args.users_command == "create":
        password = _password(args)
        if not password:
            raise ValueError("the password must not be empty")
        for mech in mechanisms:
            md.upsert_scram_credential(make_credential(args.name, mech, password, iterations=args.iterations))
        out.print(f"user {args.name}: {', '.join(mechanisms)} set")
        return 0
    if args.users_command == "delete":
        if args.mechanism is None:
            have = {i.mechanism for i in md.describe_scram_users([args.name])}
            if not have:
                raise MetadataError(91, f"no user {args.name!r}")
            mechanisms = sorted(have)
        for mech in mechanisms:
            md.delete_scram_credential(args.name, mech)
        out.print(f"user {args.name}: {', '.join(mechanisms)} deleted")
        return 0
    raise ValueError(f"unknown users command {args.users_command}")


def run_users(args: argparse.Namespace) -> int:
    from skiff.metadata.wire.connect import open_sync_metadata_client

    def main() -> int:
        conn, url, creds = connect(args)
        md = open_sync_metadata_client(url, timeout_s=conn.timeout_ms / 1000, **creds)
        try:
            return _run(args, md)
        finally:
            md.close()

    try:
        return main()
    except (MetadataError, ValueError) as e:
        print(f"skiff users: {getattr(e, 'message', None) or e}", file=sys.stderr)
        return 1
    except MetadataUnavailable as e:
        print(f"skiff users: metadata unavailable: {e}", file=sys.stderr)
        return 1
