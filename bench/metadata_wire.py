"""What the metadata wire layer costs per call: encoding and decoding a file commit, and whole
calls through the HTTP client and the FastAPI app (in process, ASGI transport: no sockets)
over a SQLite service.

Runs against whichever code is importable: the declared operations (`skiff.metadata.wire`,
derived codec) or, given an older checkout on PYTHONPATH, the hand-written pydantic mirrors
(`skiff.metadata.serde`), so one machine can compare the two in one sitting:

    python bench/metadata_wire.py                       # this checkout
    python bench/metadata_wire.py --compare OLD_TREE    # alternate runs: this checkout, OLD_TREE

OLD_TREE is a directory holding `skiff/` whose subfolders link to an older checkout's
folders (see docs/benchmarks.md). Prints CPU microseconds per operation (this process: client,
app and service together; median of rounds): CPU, not wall time, so that a busy machine
skews the comparison less.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any

CHUNKS = 100  # partitions in one commit: a busy agent's file
BATCHES = 3  # batches per partition in the file


def _specs() -> tuple[Any, list[Any]]:
    from skiff.metadata.types import BatchSpec, ChunkSpec, FileSpec

    tid = uuid.uuid4()
    chunks = [
        ChunkSpec(tid, p, tuple(BatchSpec(i * 100, 100, 10, 10, 1_700_000_000_000) for i in range(BATCHES)))
        for p in range(CHUNKS)
    ]
    return FileSpec("segments/x.seg", CHUNKS * BATCHES * 100, 0, "agent-1"), chunks


def _codec_new() -> Any:
    from skiff.metadata.wire.operations import OPERATIONS

    op = OPERATIONS["commit_file"]
    file, chunks = _specs()

    def once() -> None:
        body = op.encode_request(op.bind((file, chunks), {}))
        args = op.decode_request(body)
        assert len(args["chunks"]) == CHUNKS

    return once


def _codec_old() -> Any:
    from skiff.metadata import serde as s

    file, chunks = _specs()

    def once() -> None:
        req = s.CommitFileRequest.model_construct(
            file=s.file_to_m(file), chunks=[s.chunk_spec_to_m(c) for c in chunks]
        )
        body = req.model_dump_json().encode()
        got = s.CommitFileRequest.model_validate_json(body)
        specs = [s.chunk_spec_from_m(c) for c in got.chunks]
        s.file_from_m(got.file)
        assert len(specs) == CHUNKS

    return once


def _timed(fn: Any, n: int, rounds: int) -> float:
    per: list[float] = []
    for _ in range(rounds):
        t0 = time.process_time()
        for _ in range(n):
            fn()
        per.append((time.process_time() - t0) / n * 1e6)
    return statistics.median(per)


async def _calls(n: int, rounds: int) -> dict[str, float]:
    import httpx

    try:
        from skiff.metadata.server.app import create_app
        from skiff.metadata.wire.http_client import HttpMetadataClient
    except ImportError:
        from skiff.metadata.app import create_app  # type: ignore[no-redef]
        from skiff.metadata.http_client import HttpMetadataClient  # type: ignore[no-redef]
    from skiff.metadata.service import MetadataService

    svc = MetadataService.from_url("sqlite://", verify_objects=False)
    client = HttpMetadataClient("http://m", transport=httpx.ASGITransport(app=create_app(svc)))
    topic = await client.create_topic("t", 1, {})
    out: dict[str, float] = {}
    for name, call in (
        ("describe_topics call", lambda: client.describe_topics(["t"])),
        ("list_topics call", client.list_topics),
        ("partition_states call", lambda: client.partition_states([_key(topic.topic_id)])),
    ):
        per = []
        for _ in range(rounds):
            t0 = time.process_time()
            for _ in range(n):
                await call()
            per.append((time.process_time() - t0) / n * 1e6)
        out[name] = statistics.median(per)
    await client.close()
    svc.close()
    return out


def _key(topic_id: uuid.UUID) -> Any:
    from skiff.metadata.types import PartitionKey

    return PartitionKey(topic_id, 0)


def measure(n: int, rounds: int) -> dict[str, Any]:
    try:
        import skiff.metadata.wire  # noqa: F401

        kind, codec = "declared", _codec_new()
    except ImportError:
        kind, codec = "mirrors", _codec_old()
    results = {f"commit_file codec ({CHUNKS} chunks)": _timed(codec, n, rounds)}
    results.update(asyncio.run(_calls(n, rounds)))
    return {"kind": kind, "us": results}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per round (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; the median is reported")
    parser.add_argument("--compare", metavar="OLD_TREE", help="also run an older checkout, alternating")
    parser.add_argument("--json", action="store_true", help="one JSON line (used by --compare)")
    parser.add_argument("--pairs", type=int, default=3, help="with --compare: alternating runs of each")
    args = parser.parse_args()
    if not args.compare:
        got = measure(args.calls, args.rounds)
        if args.json:
            print(json.dumps(got))
        else:
            for k, v in got["us"].items():
                print(f"{got['kind']:9} {k:34} {v:9.1f} us")
        return 0
    runs: dict[str, list[dict[str, float]]] = {}
    for _ in range(args.pairs):
        for tree in (None, args.compare):
            env = dict(os.environ)
            if tree:
                env["PYTHONPATH"] = tree + os.pathsep + env.get("PYTHONPATH", "")
            argv = [
                sys.executable,
                __file__,
                "--json",
                "--calls",
                str(args.calls),
                "--rounds",
                str(args.rounds),
            ]
            got = json.loads(subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout)
            runs.setdefault(got["kind"], []).append(got["us"])
    new, old = runs["declared"], runs["mirrors"]
    print(f"{'':34} {'mirrors us':>11} {'declared us':>12} {'ratio':>6}")
    for k in new[0]:
        o = statistics.median(r[k] for r in old)
        d = statistics.median(r[k] for r in new)
        print(f"{k:34} {o:11.1f} {d:12.1f} {d / o:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
