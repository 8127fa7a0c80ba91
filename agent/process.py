"""The `skiff agent` and `skiff playground` processes: start, serve until a signal, shut down,
exit (the agent itself is wired together by agent.runtime).

`run_agent` connects to metadata, claims the bucket, starts the agent (`agent.runtime.start_agent`),
its background tasks (the bucket claim, the roles the command line passes, the object-store
usage reports) and its health endpoint, and serves until SIGINT/SIGTERM, then shuts down
gracefully (`RunningAgent.shutdown`: the order is agent.runtime's docstring).

Then the process exits (`run_until_exit`), within `EXIT_TIMEOUT_MS`: `asyncio.run` and the
interpreter would wait without limit for a task that ignores its cancellation and for
every worker thread still running (the default executor's `asyncio.to_thread` calls, such
as an abandoned compaction job or a blocking store call; the metadata client's pool), and
a playground that logged "stopped cleanly" then lived on until SIGKILL. What is still
running at the deadline is logged with its stack, and the process exits at once with the
shutdown's code (everything promised was committed before; what is left is abandoned
work).

`run_playground` runs everything in one process on the embedded default: SQLite at
DATA_DIR/metadata.db, a file:// bucket at DATA_DIR/bucket, one agent, and the metadata
HTTP API (the same service object, so the HTTP view and the agent agree).

Background roles: `run_agent` and `run_playground` take factories of extra background
tasks (`agent.runtime.BackgroundRole`: given the metadata client and the bucket URL, an
object with `start()` and `async close()`). The `skiff` command line passes the compactor's
maintenance loop (retention, compaction, GC, offset expiry on a timer) through them, so
this module never imports the compactor (the import contract in pyproject.toml).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import io
import logging
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from skiff.agent.agent_registry import AgentIdInUse
from skiff.agent.bucket_claim import BUCKET_CLAIM_EVERY_HEARTBEATS, BucketClaim, claim_bucket_at_start
from skiff.agent.config import AgentConfig, env_var
from skiff.agent.runtime import (
    BackgroundRole,
    RunningAgent,
    absolute_bucket_url,
    open_agent_store,
    start_agent,
)
from skiff.agent.usage_reporting import UsageReporting
from skiff.fileformat.objectstore import AsyncObjectStore, open_async_store
from skiff.metadata.build_info import SKIFF_VERSION
from skiff.metadata.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    SASL_AUTHENTICATION_FAILED,
    MetadataError,
    MetadataUnavailable,
)
from skiff.metadata.wire.operations import MetadataClient

log = logging.getLogger(__name__)


def start_background(agent: RunningAgent, roles: Sequence[BackgroundRole], bucket_url: str) -> None:
    for role in roles:
        task = role(agent.metadata, bucket_url)
        task.start()
        agent.background.append(task)


def start_usage_reporting(agent: RunningAgent) -> None:
    """The object-store usage reports (agent.usage_reporting): last among the background
    tasks, so that its closing report includes what the others did until they stopped."""
    reporting = UsageReporting(agent)
    reporting.start()
    agent.background.append(reporting)


async def _wait_for_stop_signal() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()


# The collector's thresholds for the agent process. With CPython's default (700 net
# allocations per young collection) the objects of in-flight produce requests (which live
# one flush interval, ~250 ms) survive two young collections, reach the old generation and
# make full collections frequent and long (each scans every in-flight request): at 7,000
# small produce requests/s (bench/produce_request_cpu.py), 27 full collections of ~30 ms
# in 6 s: 1.1 s of GC in 5 s of CPU. Rarer young collections let most request objects die
# by reference count first: with 20,000 and 100,000 the same run spent 0.41 and 0.28 s in
# GC with no full collection, and 124 -> 100-106 us of agent CPU per request with 50,000
# (each young collection scans at most that many objects: a few ms).
GC_THRESHOLDS = (50_000, 10, 10)


def run_agent(config: AgentConfig, background: Sequence[BackgroundRole] = ()) -> int:
    """`skiff agent`: serve (and run the background roles) until SIGINT/SIGTERM, then shut
    down gracefully; 0 if that finished within `shutdown_timeout_ms`, else 1."""
    from skiff.agent.kube_zone import with_node_zone

    config = with_node_zone(config)  # SKIFF_ZONE_FROM_NODE: the Kubernetes node's zone label

    async def main() -> bool:
        metadata, store, bucket_url = await connect_agent_dependencies(config, "skiff agent")
        try:
            agent = await start_agent(config, metadata, store)
        except AgentIdInUse as e:
            await store.close()
            await metadata.close()
            raise SystemExit(f"skiff agent: cannot start: {e}") from None
        claims = BucketClaim(
            metadata, bucket_url, config.heartbeat_interval_ms * BUCKET_CLAIM_EVERY_HEARTBEATS
        )
        claims.start()
        agent.background.append(claims)
        start_background(agent, background, bucket_url)
        start_usage_reporting(agent)
        gc.freeze()  # start-up objects never die: keep full collections short (tail latency)
        gc.set_threshold(*GC_THRESHOLDS)
        if config.metrics_port:
            agent.serve_health(config.host, config.metrics_port)
        where = ", ".join(f"{s.host or '*'}:{s.port}" for s in agent.servers)
        print(f"skiff agent {config.agent_id} listening on {where} (skiff {SKIFF_VERSION})", flush=True)
        await _wait_for_stop_signal()
        return await agent.shutdown()

    return 0 if run_until_exit(main()) else 1


async def connect_agent_dependencies(
    config: AgentConfig, who: str
) -> tuple[MetadataClient, AsyncObjectStore, str]:
    """The metadata client (its token accepted), the bucket claimed for this cluster, and the
    object store: what an agent (or a pod's writer) needs before it starts. A refusal is a
    one-line SystemExit naming `who`."""
    from skiff.metadata.wire.connect import open_metadata_client
    from skiff.metadata.wire.credentials import CredentialsError

    try:
        metadata = open_metadata_client(
            config.metadata_url,
            timeout_s=config.metadata_timeout_ms / 1000,
            token=config.metadata_token,
            token_file=config.metadata_token_file,
            ca_file=config.metadata_ca_file,
            cert_file=config.metadata_client_cert,
            key_file=config.metadata_client_key,
        )
    except CredentialsError as e:
        raise SystemExit(f"{who}: cannot start: {e}") from None
    refused = await _credentials_refused(metadata)
    if refused is not None:
        await metadata.close()
        raise SystemExit(f"{who}: cannot start: the metadata service refused: {refused}")
    bucket_url = absolute_bucket_url(config.bucket_url)
    other_bucket = await claim_bucket_at_start(metadata, bucket_url)
    if other_bucket is not None:
        await metadata.close()
        raise SystemExit(f"{who}: cannot start: {other_bucket}")
    return metadata, open_agent_store(config), bucket_url


async def _credentials_refused(metadata: MetadataClient) -> str | None:
    """The metadata service's message if it refuses this process's token (an unreachable
    service is not a refusal: the agent starts and retries as usual)."""
    try:
        await metadata.live_agents()
    except MetadataError as e:
        if e.error_code in (SASL_AUTHENTICATION_FAILED, CLUSTER_AUTHORIZATION_FAILED):
            return e.message
    except MetadataUnavailable:
        pass
    return None


def _quiet_server_class() -> type:
    import uvicorn

    class QuietServer(uvicorn.Server):
        """uvicorn inside our loop: signals are ours, not uvicorn's."""

        @contextlib.contextmanager
        def capture_signals(self):  # type: ignore[no-untyped-def]
            yield

    return QuietServer


def _bind_listening_socket(host: str, port: int) -> socket.socket:
    """A bound, listening TCP socket on host:port, made before anything starts, so a taken
    port fails the playground before it announces itself (uvicorn serves on it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def run_playground(
    *, data_dir: str, host: str, port: int, metadata_port: int, background: Sequence[BackgroundRole] = ()
) -> int:
    """`skiff playground`: SQLite + file:// bucket under data_dir, one agent, the metadata
    API, and the background roles (the CLI passes compaction, retention and GC on a timer)."""
    import uvicorn
    from skiff.metadata.server.app import create_app
    from skiff.metadata.server.auth import exposure_warnings, load_tokens
    from skiff.metadata.server.local_client import LocalMetadataClient
    from skiff.metadata.service import MetadataService

    root = Path(data_dir).resolve()
    (root / "bucket").mkdir(parents=True, exist_ok=True)
    db_url = f"sqlite:///{root / 'metadata.db'}"
    bucket_url = f"file://{root / 'bucket'}"
    config = AgentConfig.from_env(
        agent_id=os.environ.get("SKIFF_AGENT_ID", "playground"),
        host=host,
        port=port,
        advertised_host=os.environ.get("SKIFF_ADVERTISED_HOST")
        or ("localhost" if host in ("0.0.0.0", "::") else host),
        bucket_url=bucket_url,
        metadata_url=db_url,
    )
    if env_var("group_initial_rebalance_delay_ms") not in os.environ:
        # No initial rebalance delay unless asked for, as in Kafka's development server.properties.
        config = config.replace(group_initial_rebalance_delay_ms=0)
    if env_var("metrics_port") not in os.environ:
        # The playground runs next to other things on a laptop: no HTTP port unless asked for.
        config = config.replace(metrics_port=0)

    # The playground's metadata API is open unless SKIFF_METADATA_TOKENS(_FILE) is set; it
    # says so when it listens beyond loopback.
    tokens = load_tokens(None)
    for warning in exposure_warnings(host, auth_enabled=tokens is not None, tls=False):
        log.warning("%s", warning)
    _QuietServer = _quiet_server_class()
    # Both ports are taken before anything is announced: the metadata socket here, the
    # Kafka port by start_agent; a clash raises OSError(EADDRINUSE) before "is up".
    http_socket = _bind_listening_socket(host, metadata_port)
    metadata_port = http_socket.getsockname()[1]
    if not config.advertised_metadata_url:  # what `--bootstrap-server` admin commands are told
        advertised = config.resolved_advertised_host()
        advertised = f"[{advertised}]" if ":" in advertised else advertised
        config = config.replace(advertised_metadata_url=f"http://{advertised}:{metadata_port}")

    async def main() -> bool:
        service = MetadataService.from_url(db_url, bucket_url=bucket_url)
        metadata = LocalMetadataClient(service, owns_service=True)
        store = open_async_store(bucket_url)
        try:
            agent = await start_agent(config, metadata, store)
        except BaseException:
            http_socket.close()  # the process exits with the error; the port is free at once
            raise
        start_background(agent, background, bucket_url)
        start_usage_reporting(agent)
        gc.freeze()
        http = _QuietServer(
            uvicorn.Config(
                create_app(service, tokens=tokens),
                host=host,
                port=metadata_port,
                log_level="warning",
                access_log=False,
            )
        )
        http_task = asyncio.create_task(http.serve(sockets=[http_socket]))
        print(
            f"Skiff playground is up.\n"
            f"  Kafka bootstrap:  {config.resolved_advertised_host()}:{agent.port}\n"
            f"  metadata API:     http://{host}:{metadata_port}/docs\n"
            f"  web console:      http://{host}:{metadata_port}/console\n"
            f"  data directory:   {root}\n"
            f"Try:  echo hello | kcat -b localhost:{agent.port} -t demo -P\n"
            f"      kcat -b localhost:{agent.port} -t demo -C -e\n"
            f"Stop with Ctrl-C.",
            flush=True,
        )
        if config.metrics_port:
            agent.serve_health(host, config.metrics_port)
        try:
            await _wait_for_stop_signal()
            # Background roles stop first, while the listener still answers: the demo's
            # clients (skiff.cli.demo) leave their group and flush at once instead of
            # waiting on a closed listener. Then the agent drains (its commits go through
            # the service in this process, not through the HTTP API), then the metadata API.
            await _close_background(agent, config.shutdown_timeout_ms)
            clean = await agent.shutdown()
        finally:
            await _stop_http(http, http_task)
        return clean

    return 0 if run_until_exit(main()) else 1


async def _close_background(agent: RunningAgent, timeout_ms: int) -> None:
    """Close the background roles within `timeout_ms` (what is left is the drain's)."""
    tasks, agent.background = list(agent.background), []
    try:
        async with asyncio.timeout(timeout_ms / 1000):
            for task in tasks:
                await task.close()
    except TimeoutError:
        log.warning("background roles still closing after %d ms; the drain goes on", timeout_ms)


async def _stop_http(http: Any, task: asyncio.Task[Any], timeout_s: float = 2.0) -> None:
    """Stop the playground's metadata API: uvicorn waits for open requests without limit
    unless told to force its exit, which it is after `timeout_s`."""
    http.should_exit = True
    done, _ = await asyncio.wait({task}, timeout=timeout_s)
    if not done:
        log.warning("metadata API: requests still open %.0f s after the stop; closing them", timeout_s)
        http.force_exit = True
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
    if not done:
        task.cancel()
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await task


# How long what is left of the process may take to end once `main` returned (tasks,
# worker threads): after the shutdown's own timeout, within Kubernetes' 30 s grace period.
EXIT_TIMEOUT_MS = 3_000


def run_until_exit(main: Coroutine[Any, Any, bool], exit_timeout_ms: int = EXIT_TIMEOUT_MS) -> bool:
    """`asyncio.run(main)` with a bounded end (module docstring): the tasks still pending
    are cancelled, then they and the worker threads get until `exit_timeout_ms` to end.
    Whatever outlives that is logged with its stack and the process exits at once
    (`os._exit`) with `main`'s outcome (0 if True, else 1)."""
    loop = asyncio.new_event_loop()
    # Our own default executor: it is shut down without waiting (asyncio.run's waits for
    # every `to_thread` call to return, with no limit).
    executor = ThreadPoolExecutor(thread_name_prefix="skiff-to-thread")
    loop.set_default_executor(executor)
    asyncio.set_event_loop(loop)
    try:
        clean = loop.run_until_complete(main)
    finally:
        deadline_s = time.monotonic() + exit_timeout_ms / 1000
        stuck_tasks = _cancel_remaining_tasks(loop, deadline_s)
        executor.shutdown(wait=False, cancel_futures=True)
        asyncio.set_event_loop(None)
        loop.close()
    stuck_threads = _join_threads(deadline_s)
    if stuck_tasks or stuck_threads:
        _log_stuck(stuck_tasks, stuck_threads, exit_timeout_ms)
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0 if clean else 1)
    return clean


def _cancel_remaining_tasks(loop: asyncio.AbstractEventLoop, deadline_s: float) -> list[asyncio.Task[Any]]:
    """Cancel every task still pending and wait for them until `deadline_s`; the ones
    that did not end (a task that swallows its cancellation and goes on)."""
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for t in tasks:
        t.cancel()
    if tasks:
        timeout_s = max(deadline_s - time.monotonic(), 0.0)
        loop.run_until_complete(asyncio.wait(tasks, timeout=timeout_s))
    for t in tasks:
        if t.done() and not t.cancelled() and t.exception() is not None:
            log.error("task %s failed during shutdown", t.get_name(), exc_info=t.exception())
    with contextlib.suppress(Exception):
        loop.run_until_complete(asyncio.wait_for(loop.shutdown_asyncgens(), 1))
    return [t for t in tasks if not t.done()]


def _join_threads(deadline_s: float) -> list[threading.Thread]:
    """Wait until `deadline_s` for the threads the interpreter would wait for at exit
    (every non-daemon thread: worker pools' threads are); the ones still running."""
    me = threading.current_thread()
    waiting = [t for t in threading.enumerate() if t is not me and not t.daemon]
    for t in waiting:
        t.join(max(deadline_s - time.monotonic(), 0.0))
    return [t for t in waiting if t.is_alive()]


def _log_stuck(tasks: list[asyncio.Task[Any]], threads: list[threading.Thread], exit_timeout_ms: int) -> None:
    frames = sys._current_frames()
    for task in tasks:
        task_stack = io.StringIO()
        task.print_stack(file=task_stack)
        log.error(
            "exit: task still running %d ms after the stop; abandoned: %s",
            exit_timeout_ms,
            task_stack.getvalue(),
        )
    for thread in threads:
        frame = frames.get(thread.ident or -1)
        stack = "".join(traceback.format_stack(frame)) if frame is not None else ""
        log.error(
            "exit: thread %s still running %d ms after the stop; abandoned:\n%s",
            thread.name,
            exit_timeout_ms,
            stack,
        )
