"""The HTTP endpoint of an agent (and of a pod's writer): `GET /metrics` (a prometheus-client
registry), `GET /healthz` (200 while the process serves) and `GET /readyz` (200 `ready`, or
`ready: <reason>` while a probe failure is tolerated; 503 `not ready: <reason>`), anything
else 404. A WSGI app on a threading server in daemon threads, so probes and scrapes never
wait for the agent's event loop; at most MAX_HTTP_THREADS requests at once (more
connections are closed at accept) and HTTP_SOCKET_TIMEOUT_S for a request to arrive, so a
flood on the port cannot make the process start threads without bound. A port already
taken is logged, not fatal (agent.metrics.serve_metrics says why)."""

from __future__ import annotations

import logging
import socketserver
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

    from skiff.agent.health import ReadinessCheck

log = logging.getLogger(__name__)

MAX_HTTP_THREADS = 16  # probes and scrapes at once; more connections are closed at accept
HTTP_SOCKET_TIMEOUT_S = 10.0  # a client that sends its request slower than this is dropped


class _ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    """A thread per request, at most MAX_HTTP_THREADS of them (a flood of connections to
    the port cannot make the agent start threads without bound)."""

    daemon_threads = True  # a stuck probe never keeps the process alive
    allow_reuse_address = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._slots = threading.BoundedSemaphore(MAX_HTTP_THREADS)
        self.refused = 0

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.refused += 1
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class _QuietHandler(WSGIRequestHandler):
    timeout = HTTP_SOCKET_TIMEOUT_S

    def log_message(self, format: str, *args: object) -> None:  # probes every few seconds: no access log
        pass


def health_app(metrics: WSGIApplication, readiness: ReadinessCheck | None) -> WSGIApplication:
    """/healthz and /readyz, /metrics from the Prometheus app, 404 for anything else."""

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path in ("/healthz", "/readyz"):
            if path == "/healthz":
                status, body = "200 OK", "ok\n"
            elif readiness is None:
                status, body = "503 Service Unavailable", "no readiness check\n"
            else:
                verdict = readiness.check()
                status = "200 OK" if verdict.ready else "503 Service Unavailable"
                if not verdict.ready:
                    body = f"not ready: {verdict.reason}\n"
                else:  # a tolerated probe failure shows (agent.health)
                    body = "ready\n" if verdict.reason == "ok" else f"ready: {verdict.reason}\n"
            data = body.encode()
            start_response(
                status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(data)))]
            )
            return [data]
        if path == "/metrics":
            return metrics(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found: /metrics, /healthz and /readyz are served here\n"]

    return app


class HttpEndpoint:
    """The running /metrics + /healthz + /readyz server; `close()` stops it."""

    # serve_forever() checks for shutdown() every poll interval, and close() (called on the
    # agent's event loop during a SIGTERM drain) waits for that check: at http.server's
    # default 0.5 s it added half a second to every drain (bench/shutdown_drain.py).
    POLL_INTERVAL_S = 0.05

    def __init__(self, server: WSGIServer) -> None:
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, args=(self.POLL_INTERVAL_S,), name="skiff-http", daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def serve_collector(
    registry: CollectorRegistry, host: str, port: int, readiness: ReadinessCheck | None
) -> HttpEndpoint | None:
    """/metrics of `registry`, /healthz and /readyz (`readiness.check()`) on host:port, in
    daemon threads; a port already taken is logged (see serve_metrics)."""
    try:
        server = make_server(
            host,
            port,
            health_app(make_wsgi_app(registry), readiness),
            server_class=_ThreadingWSGIServer,
            handler_class=_QuietHandler,
        )
    except OSError as e:
        log.error("cannot serve /metrics, /healthz and /readyz on %s:%d: %s", host, port, e)
        return None
    return HttpEndpoint(server)
