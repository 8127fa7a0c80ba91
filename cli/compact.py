"""`skiff compact`: retention, compaction, garbage collection and offset expiry, from the CLI;
and the same maintenance as a background role of the playground and of agents.

    skiff compact --metadata URL [--bucket URL] [--once] [--topic T] [--dry-run] [--json]
                  [--metrics-port PORT [--metrics-host HOST]] [--pushgateway URL]
                  [--table-catalog DB_URL] [--table-max-commit-bytes N]

The bucket is the one the metadata service serves (GET /v1/cluster); `--bucket` may name it
too, and a bucket that differs is refused (one line, exit 1) rather than compacted.

`--dry-run` prints the jobs the planner would run now (`compactor.planner.describe_plan`)
and changes nothing: no lease, no retention, no deletion. `--once` runs one pass
(`compactor.runner.run_pass`: retention, compaction rounds until the planner has nothing
left, GC and the orphan scan, offset expiry) and exits; without it, passes repeat every
`--interval-ms` until SIGINT/SIGTERM. Progress bars (rich) go to stderr while it works;
the summary goes to stdout at the end (`--json`: one JSON object). The test hook
`SKIFF_COMPACT_PAUSE_AFTER_SWAPS` (compactor.pause_hook) and the tables' one,
`SKIFF_TABLES_PAUSE_AT` (compactor.tables_pause), are read here, for the CLI and for the
agent role. Tables (compactor.tables) are materialized when there is a catalog
(`--table-catalog`, else a database `--metadata` URL; the playground's own database).

Metrics (compactor.metrics: jobs, bytes and records in and out, records removed, GETs per
input file, retention and GC deletions; and the compactor's object-store requests with
their cost estimate, `role="compactor"`): `--metrics-port` serves them at /metrics while
the command runs (a long-running compactor: scrape it like an agent); `--pushgateway URL`
pushes them to a Prometheus Pushgateway when the command ends (a CronJob, gone before any
scrape), under job `skiff-compact` and grouping key `holder`. A failed push is logged and
does not change the exit status.

This module is the agent package's one door to the compactor (the import contract in
pyproject.toml): `maintenance_role` builds the `MaintenanceLoop` the playground and the
agent's compaction role run, so agent.runtime never imports compactor itself.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from rich.console import Console
from skiff.agent.periodic import Periodic
from skiff.cli.admin_common import stdout_console
from skiff.cli.compact_output import RichProgress, print_summary
from skiff.compactor.gc import DEFAULT_GRACE_MS, DEFAULT_ORPHAN_GRACE_MS
from skiff.compactor.keymap import DEFAULT_BUDGET_BYTES
from skiff.compactor.maintenance_loop import DEFAULT_INTERVAL_MS, MaintenanceLoop
from skiff.compactor.output import DEFAULT_ROLL_BYTES
from skiff.compactor.pass_summary import PassSummary
from skiff.compactor.pause_hook import PauseHook
from skiff.compactor.planner import (
    DEFAULT_LEASE_MS,
    DEFAULT_MAX_JOB_INPUT_BYTES,
    PlannerConfig,
    describe_plan,
    plan_jobs,
)
from skiff.compactor.retention import DEFAULT_OFFSETS_RETENTION_MINUTES
from skiff.compactor.runner import RunnerConfig, run_pass
from skiff.fileformat.objectstore import ObjectStore, open_store
from skiff.metadata.compaction.types import MergeRules
from skiff.metadata.wire.operations import MetadataClient
from skiff.metadata.wire.usage_report import REPORT_INTERVAL_MS, UsageBook, report_async

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from prometheus_client.core import Metric
    from skiff.compactor.tables import TablesConfig

_PID_HOLDER = "compactor-PID"  # the help shows this; the process's id replaces PID


def _holder(args: argparse.Namespace) -> str:
    return f"compactor-{os.getpid()}" if args.holder == _PID_HOLDER else str(args.holder)


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, str(default)))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--bucket",
        dest="bucket_url",
        default=os.environ.get("SKIFF_BUCKET_URL"),
        help="the bucket URL the agents write to, which must be the one metadata serves (env"
        " SKIFF_BUCKET_URL; default: the bucket URL metadata serves)",
    )
    p.add_argument(
        "--metadata",
        dest="metadata_url",
        default=os.environ.get("SKIFF_METADATA_URL"),
        help="metadata service (or database) URL (env SKIFF_METADATA_URL; required)",
    )
    p.add_argument(
        "--metadata-token-file",
        default=None,
        help="file holding the metadata bearer token (env SKIFF_METADATA_TOKEN_FILE, or the token in"
        " SKIFF_METADATA_TOKEN; default: unset)",
    )
    p.add_argument(
        "--metadata-ca-file",
        default=None,
        help="PEM CA of an https:// metadata service (env SKIFF_METADATA_CA_FILE; default: the system CAs)",
    )
    p.add_argument(
        "--table-catalog",
        default=os.environ.get("SKIFF_TABLE_CATALOG"),
        help="database URL of the Iceberg SQL catalog for topics with skiff.table.enabled (env"
        " SKIFF_TABLE_CATALOG; default: --metadata when it is a database URL, else no tables)",
    )
    p.add_argument(
        "--table-max-commit-bytes",
        type=int,
        default=_env_int("SKIFF_TABLE_MAX_COMMIT_BYTES", 256 * 1024 * 1024),
        help="chunk bytes one table commit reads at most (env SKIFF_TABLE_MAX_COMMIT_BYTES; default:"
        " %(default)s)",
    )
    p.add_argument("--once", action="store_true", help="one pass until nothing is left to do, then exit")
    p.add_argument("--topic", default=None, help="only this topic")
    p.add_argument("--dry-run", action="store_true", help="print the plan and change nothing")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.add_argument(
        "--metrics-port",
        type=int,
        default=_env_int("SKIFF_COMPACT_METRICS_PORT", 0),
        help="serve Prometheus metrics at /metrics on this port while running (env"
        " SKIFF_COMPACT_METRICS_PORT; default 0: off)",
    )
    p.add_argument(
        "--metrics-host",
        default=os.environ.get("SKIFF_COMPACT_METRICS_HOST", "127.0.0.1"),
        help="address of --metrics-port (env SKIFF_COMPACT_METRICS_HOST; default %(default)s;"
        " 0.0.0.0 in a pod)",
    )
    p.add_argument(
        "--pushgateway",
        default=os.environ.get("SKIFF_COMPACT_PUSHGATEWAY"),
        help="push the metrics to this Prometheus Pushgateway URL at the end (env"
        " SKIFF_COMPACT_PUSHGATEWAY; default: off)",
    )
    _add_tuning_arguments(p)


def _add_tuning_arguments(p: argparse.ArgumentParser) -> None:
    d = " (default: %(default)s)"
    p.add_argument(
        "--interval-ms",
        type=int,
        default=_env_int("SKIFF_COMPACT_INTERVAL_MS", DEFAULT_INTERVAL_MS),
        help="without --once: time between passes (env SKIFF_COMPACT_INTERVAL_MS; default: %(default)s)",
    )
    p.add_argument(
        "--holder",
        default=os.environ.get("SKIFF_COMPACT_HOLDER", _PID_HOLDER),
        help="this compactor's name in its leases and output keys (env SKIFF_COMPACT_HOLDER; default: %(default)s)",
    )
    p.add_argument(
        "--lease-ms",
        type=int,
        default=_env_int("SKIFF_COMPACT_LEASE_MS", DEFAULT_LEASE_MS),
        help="how long a job's lease lasts without renewal (env SKIFF_COMPACT_LEASE_MS; default: %(default)s)",
    )
    p.add_argument(
        "--max-job-input-bytes", type=int, default=DEFAULT_MAX_JOB_INPUT_BYTES, help="input of one job" + d
    )
    p.add_argument(
        "--keymap-budget-bytes",
        type=int,
        default=DEFAULT_BUDGET_BYTES,
        help="most memory of one job's key map" + d,
    )
    p.add_argument("--roll-bytes", type=int, default=DEFAULT_ROLL_BYTES, help="output file size" + d)
    _add_merge_and_cleanup_arguments(p)


def _add_merge_and_cleanup_arguments(p: argparse.ArgumentParser) -> None:
    d = " (default: %(default)s)"
    rules = MergeRules()
    p.add_argument(
        "--merge-min-bytes",
        type=int,
        default=rules.min_level0_bytes,
        help="merge small chunks once this many bytes" + d,
    )
    p.add_argument(
        "--merge-min-chunks",
        type=int,
        default=rules.min_level0_chunks,
        help="merge once this many small chunks" + d,
    )
    p.add_argument(
        "--merge-max-delay-ms",
        type=int,
        default=rules.max_level0_delay_ms,
        help="merge chunks older than this" + d,
    )
    p.add_argument(
        "--merge-target-chunk-bytes",
        type=int,
        default=rules.target_chunk_bytes,
        help="size of a merged chunk" + d,
    )
    p.add_argument(
        "--gc-grace-ms",
        type=int,
        default=DEFAULT_GRACE_MS,
        help="keep replaced files this long for readers" + d,
    )
    p.add_argument(
        "--orphan-grace-ms",
        type=int,
        default=DEFAULT_ORPHAN_GRACE_MS,
        help="delete objects no metadata row names after this age" + d,
    )
    p.add_argument(
        "--offsets-retention-minutes",
        type=int,
        default=DEFAULT_OFFSETS_RETENTION_MINUTES,
        help="expire committed offsets of empty groups after this" + d,
    )


def config_from_args(args: argparse.Namespace) -> RunnerConfig:
    planner = PlannerConfig(
        holder=_holder(args),
        max_job_input_bytes=args.max_job_input_bytes,
        lease_ms=args.lease_ms,
        rules=MergeRules(
            target_chunk_bytes=args.merge_target_chunk_bytes,
            min_level0_bytes=args.merge_min_bytes,
            min_level0_chunks=args.merge_min_chunks,
            max_level0_delay_ms=args.merge_max_delay_ms,
        ),
    )
    return RunnerConfig(
        planner=planner,
        topic=args.topic,
        keymap_budget_bytes=args.keymap_budget_bytes,
        roll_bytes=args.roll_bytes,
        key_prefix=f"compacted/{_holder(args)}/",
        gc_grace_ms=args.gc_grace_ms,
        orphan_grace_ms=args.orphan_grace_ms,
        offsets_retention_minutes=args.offsets_retention_minutes,
        pause=PauseHook.from_env(),
    )


def open_bucket(url: str) -> ObjectStore:
    from skiff.agent.runtime import absolute_bucket_url

    return open_store(absolute_bucket_url(url))


async def _dry_run(md: MetadataClient, config: RunnerConfig, out: Console) -> int:
    plans = await plan_jobs(md, topic=config.topic, config=config.planner)
    if not plans:
        out.print("nothing to do", markup=False)
    for plan in plans:
        out.print(describe_plan(plan), markup=False, highlight=False)
    return 0


async def _compact(args: argparse.Namespace) -> int:
    from skiff.metadata.wire.connect import open_metadata_client, open_sync_metadata_client

    config = config_from_args(args)
    creds = {"token_file": args.metadata_token_file, "ca_file": args.metadata_ca_file}
    md = open_metadata_client(args.metadata_url, **creds)
    # The jobs' threads swap their outputs through a blocking client of their own (no hop to
    # the event loop per swap); planning, leases and GC stay on the async one.
    swap_client = open_sync_metadata_client(args.metadata_url, **creds)
    config = dataclasses.replace(config, swap_client=swap_client)
    out = stdout_console()
    err = Console(stderr=True, highlight=False)
    try:
        if args.dry_run:
            return await _dry_run(md, config, out)
        bucket_url = await _bucket_url(md, args)
        store = open_bucket(bucket_url)
        config = _with_tables(args, config, bucket_url)
        if config.pause is not None:
            config.pause.install_resume_signal()
        exporter = MetricsExporter(store, _holder(args))
        if args.metrics_port:
            exporter.serve(args.metrics_host, args.metrics_port)
        usage = UsageBook(store.stats.snapshot)  # the bill's share of this process (metadata.usage)
        reports = Periodic(
            "usage-report",
            lambda: REPORT_INTERVAL_MS / 1000,
            lambda: report_async(usage, md.report_compactor_usage),
            lambda e: log.warning("object-store usage report failed: %s", e),
        )
        reports.start()
        try:
            total = await _run(args, md, store, config, err)
        finally:
            await reports.close()
            await report_async(usage, md.report_compactor_usage)
            exporter.close()
            if args.pushgateway:
                await asyncio.to_thread(exporter.push, args.pushgateway)
        if args.json:
            print(json.dumps(total.as_dict()), flush=True)
        else:
            print_summary(total, out)
        return 1 if total.jobs_failed else 0
    finally:
        await md.close()
        swap_client.close()


def _with_tables(args: argparse.Namespace, config: RunnerConfig, bucket_url: str) -> RunnerConfig:
    """Tables on when there is a catalog: --table-catalog, else a database --metadata URL."""
    catalog = args.table_catalog
    if not catalog and not str(args.metadata_url).startswith(("http://", "https://")):
        catalog = args.metadata_url
    if not catalog:
        return config
    tables = tables_config(
        catalog,
        bucket_url,
        _holder(args),
        lease_ms=args.lease_ms,
        max_commit_bytes=args.table_max_commit_bytes,
        orphan_grace_ms=args.orphan_grace_ms,
        topic=args.topic,
    )
    return dataclasses.replace(config, tables=tables)


def tables_config(catalog: str, bucket_url: str, holder: str, **options: Any) -> TablesConfig:
    """The materializer's settings, with the test hook `SKIFF_TABLES_PAUSE_AT` when set."""
    from skiff.agent.runtime import absolute_bucket_url
    from skiff.compactor.tables import TablesConfig
    from skiff.compactor.tables_pause import TablesPause
    from skiff.fileformat.tables_layout import warehouse_for

    warehouse = warehouse_for(absolute_bucket_url(bucket_url))
    return TablesConfig(catalog, warehouse, holder=holder, hook=TablesPause.from_env(), **options)


async def _run(
    args: argparse.Namespace, md: MetadataClient, store: ObjectStore, config: RunnerConfig, err: Console
) -> PassSummary:
    """One pass (`--once`), or passes until SIGINT/SIGTERM, under the progress bars."""
    total = PassSummary()
    with RichProgress(err) as progress:
        if args.once:
            total = await run_pass(md, store, config, progress)
        else:
            loop = MaintenanceLoop(
                md, store, config, interval_ms=args.interval_ms, progress_factory=lambda: progress
            )
            stop = asyncio.Event()
            running = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError):
                    running.add_signal_handler(sig, stop.set)
            loop.start()
            await stop.wait()
            await loop.close()
            total = loop.total
        progress.finish()
    return total


class MetricsExporter:
    """This process's maintenance metrics and its store's requests (`role="compactor"`,
    with the cost estimate) in one registry: served while running, pushed at the end."""

    JOB = "skiff-compact"

    def __init__(self, store: ObjectStore, holder: str) -> None:
        from prometheus_client import CollectorRegistry

        self.holder = holder
        self.registry = CollectorRegistry()
        self.registry.register(_CompactCollector(store))
        self._server: Any = None

    def serve(self, host: str, port: int) -> None:
        from prometheus_client import start_http_server

        self._server, _thread = start_http_server(port, addr=host, registry=self.registry)
        log.info("metrics at http://%s:%d/metrics", host, self._server.server_port)

    def push(self, url: str) -> None:
        from prometheus_client import push_to_gateway

        try:
            push_to_gateway(url, job=self.JOB, registry=self.registry, grouping_key={"holder": self.holder})
        except OSError as e:  # the work is done; a missing gateway is the operator's to see
            log.error("pushing metrics to %s failed: %s", url, e)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class _CompactCollector:
    def __init__(self, store: ObjectStore) -> None:
        from skiff.agent.store_metrics import CostTracker
        from skiff.fileformat.objectstore.pricing import Prices

        self._store = store
        self._costs = CostTracker(Prices.from_env())

    def collect(self) -> Iterator[Metric]:
        from skiff.agent.store_metrics import object_store_families
        from skiff.compactor.metrics import families

        yield from object_store_families([("compactor", self._store.stats.snapshot())], self._costs)
        yield from families()


async def _bucket_url(md: MetadataClient, args: argparse.Namespace) -> str:
    """The bucket to compact: the one metadata serves (GET /v1/cluster), or `--bucket`, which
    must then be the same one (compacting another bucket would rewrite data no agent reads)."""
    from skiff.agent.runtime import absolute_bucket_url
    from skiff.cli.errors import CommandError, UsageError

    served = await md.bucket_url()
    given = args.bucket_url
    if given is None:
        if served is None:
            raise UsageError("--bucket URL is required: the metadata service serves no bucket URL")
        return str(served)
    if served is not None and not _same_bucket(absolute_bucket_url(given), absolute_bucket_url(served)):
        raise CommandError(
            f"--bucket {given} is not the bucket the metadata service serves ({served}): refusing"
        )
    return str(given)


def _same_bucket(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


def run_compact(args: argparse.Namespace) -> int:
    """Failures propagate to the command line's top level: one line (skiff.cli.errors)."""
    from skiff.cli.errors import UsageError

    if not args.metadata_url:
        raise UsageError("--metadata URL is required (or SKIFF_METADATA_URL)")
    return asyncio.run(_compact(args))


def maintenance_role(
    md: MetadataClient, bucket_url: str, interval_ms: int, holder: str, table_catalog: str | None = None
) -> MaintenanceLoop:
    """The background maintenance of the playground and of agents given the compaction role:
    the same passes as `skiff compact`, every `interval_ms`, leases keeping them apart; with
    `table_catalog` (a database URL) it materializes tables too, each table at most every
    `skiff.table.commit.interval.ms`."""
    config = RunnerConfig(
        planner=PlannerConfig(holder=holder), key_prefix=f"compacted/{holder}/", pause=PauseHook.from_env()
    )
    if table_catalog:
        tables = tables_config(table_catalog, bucket_url, holder, paced=True)
        config = dataclasses.replace(config, tables=tables)
    if config.pause is not None:
        config.pause.install_resume_signal()  # called in the agent's event loop
    return MaintenanceLoop(md, open_bucket(bucket_url), config, interval_ms=interval_ms)
