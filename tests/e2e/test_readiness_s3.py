"""A real `skiff agent` on a real S3 server (moto) whose bucket does not exist: /readyz answers
503 naming the failed PUT and S3's NoSuchBucket, metadata lists the agent as not ready, one
ERROR line says so (not one per probe); once the bucket is created the agent turns ready
with one INFO line (agent.health)."""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

from tests.e2e.test_graceful_shutdown import Agent, wait_until
from tests.support.agents import SkiffProcess, agent_args
from tests.support.s3servers import S3Bucket


def _agents(metadata_port: int) -> dict[str, bool]:
    with urllib.request.urlopen(f"http://127.0.0.1:{metadata_port}/v1/agents", timeout=10) as r:
        return {a["agent_id"]: a["ready"] for a in json.load(r)}


def test_an_agent_whose_bucket_does_not_exist_is_not_ready_until_it_does(
    spawn_skiff: Callable[..., SkiffProcess], moto_s3: S3Bucket, tmp_path: Path
) -> None:
    md = spawn_skiff("metadata", "--db", f"sqlite:///{tmp_path / 'm.db'}", "--port", "{port}")
    missing = f"skiff-missing-{uuid.uuid4().hex[:12]}"
    proc = spawn_skiff(
        *agent_args(f"s3://{missing}/data", f"http://127.0.0.1:{md.port}"),
        "--agent-id",
        "nobucket",
        "--metrics-port",
        "{metrics_port}",
        env={**moto_s3.env, "SKIFF_READINESS_PROBE_INTERVAL_MS": "200", "SKIFF_HEARTBEAT_INTERVAL_MS": "500"},
    )
    assert proc.metrics_port is not None
    agent = Agent(proc, "nobucket", proc.port, proc.metrics_port)
    try:
        wait_until(lambda: agent.http("/readyz")[0] == 503, "/readyz to answer 503")

        def says_no_such_bucket() -> bool:
            # the latest probe's reason; on a loaded machine one probe may time out instead
            # ("did not answer within 1000 ms"), and the next one, 200 ms later, says why
            status, body = agent.http("/readyz")
            assert status == 503, body
            return "PUT _skiff/readiness/nobucket failed" in body and "NoSuchBucket" in body

        wait_until(says_no_such_bucket, "/readyz to say the bucket does not exist")
        assert _agents(md.port) == {"nobucket": False}
        wait_until(
            lambda: agent.metric('skiff_readiness_probe_failures_total{dependency="bucket"}') >= 3, "probes"
        )

        moto_s3.client().create_bucket(Bucket=missing)
        wait_until(lambda: agent.http("/readyz") == (200, "ready\n"), "/readyz to answer 200")
        wait_until(lambda: _agents(md.port) == {"nobucket": True}, "the heartbeat to say ready")
        log = proc.log.read_text()
        # one ERROR for several failed probes, naming the bucket (on a loaded machine the first
        # probe may also have timed out on metadata: "not ready: metadata ...; bucket s3://...")
        not_ready = [line for line in log.splitlines() if "agent nobucket not ready: " in line]
        assert len(not_ready) == 1 and "bucket s3://" in not_ready[0], log
        assert log.count("agent nobucket ready again after") == 1, log
    finally:
        proc.kill()
        client = moto_s3.client()
        for o in (
            client.list_objects_v2(Bucket=missing).get("Contents", []) if _exists(client, missing) else []
        ):
            client.delete_object(Bucket=missing, Key=o["Key"])
        if _exists(client, missing):
            client.delete_bucket(Bucket=missing)


def _exists(client: object, bucket: str) -> bool:
    return any(b["Name"] == bucket for b in client.list_buckets().get("Buckets", []))  # type: ignore[attr-defined]
