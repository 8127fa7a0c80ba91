"""`skiff compact --once --pushgateway URL` (a real subprocess) pushes its metrics when it
ends: a stand-in Pushgateway on loopback receives one PUT under job `skiff-compact` and the
holder's grouping key, whose body parses as Prometheus text and holds the maintenance
families (jobs by outcome, GC deletions: the orphan object the test left in the bucket
was deleted) and the compactor's object-store requests and cost (`role="compactor"`), which
it also reported to metadata (metadata.usage).
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from skiff.metadata.service import MetadataService

from tests.support.agents import skiff_command


class Gateway:
    """Records the requests pushed to it (method, path, body) and answers 200."""

    def __init__(self) -> None:
        self.pushed: list[tuple[str, str, bytes]] = []
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                gateway.pushed.append(("PUT", self.path, body))
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def gateway() -> Iterator[Gateway]:
    g = Gateway()
    yield g
    g.close()


def test_compact_once_pushes_its_metrics_at_the_end(tmp_path: Path, gateway: Gateway) -> None:
    db_url = f"sqlite:///{tmp_path / 'm.db'}"
    MetadataService.from_url(db_url).close()  # migrated
    bucket = tmp_path / "bucket"
    (bucket / "segments").mkdir(parents=True)
    (bucket / "segments" / "orphan-1").write_bytes(b"x" * 100)  # no metadata row names it
    done = subprocess.run(
        [
            *skiff_command(),
            "compact",
            "--metadata",
            db_url,
            "--bucket",
            f"file://{bucket}",
            "--once",
            "--json",
            "--holder",
            "c-1",
            "--orphan-grace-ms",
            "0",
            "--pushgateway",
            gateway.url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert not (bucket / "segments" / "orphan-1").exists()
    assert len(gateway.pushed) == 1
    method, path, body = gateway.pushed[0]
    assert (method, path) == ("PUT", "/metrics/job/skiff-compact/holder/c-1")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(body.decode())
        for s in f.samples
    }
    assert samples[("skiff_gc_orphans_deleted_total", ())] == 1
    assert samples[("skiff_compaction_jobs_total", (("outcome", "failed"),))] == 0
    assert samples[("skiff_object_store_requests_total", (("kind", "list"), ("role", "compactor")))] >= 1
    assert samples[("skiff_object_store_requests_total", (("kind", "delete"), ("role", "compactor")))] == 1
    assert ("skiff_object_store_request_cost_usd_total", (("role", "compactor"),)) in samples
    assert samples[("skiff_compaction_last_success_timestamp_seconds", ())] > 0
    # and reported its requests to metadata as role compactor (metadata.usage), the same counts
    svc = MetadataService.from_url(db_url)
    try:
        reported = svc.usage.usage_totals(0)
    finally:
        svc.close()
    assert set(reported) == {"compactor"}
    assert reported["compactor"].deletes == 1
    assert (
        reported["compactor"].lists
        == samples[("skiff_object_store_requests_total", (("kind", "list"), ("role", "compactor")))]
    )
