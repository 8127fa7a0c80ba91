"""The `skiff` command: one binary that can play every role.

    skiff playground [--data-dir DIR] [--port 9092] [--metadata-port 9093]
    skiff agent --bucket URL --metadata URL [--port 9092] [--advertised-host H] [--zone Z] ...
    skiff metadata --db URL [--host H] [--port 9093] [--bucket URL] [--tokens-file PATH]
                   [--tls-cert PEM --tls-key PEM [--tls-client-ca PEM]] [--[no-]commit-verify-objects]
    skiff inspect PATH_OR_URL [--verify] [--json] [--metadata URL [--key KEY]]
    skiff compact --bucket URL --metadata URL [--once] [--topic T] [--dry-run] [--json]
    skiff users {list,create,delete} --metadata URL [--mechanism M] [--password P | --password-file F]
    skiff topics list|describe|create|alter|delete ... [--metadata URL] [--json]
    skiff groups list|describe|reset-offsets|delete ... [--metadata URL] [--json]

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
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from skiff.agent.runtime import BackgroundRole, BackgroundTask
    from skiff.metadata.wire.operations import MetadataClient


def _build_parser() -> argparse.ArgumentParser:
    from skiff.agent import config

    parser = argparse.ArgumentParser(prog="skiff", description="A diskless, Kafka-compatible broker.")
    parser.add_argument("--log-level", default=os.environ.get("SKIFF_LOG_LEVEL", "INFO"))
    sub = parser.add_subparsers(dest="command", required=True)

    pg = sub.add_parser("playground", help="everything in one process on an embedded default")
    pg.add_argument("--data-dir", default=os.environ.get("SKIFF_DATA_DIR", "./skiff-data"))
    pg.add_argument("--host", default=os.environ.get("SKIFF_HOST", "127.0.0.1"))
    pg.add_argument("--port", type=int, default=int(os.environ.get("SKIFF_PORT", "9092")))
    pg.add_argument("--metadata-port", type=int, default=int(os.environ.get("SKIFF_METADATA_PORT", "9093")))
    pg.add_argument(
        "--compaction-interval-ms",
        type=int,
        default=int(os.environ.get("SKIFF_COMPACTION_INTERVAL_MS", "30000")),
        help="run retention, compaction and GC this often (0: never)",
    )

    ag = sub.add_parser("agent", help="run one Kafka protocol agent")
    config.add_arguments(ag)
    ag.add_argument("--bucket", dest="bucket_url", default=None, help="alias of --bucket-url")
    ag.add_argument("--metadata", dest="metadata_url", default=None, help="alias of --metadata-url")
    ag.add_argument(
        "--roles",
        default=os.environ.get("SKIFF_ROLES", "kafka"),
        help="comma-separated: kafka (always), compaction (retention, compaction and GC in the background)",
    )
    ag.add_argument(
        "--compaction-interval-ms",
        type=int,
        default=int(os.environ.get("SKIFF_COMPACTION_INTERVAL_MS", "30000")),
        help="with the compaction role: run a maintenance pass this often",
    )

    md = sub.add_parser("metadata", help="run the metadata HTTP service")
    md.add_argument("--db", default=os.environ.get("SKIFF_DB", "sqlite:///./skiff-data/metadata.db"))
    md.add_argument("--host", default=os.environ.get("SKIFF_METADATA_HOST", "127.0.0.1"))
    md.add_argument("--port", type=int, default=int(os.environ.get("SKIFF_METADATA_PORT", "9093")))
    md.add_argument(
        "--bucket",
        dest="bucket_url",
        default=os.environ.get("SKIFF_BUCKET_URL") or None,
        help="the bucket URL the agents write to, told to readers such as Spark (GET /v1/cluster)",
    )
    md.add_argument(
        "--tokens-file",
        default=os.environ.get("SKIFF_METADATA_TOKENS_FILE") or None,
        help="bearer tokens and their roles, one ROLE[,ROLE]:TOKEN per line (unset: no authentication"
        " unless SKIFF_METADATA_TOKENS holds them); see docs/operations.md",
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
        help="PEM certificate (chain) to serve HTTPS with",
    )
    md.add_argument(
        "--tls-key", default=os.environ.get("SKIFF_METADATA_TLS_KEY") or None, help="PEM key of --tls-cert"
    )
    md.add_argument(
        "--tls-client-ca",
        default=os.environ.get("SKIFF_METADATA_TLS_CLIENT_CA") or None,
        help="require client certificates signed by this PEM CA (mTLS)",
    )

    ins = sub.add_parser("inspect", help="print a segment file's chunks")
    ins.add_argument("target", help="a local path, file://, s3://bucket/key or memory:// URL")
    ins.add_argument("--verify", action="store_true", help="walk the file and check every batch")
    ins.add_argument("--json", action="store_true", help="machine-readable output")
    ins.add_argument(
        "--metadata",
        dest="metadata_url",
        default=os.environ.get("SKIFF_METADATA_URL"),
        help="metadata service (or database) URL: show topic names and the offsets metadata assigned",
    )
    ins.add_argument("--key", default=None, help="the object key in metadata (default: from segments/ on)")

    from skiff.cli.compact import add_arguments as add_compact_arguments

    cp = sub.add_parser("compact", help="retention, compaction, garbage collection and offset expiry")
    add_compact_arguments(cp)
    from skiff.cli.users import add_parser as add_users_parser

    add_users_parser(sub)  # `skiff users` (SCRAM users); dispatched through args.run

    from skiff.cli import groups, topics

    topics.add_parser(sub)
    groups.add_parser(sub)
    for long_running in (pg, ag, md, cp):  # what log shippers collect from
        long_running.add_argument(
            "--log-format",
            choices=("text", "json"),
            default=os.environ.get("SKIFF_LOG_FORMAT", "text"),
            help="text lines, or one JSON object per line (time, level, logger, message, exc_info)",
        )
    return parser


def _maintenance(interval_ms: int, holder: str) -> BackgroundRole:
    """Retention, compaction, GC and offset expiry every `interval_ms`, as a background role."""

    def role(md: MetadataClient, bucket_url: str) -> BackgroundTask:
        from skiff.cli.compact import maintenance_role

        return maintenance_role(md, bucket_url, interval_ms, holder)

    return role


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


def _configure_logging(level_name: str, log_format: str) -> None:
    """The root handler on stderr, in `log_format` (text or json), at `level_name`."""
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonLogFormatter())
        _uvicorn_logs_through_root()
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=getattr(logging, level_name.upper(), logging.INFO), handlers=[handler])
    for name in _QUIET_LOGGERS:
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    _configure_logging(str(args.log_level), getattr(args, "log_format", "text"))
    try:
        if getattr(args, "run", None) is not None:  # subcommands that dispatch themselves (skiff users)
            return int(args.run(args))
        if args.command == "inspect":
            from skiff.cli.inspect_cmd import run_inspect

            return run_inspect(
                args.target,
                verify=args.verify,
                as_json=args.json,
                metadata_url=args.metadata_url,
                object_key=args.key,
            )
        if args.command == "topics":
            from skiff.cli.topics import run_topics

            return run_topics(args)
        if args.command == "groups":
            from skiff.cli.groups import run_groups

            return run_groups(args)
        if args.command == "compact":
            from skiff.cli.compact import run_compact

            return run_compact(args)
        if args.command == "metadata":
            from skiff.agent.config_values import parse_value
            from skiff.agent.runtime import absolute_bucket_url
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
        if args.command == "agent":
            from skiff.agent.config import AgentConfig
            from skiff.agent.runtime import run_agent

            try:
                cfg = AgentConfig.from_args(args)
            except ValueError as exc:
                parser.error(str(exc))
            roles = {r.strip() for r in str(args.roles).split(",") if r.strip()}
            unknown = roles - {"kafka", "compaction"}
            if unknown:
                parser.error(f"unknown role(s): {', '.join(sorted(unknown))}")
            background = (
                [_maintenance(args.compaction_interval_ms, f"agent-{cfg.agent_id}")]
                if "compaction" in roles and args.compaction_interval_ms > 0
                else []
            )
            return run_agent(cfg, background)
        if args.command == "playground":
            from skiff.agent.runtime import run_playground

            interval_ms = args.compaction_interval_ms
            return run_playground(
                data_dir=args.data_dir,
                host=args.host,
                port=args.port,
                metadata_port=args.metadata_port,
                background=[_maintenance(interval_ms, "playground")] if interval_ms > 0 else [],
            )
    except KeyboardInterrupt:
        return 130
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
