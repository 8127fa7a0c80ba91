"""`skiff schemas`: the schema registry (metadata.schemas), with the Confluent CLI's verbs.

    skiff schemas list     [--prefix P] [--deleted] [--json]
    skiff schemas get      SUBJECT [--version V|latest] [--json]   |  skiff schemas get --id ID
    skiff schemas register SUBJECT --schema FILE [--type AVRO|JSON|PROTOBUF]
                           [--reference NAME=SUBJECT:VERSION]... [--normalize]
    skiff schemas check    SUBJECT --schema FILE [--type T] [--version V]
    skiff schemas delete   SUBJECT [--version V] [--permanent]
    skiff schemas config   [SUBJECT] [--compatibility LEVEL | --delete]
    skiff schemas mode     [SUBJECT] [--set READWRITE|READONLY|IMPORT [--force] | --delete]

Each verb is one declared metadata operation (`schema_*`, metadata.wire.schema_operations) over
the blocking client; the same registry answers Confluent's REST API at the metadata URL, so
Confluent's own tools work too. `--schema -` reads standard input. `--metadata` is the metadata
service URL or a database URL (default `SKIFF_METADATA_URL`); the token comes from
`SKIFF_METADATA_TOKEN` / `SKIFF_METADATA_TOKEN_FILE` (roles: reader reads, writer registers,
admin deletes and sets config and modes). Exit status 0, 1 when the registry refuses (its
Confluent error code and message on stderr), 2 on usage errors.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from typing import Any

from rich.table import Table
from skiff.cli.admin_common import stdout_console
from skiff.metadata.errors import MetadataError, MetadataUnavailable
from skiff.metadata.schemas.formats import LEVELS, SCHEMA_TYPES
from skiff.metadata.schemas.types import MODES, SchemaReference, SchemaSpec, version_from_text


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("schemas", help="the schema registry: subjects, versions, compatibility, modes")
    p.set_defaults(run=run_schemas)
    ops = p.add_subparsers(dest="schemas_command", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument(
            "--metadata",
            dest="metadata_url",
            default=os.environ.get("SKIFF_METADATA_URL"),
            help="metadata service URL (http://host:port) or database URL [env SKIFF_METADATA_URL]",
        )
        q.add_argument("--json", action="store_true", help="machine-readable output")

    ls = ops.add_parser("list", help="subjects")
    common(ls)
    ls.add_argument("--prefix", default=None, help="only subjects starting with this (default: all)")
    ls.add_argument("--deleted", action="store_true", help="include soft-deleted subjects")

    get = ops.add_parser("get", help="a subject's version (default latest), or a schema by --id")
    common(get)
    get.add_argument("subject", nargs="?", help="the subject (e.g. orders-value)")
    get.add_argument("--version", default="latest", help="a version number or latest (default: latest)")
    get.add_argument("--id", type=int, default=None, help="a global schema id instead of a subject")

    for verb, text in (
        ("register", "register a schema as the subject's next version"),
        ("check", "would it be compatible?"),
    ):
        q = ops.add_parser(verb, help=text)
        common(q)
        q.add_argument("subject", help="the subject (TopicNameStrategy: <topic>-value or <topic>-key)")
        q.add_argument("--schema", required=True, help="the schema file ('-': standard input)")
        q.add_argument("--type", default="AVRO", choices=SCHEMA_TYPES, type=str.upper, help="default: AVRO")
        q.add_argument(
            "--reference",
            action="append",
            default=[],
            metavar="NAME=SUBJECT:VERSION",
            help="a referenced schema (repeatable): the Avro type name, .proto import or $ref URL",
        )
        q.add_argument("--normalize", action="store_true", help="store/compare the normalized form")
        if verb == "check":
            q.add_argument("--version", default=None, help="check against this version only")

    rm = ops.add_parser("delete", help="soft-delete a subject or one version (then --permanent)")
    common(rm)
    rm.add_argument("subject", help="the subject")
    rm.add_argument("--version", default=None, help="one version (a number or latest)")
    rm.add_argument("--permanent", action="store_true", help="hard-delete what was soft-deleted")

    cf = ops.add_parser("config", help="show or set the compatibility level (global without SUBJECT)")
    common(cf)
    cf.add_argument("subject", nargs="?", help="the subject (default: the global level)")
    cf.add_argument("--compatibility", type=str.upper, choices=LEVELS, default=None, help="set this level")
    cf.add_argument("--delete", action="store_true", help="forget the subject's own level")

    md = ops.add_parser("mode", help="show or set the mode (global without SUBJECT)")
    common(md)
    md.add_argument("subject", nargs="?", help="the subject (default: the global mode)")
    md.add_argument("--set", type=str.upper, choices=MODES, default=None, help="set this mode")
    md.add_argument("--force", action="store_true", help="IMPORT even though subjects exist")
    md.add_argument("--delete", action="store_true", help="forget the subject's own mode")


def parse_version(text: str) -> int:
    v = version_from_text(text)
    if v is None:
        raise ValueError(f"--version must be a number or latest, got {text!r}")
    return v


def parse_reference(text: str) -> SchemaReference:
    name, eq, rest = text.partition("=")
    subject, colon, version = rest.rpartition(":")
    if not (eq and colon and name and subject):
        raise ValueError(f"--reference must be NAME=SUBJECT:VERSION, got {text!r}")
    return SchemaReference(name, subject, parse_version(version))


def _spec(args: argparse.Namespace) -> SchemaSpec:
    if args.schema == "-":
        text = sys.stdin.read()
    else:
        with open(args.schema, encoding="utf-8") as f:
            text = f.read()
    return SchemaSpec(text, args.type, tuple(parse_reference(r) for r in args.reference))


def _emit(args: argparse.Namespace, value: Any, table: Table | None = None, line: str | None = None) -> int:
    if args.json:
        print(json.dumps(value))
    elif table is not None:
        stdout_console().print(table)
    else:
        stdout_console().print(line if line is not None else str(value), highlight=False, soft_wrap=True)
    return 0


def _run(args: argparse.Namespace, md: Any) -> int:
    """`md`: a blocking metadata client (metadata.wire.connect.open_sync_metadata_client)."""
    cmd = args.schemas_command
    if cmd == "list":
        subjects = md.schema_subjects(args.prefix or "", args.deleted)
        table = Table("subject", "versions")
        for s in subjects:
            table.add_row(s, " ".join(str(v) for v in md.schema_versions(s, args.deleted)))
        return _emit(args, subjects, table)
    if cmd == "get":
        return _get(args, md)
    if cmd == "register":
        r = md.schema_register(args.subject, _spec(args), args.normalize)
        return _emit(args, asdict(r), line=f"{r.subject} version {r.version}: schema id {r.id}")
    if cmd == "check":
        version = None if args.version is None else parse_version(args.version)
        problems = md.schema_check(args.subject, _spec(args), version, args.normalize)
        _emit(
            args,
            {"is_compatible": not problems, "messages": problems},
            line="\n".join(["compatible"] if not problems else ["incompatible:", *problems]),
        )
        return 0 if not problems else 1
    if cmd == "delete":
        if args.version is not None:
            v = md.schema_delete_version(args.subject, parse_version(args.version), args.permanent)
            return _emit(
                args,
                [v],
                line=f"{args.subject} version {v} {'permanently ' if args.permanent else ''}deleted",
            )
        vs = md.schema_delete_subject(args.subject, args.permanent)
        return _emit(
            args,
            vs,
            line=f"{args.subject} versions {' '.join(map(str, vs))} {'permanently ' if args.permanent else ''}deleted",
        )
    if cmd == "config":
        return _config(args, md)
    if cmd == "mode":
        return _mode(args, md)
    raise ValueError(f"unknown schemas command {cmd}")


def _get(args: argparse.Namespace, md: Any) -> int:
    if args.id is not None:
        s = md.schema_by_id(args.id)
        return _emit(args, asdict(s), line=s.schema)
    if not args.subject:
        raise ValueError("give a SUBJECT or --id")
    r = md.schema_version(args.subject, parse_version(args.version))
    if args.json:
        return _emit(args, asdict(r))
    out = stdout_console()
    out.print(f"subject {r.subject} version {r.version} id {r.id} type {r.schema_type}", highlight=False)
    for ref in r.references:
        out.print(f"reference {ref.name} = {ref.subject}:{ref.version}", highlight=False)
    print(r.schema)
    return 0


def _config(args: argparse.Namespace, md: Any) -> int:
    if args.delete:
        s = md.schema_delete_settings(args.subject)
    elif args.compatibility is not None:
        s = md.schema_set_settings(args.subject, args.compatibility)
    else:
        s = md.schema_settings(args.subject, True)
    where = args.subject or "global"
    return _emit(args, asdict(s), line=f"{where}: {s.compatibility}")


def _mode(args: argparse.Namespace, md: Any) -> int:
    if args.delete:
        if not args.subject:
            raise ValueError("--delete needs a SUBJECT (the global mode is set, not deleted)")
        mode = md.schema_delete_mode(args.subject)
    elif args.set is not None:
        mode = md.schema_set_mode(args.subject, args.set, args.force)
    else:
        mode = md.schema_mode(args.subject, True)
    return _emit(args, {"mode": mode}, line=f"{args.subject or 'global'}: {mode}")


def run_schemas(args: argparse.Namespace) -> int:
    from skiff.metadata.wire.connect import open_sync_metadata_client

    if not args.metadata_url:
        print("skiff schemas: --metadata (or SKIFF_METADATA_URL) is required", file=sys.stderr)
        return 2
    try:
        md = open_sync_metadata_client(args.metadata_url)
        try:
            return _run(args, md)
        finally:
            md.close()
    except MetadataError as e:
        print(f"skiff schemas: error {e.error_code}: {e.message}", file=sys.stderr)
        return 1
    except MetadataUnavailable as e:
        print(f"skiff schemas: metadata unavailable: {e}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as e:
        print(f"skiff schemas: {e}", file=sys.stderr)
        return 1
