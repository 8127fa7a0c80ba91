"""The `skiff` command: one binary that can play every role.

    skiff playground [--data-dir DIR] [--port 9092] [--metadata-port 9093] [--demo]
    skiff agent --bucket URL --metadata URL [--port 9092] [--advertised-host H] [--zone Z] ...
    skiff metadata --db URL [--host H] [--port 9093] [--bucket URL] [--tokens-file PATH]
                   [--tls-cert PEM --tls-key PEM [--tls-client-ca PEM]] [--[no-]commit-verify-objects]
    skiff inspect PATH_OR_URL [--verify] [--json] [--metadata URL [--key KEY]]
    skiff compact --metadata URL [--bucket URL] [--once] [--topic T] [--dry-run] [--json]
    skiff users {list,create,delete} --metadata URL [--mechanism M] [--password P | --password-file F]
    skiff schemas {list,get,register,check,delete,config,mode} --metadata URL ...
    skiff topics list|describe|create|alter|delete ... [--metadata URL] [--json]
    skiff groups list|describe|reset-offsets|delete ... [--metadata URL] [--json]
    skiff agents list [--metadata URL] [--json]
    skiff acls list|add|remove [--topic T | --group G | --transactional-id X | --cluster] ...
    skiff --version

Agent settings come from flags and `SKIFF_*` environment variables (see
`agent.config` and docs/configuration.md).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from skiff.agent.runtime import BackgroundRole, BackgroundTask
    from skiff.metadata.wire.operations import MetadataClient


def _build_parser() -> argparse.ArgumentParser:
    from skiff.agent import config
    from skiff.metadata.build_info import SKIFF_VERSION

    parser = argparse.ArgumentParser(prog="skiff", description="A diskless, Kafka-compatible broker.")
    parser.add_argument("--version", action="version", version=f"skiff {SKIFF_VERSION}")
    parser.add_argument(
        "--log-level",
        default=os.environ.get("SKIFF_LOG_LEVEL", "INFO"),
        help="DEBUG, INFO, WARNING or ERROR (env SKIFF_LOG_LEVEL; default: %(default)s)",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        default=False,
        help="print the traceback of a failure, not only its one line (env SKIFF_DEBUG=1; default: off)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    pg = sub.add_parser("playground", help="everything in one process on an embedded default")
    pg.add_argument(
        "--data-dir",
        default=os.environ.get("SKIFF_DATA_DIR", "./skiff-data"),
        help="the SQLite database and file:// bucket live here (env SKIFF_DATA_DIR; default: %(default)s)",
    )
    pg.add_argument(
        "--host",
        default=os.environ.get("SKIFF_HOST", "127.0.0.1"),
        help="address both ports listen on (env SKIFF_HOST; default: %(default)s)",
    )
    pg.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("SKIFF_PORT", "9092")),
        help="Kafka port (env SKIFF_PORT; default: %(default)s)",
    )
    pg.add_argument(
        "--metadata-port",
        type=int,
        default=int(os.environ.get("SKIFF_METADATA_PORT", "9093")),
        help="metadata HTTP API port (env SKIFF_METADATA_PORT; default: %(default)s)",
    )
    pg.add_argument(
        "--compaction-interval-ms",
        type=int,
        default=int(os.environ.get("SKIFF_COMPACTION_INTERVAL_MS", "30000")),
        help="run retention, compaction and GC this often, 0: never (env SKIFF_COMPACTION_INTERVAL_MS;"
        " default: %(default)s)",
    )

    pg.add_argument(
        "--demo",
        action="store_true",
        default=os.environ.get("SKIFF_PLAYGROUND_DEMO", "").lower() in ("1", "true", "yes"),
        help="also produce sample data into demo-orders, demo-clicks and demo-customers (compacted)"
        " and run the consumer group demo-dashboard (env SKIFF_PLAYGROUND_DEMO=1; default: off)",
    )

    ag = sub.add_parser("agent", help="run one Kafka protocol agent")
    config.add_arguments(ag)
    ag.add_argument(
        "--bucket",
        dest="bucket_url",
        default=None,
        help="alias of --bucket-url (env SKIFF_BUCKET_URL; default: unset)",
    )
    ag.add_argument(
        "--metadata",
        dest="metadata_url",
        default=None,
        help="alias of --metadata-url (env SKIFF_METADATA_URL; default: unset)",
    )
    ag.add_argument(
        "--roles",
        default=os.environ.get("SKIFF_ROLES", "kafka"),
        help="comma-separated: kafka (always), compaction (retention, compaction and GC in the background)"
        " (env SKIFF_ROLES; default: %(default)s)",
    )
    ag.add_argument(
        "--compaction-interval-ms",
        type=int,
        default=int(os.environ.get("SKIFF_COMPACTION_INTERVAL_MS", "30000")),
        help="with the compaction role: run a maintenance pass this often (env SKIFF_COMPACTION_INTERVAL_MS;"
        " default: %(default)s)",
    )

    md = sub.add_parser("metadata", help="run the metadata HTTP service")
    md.add_argument(
        "--db",
        default=os.environ.get("SKIFF_DB", "sqlite:///./skiff-data/metadata.db"),
        help="database URL, postgresql://... or sqlite:///PATH (env SKIFF_DB; default: %(default)s)",
    )
    md.add_argument(
        "--host",
        default=os.environ.get("SKIFF_METADATA_HOST", "127.0.0.1"),
        help="address to listen on (env SKIFF_METADATA_HOST; default: %(default)s)",
    )
    md.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("SKIFF_METADATA_PORT", "9093")),
        help="port to listen on (env SKIFF_METADATA_PORT; default: %(default)s)",
    )
    md.add_argument(
        "--bucket",
        dest="bucket_url",
        default=os.environ.get("SKIFF_BUCKET_URL") or None,
        help="the bucket URL the agents write to, told to readers such as Spark (GET /v1/cluster)"
        " (env SKIFF_BUCKET_URL; default: unset, learned from the first agent that registers; an agent"
        " writing elsewhere is refused)",
    )
    md.add_argument(
        "--tokens-file",
        default=os.environ.get("SKIFF_METADATA_TOKENS_FILE") or None,
        help="bearer tokens and their roles, one ROLE[,ROLE]:TOKEN per line (env SKIFF_METADATA_TOKENS_FILE;"
        " default unset: no authentication unless SKIFF_METADATA_TOKENS holds them); see docs/operations.md",
    )
    md.add_argument(
        "--commit-verify-objects",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="check that each committed file's object is in the bucket with its stated size (one HEAD"
        " per commit; default: SKIFF_METADATA_COMMIT_VERIFY_OBJECTS, else on when --bucket is set,"
        " which it needs); see docs/operations.md",
    )
    md.add_argument(
        "--tls-cert",
        default=os.environ.get("SKIFF_METADATA_TLS_CERT") or None,
        help="PEM certificate (chain) to serve HTTPS with (env SKIFF_METADATA_TLS_CERT; default: unset, HTTP)",
    )
    md.add_argument(
        "--tls-key",
        default=os.environ.get("SKIFF_METADATA_TLS_KEY") or None,
        help="PEM key of --tls-cert (env SKIFF_METADATA_TLS_KEY; default: unset)",
    )
    md.add_argument(
        "--tls-client-ca",
        default=os.environ.get("SKIFF_METADATA_TLS_CLIENT_CA") or None,
        help="require client certificates signed by this PEM CA, mTLS (env SKIFF_METADATA_TLS_CLIENT_CA;"
        " default: unset)",
    )

    ins = sub.add_parser("inspect", help="print a segment file's chunks")
    ins.add_argument("target", help="a local path, file://, s3://bucket/key or memory:// URL")
    ins.add_argument("--verify", action="store_true", help="walk the file and check every batch")
    ins.add_argument("--json", action="store_true", help="machine-readable output")
    ins.add_argument(
        "--metadata",
        dest="metadata_url",
        default=os.environ.get("SKIFF_METADATA_URL"),
        help="metadata service (or database) URL: show topic names and the offsets metadata assigned"
        " (env SKIFF_METADATA_URL; default: unset)",
    )
    ins.add_argument("--key", default=None, help="the object key in metadata (default: from segments/ on)")

    from skiff.cli.compact import add_arguments as add_compact_arguments

    cp = sub.add_parser("compact", help="retention, compaction, garbage collection and offset expiry")
    add_compact_arguments(cp)
    from skiff.cli.users import add_parser as add_users_parser

    add_users_parser(sub)  # `skiff users` (SCRAM users); dispatched through args.run
    from skiff.cli.schemas import add_parser as add_schemas_parser

    add_schemas_parser(sub)  # `skiff schemas` (the schema registry); dispatched through args.run

    from skiff.cli import acls, agents, groups, topics

    topics.add_parser(sub)
    groups.add_parser(sub)
    agents.add_parser(sub)  # `skiff agents`; dispatched through args.run
    acls.add_parser(sub)  # `skiff acls`; dispatched through args.run
    _add_debug_everywhere(sub)
    for long_running in (pg, ag, md, cp):  # what log shippers collect from
        long_running.add_argument(
            "--log-format",
            choices=("text", "json"),
            default=os.environ.get("SKIFF_LOG_FORMAT", "text"),
            help="text lines, or one JSON object per line (time, level, logger, message, exc_info);"
            " env SKIFF_LOG_FORMAT; default %(default)s",
        )
    return parser


def _add_debug_everywhere(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`--debug` after the subcommand too (`skiff inspect X --debug`), as Kafka's tools
    take their flags anywhere; SUPPRESS keeps the global flag's value when it is absent."""
    for parser in sub.choices.values():
        parser.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help="as skiff --debug"
        )
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                _add_debug_everywhere(action)


def _maintenance(interval_ms: int, holder: str, table_catalog: str | None = None) -> BackgroundRole:
    """Retention, compaction, GC and offset expiry every `interval_ms`, as a background role;
    with `table_catalog` (a database URL), the topics' Iceberg tables too."""

    def role(md: MetadataClient, bucket_url: str) -> BackgroundTask:
        from skiff.cli.compact import maintenance_role

        return maintenance_role(md, bucket_url, interval_ms, holder, table_catalog)

    return role


def _table_catalog(metadata_url: str) -> str | None:
    """The agents' compaction role's table catalog, as `skiff compact`'s default:
    SKIFF_TABLE_CATALOG, else the metadata URL when it is a database's."""
    catalog = os.environ.get("SKIFF_TABLE_CATALOG")
    if catalog or metadata_url.startswith(("http://", "https://")):
        return catalog or None
    return metadata_url


_ONE_SHOT = frozenset({"inspect", "compact", "topics", "groups", "agents", "acls", "users", "schemas"})


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: `time` (UTC, ISO 8601 with milliseconds), `level`,
    `logger`, `message` (arguments merged), and `exc_info` (the formatted traceback) when
    the record carries an exception; `stack_info` likewise. No newline inside a line, so a
    log shipper can split on newlines."""

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.datetime.fromtimestamp(record.created, tz=datetime.UTC)
        entry: dict[str, str] = {
            "time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False)


# Libraries that log one INFO line per request: the metadata HTTP client would write two
# lines per heartbeat and one per transaction scan (some 230,000 a day for an idle agent).
_QUIET_LOGGERS = ("httpx", "httpcore", "alembic")  # alembic: migrations are routine at start-up
# Admin commands also quiet the S3 client's per-call lines (one per credential lookup).
_QUIET_IN_ONE_SHOT = ("botocore", "boto3", "aiobotocore")


def _setup_logging(args: argparse.Namespace, debug: bool) -> None:
    """The root handler on stderr (stdout is the command's output), in `--log-format` (text
    or json) at `--log-level`; tracebacks only with --debug."""
    from skiff.cli.errors import TracebackFreeFormatter

    handler = logging.StreamHandler()
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    if getattr(args, "log_format", "text") == "json":
        handler.setFormatter(JsonLogFormatter())
        _uvicorn_logs_through_root()
    else:
        handler.setFormatter(logging.Formatter(fmt) if debug else TracebackFreeFormatter(fmt))
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.INFO), handlers=[handler])
    quiet = _QUIET_LOGGERS if debug or args.command not in _ONE_SHOT else _QUIET_LOGGERS + _QUIET_IN_ONE_SHOT
    for name in quiet:
        logging.getLogger(name).setLevel(logging.WARNING)


def _uvicorn_logs_through_root() -> None:
    """uvicorn installs its own text handlers when it starts (its default logging config);
    route its loggers to the root handler instead, so every line is JSON."""
    try:
        from uvicorn.config import LOGGING_CONFIG
    except ImportError:  # pragma: no cover - uvicorn is a dependency of the metadata service
        return
    for logger_config in LOGGING_CONFIG.get("loggers", {}).values():
        logger_config["handlers"] = []
        logger_config["propagate"] = True


def _run_inspect(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from skiff.cli.inspect_cmd import run_inspect

    return run_inspect(
        args.target,
        verify=args.verify,
        as_json=args.json,
        metadata_url=args.metadata_url,
        object_key=args.key,
    )


def _run_topics(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from skiff.cli.topics import run_topics

    return run_topics(args)


def _run_groups(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from skiff.cli.groups import run_groups

    return run_groups(args)


def _run_compact(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from skiff.cli.compact import run_compact

    return run_compact(args)


def _run_metadata(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from skiff.agent.config_values import parse_value
    from skiff.agent.runtime import absolute_bucket_url
    from skiff.cli.errors import check_ports_free
    from skiff.metadata.server.app import run_metadata_server, tls_settings
    from skiff.metadata.server.auth import load_tokens

    bucket_url = None if args.bucket_url is None else absolute_bucket_url(args.bucket_url)
    try:  # settings errors are usage errors: one clear line, no traceback
        verify = args.commit_verify_objects
        if verify is None and os.environ.get("SKIFF_METADATA_COMMIT_VERIFY_OBJECTS", "").strip():
            verify = parse_value(
                "metadata_commit_verify_objects",
                (bool, False),
                os.environ["SKIFF_METADATA_COMMIT_VERIFY_OBJECTS"],
            )
        tokens = load_tokens(args.tokens_file)
        tls_settings(args.tls_cert, args.tls_key, args.tls_client_ca)
    except ValueError as exc:
        parser.error(str(exc))
    _check_database_url(args.db)
    check_ports_free(args.host, [("metadata port", args.port)])
    run_metadata_server(
        args.db,
        args.host,
        args.port,
        bucket_url=bucket_url,
        tokens=tokens,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        commit_verify_objects=verify,
    )
    return 0


def _check_database_url(db_url: str) -> None:
    """Parse (not connect to) the database URL, so a typo is one line before the server starts."""
    from skiff.cli.errors import CommandError
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        make_url(db_url)
    except ArgumentError as exc:
        raise CommandError(
            f"invalid --db URL {db_url!r}: expected e.g. postgresql://host/db or sqlite:///path"
        ) from exc


def _run_agent(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from skiff.agent.config import AgentConfig
    from skiff.agent.process import run_agent
    from skiff.cli.errors import check_ports_free

    try:
        cfg = AgentConfig.from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    roles = {r.strip() for r in str(args.roles).split(",") if r.strip()}
    unknown = roles - {"kafka", "compaction"}
    if unknown:
        parser.error(f"unknown role(s): {', '.join(sorted(unknown))}")
    background = (
        [_maintenance(args.compaction_interval_ms, f"agent-{cfg.agent_id}", _table_catalog(cfg.metadata_url))]
        if "compaction" in roles and args.compaction_interval_ms > 0
        else []
    )
    if cfg.workers > 1:
        from skiff.agent.workers.supervisor import check_worker_ports, run_pod

        try:
            check_worker_ports(cfg)
        except ValueError as exc:
            parser.error(str(exc))
        ports = [(f"Kafka port of worker {i}", cfg.port + i) for i in range(cfg.workers) if cfg.port]
        check_ports_free(cfg.host, ports)
        return run_pod(cfg, background)
    check_ports_free(cfg.host, [("Kafka port", cfg.port)])  # the metrics endpoint binds on its own
    return run_agent(cfg, background)


def _run_playground(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from skiff.agent.process import run_playground
    from skiff.cli.errors import check_ports_free

    check_ports_free(args.host, [("Kafka port", args.port), ("metadata port", args.metadata_port)])
    interval_ms = args.compaction_interval_ms
    # the playground's metadata database (agent.process.run_playground) holds the tables' catalog
    catalog = f"sqlite:///{Path(args.data_dir).resolve() / 'metadata.db'}"
    background = [_maintenance(interval_ms, "playground", catalog)] if interval_ms > 0 else []
    if args.demo:
        background.append(_demo(args.host, args.port))
    return run_playground(
        data_dir=args.data_dir,
        host=args.host,
        port=args.port,
        metadata_port=args.metadata_port,
        background=background,
    )


def _demo(host: str, port: int) -> BackgroundRole:
    """`--demo`: sample traffic into the playground's own listener (skiff.cli.demo)."""
    local = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    bootstrap = f"[{local}]:{port}" if ":" in local else f"{local}:{port}"

    def role(md: MetadataClient, bucket_url: str) -> BackgroundTask:
        from skiff.cli.demo import DemoTraffic

        return DemoTraffic(bootstrap)

    return role


_COMMANDS: dict[str, Callable[[argparse.ArgumentParser, argparse.Namespace], int]] = {
    "inspect": _run_inspect,
    "topics": _run_topics,
    "groups": _run_groups,
    "compact": _run_compact,
    "metadata": _run_metadata,
    "agent": _run_agent,
    "playground": _run_playground,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run one `skiff` command; failures are one line on stderr (skiff.cli.errors)."""
    from skiff.cli import errors

    parser = _build_parser()
    args = parser.parse_args(argv)  # usage errors: argparse's line, exit 2
    debug = bool(args.debug) or errors.debug_from_env()
    _setup_logging(args, debug)
    try:
        if getattr(args, "run", None) is not None:  # subcommands that dispatch themselves (skiff users)
            return int(args.run(args))
        return _COMMANDS[args.command](parser, args)
    except KeyboardInterrupt:
        return errors.EXIT_INTERRUPTED
    except Exception as exc:  # boundary: every failure of a command becomes its one line
        return errors.report(args.command, exc, debug=debug)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
