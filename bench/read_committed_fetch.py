"""read_committed vs read_uncommitted fetches: metadata requests per fetch and consumer
throughput, with the agent's chunk-location cache answering read_committed ("after") and
with it bypassed for read_committed as before issue 13's fix ("before"), in one run.

    python bench/read_committed_fetch.py [--rounds 3] [--batches 200] [--db sqlite|postgresql://...]

Starts `skiff metadata` (SQLite file by default, or the PostgreSQL URL given) as a
subprocess; one agent runs in this process on a background event loop, over the HTTP
metadata client wrapped to count calls, and a file:// bucket. Three modes, each on its own
one-partition topic without transactions, interleaved (the order rotating) round by round:
- read_uncommitted;
- read_committed (this branch: `lookup_committed` / `known_tail_committed`);
- read_committed, before: the cache's read_committed answers switched off (every
  read_committed fetch asks metadata `find_chunks`, as the code did before).
Per mode and round, two phases with raw Fetch v12 requests (KafkaWire, one at a time):
- tail: a consumer long-polls (max_wait 500 ms) at the tail while a producer on the same
  agent sends `--batches` batches of 100 records of 100 B (acks=all, back to back);
- re-read: a second consumer reads the topic from offset 0 to the end (max_wait 0,
  partition_max_bytes 64 KiB): consumer throughput in records/s.
Reported: fetches, `find_chunks` calls per fetch, records/s. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kio.static.primitive import i8  # noqa: E402
from skiff.agent.config import AgentConfig  # noqa: E402
from skiff.agent.runtime import RunningAgent, start_agent  # noqa: E402
from skiff.fileformat.batch_header import iter_batches  # noqa: E402
from skiff.fileformat.objectstore import open_async_store  # noqa: E402
from skiff.fileformat.record_build import build_batch  # noqa: E402
from skiff.fileformat.record_decode import Record  # noqa: E402
from skiff.metadata.wire.http_client import HttpMetadataClient  # noqa: E402

from tests.support.agents import free_port, skiff_command, wait_for_port  # noqa: E402
from tests.support.kafka_wire import KafkaWire, fetch_request, produce_request  # noqa: E402

MODES = ("read_uncommitted", "read_committed", "read_committed (before)")
RECORDS_PER_BATCH = 100


class CountingClient:
    """Forwards to the metadata client, counting calls by method name."""

    def __init__(self, inner: HttpMetadataClient) -> None:
        self._inner = inner
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not asyncio.iscoroutinefunction(attr):
            return attr

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            return await attr(*args, **kwargs)

        return counted


def _fetch(wire: KafkaWire, topic: str, offset: int, isolation: int, wait_ms: int, limit: int) -> Any:
    req = fetch_request(topic, [(0, offset, limit)], max_wait_ms=wait_ms, max_bytes=1 << 20)
    part = wire.request(_with_isolation(req, isolation)).parse().responses[0].partitions[0]
    assert int(part.error_code) == 0, part
    return part


def _with_isolation(req: Any, isolation: int) -> Any:
    import dataclasses

    return dataclasses.replace(req, isolation_level=i8(isolation))


def _advance(records: bytes, offset: int) -> tuple[int, int]:
    """(next offset, data records) after the batches of one answer."""
    n = 0
    for _, h in iter_batches(records):
        offset = h.last_offset + 1
        n += h.records_count
    return offset, n


def tail_phase(bootstrap: str, topic: str, isolation: int, batches: int) -> tuple[int, float]:
    """(fetches, seconds) for a consumer at the tail to get every record of `batches`."""
    total = batches * RECORDS_PER_BATCH
    fetches = 0
    done = threading.Event()

    def consume() -> None:
        nonlocal fetches
        offset = got = 0
        with KafkaWire(bootstrap, timeout_s=60) as wire:
            while got < total:
                part = _fetch(wire, topic, offset, isolation, 500, 1 << 20)
                fetches += 1
                offset, n = _advance(bytes(part.records), offset)
                got += n
        done.set()

    consumer = threading.Thread(target=consume)
    t0 = time.perf_counter()
    consumer.start()
    value = b"x" * 100
    with KafkaWire(bootstrap, timeout_s=60) as wire:
        for _ in range(batches):
            batch = build_batch([Record(i, int(time.time() * 1000), None, value, ()) for i in range(100)])
            pr = wire.request(produce_request(topic, {0: batch})).parse().responses[0].partition_responses[0]
            assert int(pr.error_code) == 0, pr
    consumer.join(120)
    assert done.is_set(), "the tail consumer did not get every record"
    return fetches, time.perf_counter() - t0


def reread_phase(bootstrap: str, topic: str, isolation: int, batches: int) -> tuple[int, float]:
    """(fetches, seconds) to read the topic from offset 0 to the end."""
    total = batches * RECORDS_PER_BATCH
    fetches = offset = got = 0
    t0 = time.perf_counter()
    with KafkaWire(bootstrap, timeout_s=60) as wire:
        while got < total:
            part = _fetch(wire, topic, offset, isolation, 0, 64 << 10)
            fetches += 1
            offset, n = _advance(bytes(part.records), offset)
            got += n
    return fetches, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batches", type=int, default=200, help="batches of 100 records per topic and round")
    ap.add_argument("--db", default="sqlite", help="'sqlite' or a PostgreSQL URL (an empty database)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        db = f"sqlite:///{root / 'metadata.db'}" if args.db == "sqlite" else args.db
        env = {**os.environ, "SKIFF_LOG_LEVEL": "WARNING"}
        md_port = free_port()
        log = root / "md.log"
        proc = subprocess.Popen(
            [*skiff_command(), "metadata", "--db", db, "--port", str(md_port)],
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            env=env,
        )
        wait_for_port(md_port, proc, log)
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()

        def call(coro: Any) -> Any:
            return asyncio.run_coroutine_threadsafe(coro, loop).result(120)

        md = CountingClient(HttpMetadataClient(f"http://127.0.0.1:{md_port}"))
        cfg = AgentConfig.from_env({}, agent_id="bench", host="127.0.0.1", port=0, flush_interval_ms=10)

        async def start() -> RunningAgent:
            return await start_agent(cfg, md, open_async_store(f"file://{root / 'bucket'}"))  # type: ignore[arg-type]

        agent: RunningAgent = call(start())
        cache = agent.context.parts.chunk_locations
        real: dict[str, Callable[..., Any]] = {
            "lookup_committed": cache.lookup_committed,
            "known_tail_committed": cache.known_tail_committed,
        }

        def bypass(on: bool) -> None:  # "before": read_committed never answered by the cache
            for name, fn in real.items():
                setattr(cache, name, (lambda *a, **k: None) if on else fn)

        bootstrap = f"127.0.0.1:{agent.port}"
        rows: dict[tuple[str, str], list[tuple[int, int, float]]] = {}
        try:
            for rnd in range(args.rounds):
                for mode in MODES[rnd % 3 :] + MODES[: rnd % 3]:  # the order rotates by round
                    isolation = 0 if mode == "read_uncommitted" else 1
                    bypass(mode.endswith("(before)"))
                    topic = f"rc-{rnd}-{uuid.uuid4().hex[:6]}"
                    call(md.create_topic(topic, 1, {}))
                    for phase, run in (("tail", tail_phase), ("re-read", reread_phase)):
                        before = md.calls.get("find_chunks", 0)
                        fetches, seconds = run(bootstrap, topic, isolation, args.batches)
                        calls = md.calls.get("find_chunks", 0) - before
                        rows.setdefault((phase, mode), []).append((fetches, calls, seconds))
        finally:
            bypass(False)
            call(agent.close())
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            proc.terminate()
            proc.wait(30)
    records = args.batches * RECORDS_PER_BATCH
    print(f"{args.rounds} rounds, {records} records of 100 B per topic, metadata {args.db}")
    print()
    print("| phase | mode | fetches | find_chunks calls | calls per fetch | records/s (median) |")
    print("|---|---|---|---|---|---|")
    for (phase, mode), runs in rows.items():
        fetches = sum(r[0] for r in runs)
        calls = sum(r[1] for r in runs)
        rate = statistics.median(records / r[2] for r in runs)
        print(f"| {phase} | {mode} | {fetches} | {calls} | {calls / fetches:.3f} | {rate:,.0f} |")


if __name__ == "__main__":
    main()
