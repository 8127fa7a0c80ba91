"""PUT 8 MiB against moto / SeaweedFS: botocore defaults vs Skiff's S3Options.

    python bench/objectstore_put.py moto|seaweedfs      (N=15 puts, ROUNDS=2 by default)

Client CPU (time.process_time) and wall time per PUT, sequential and 4 in flight; results
in docs/object-store.md.
"""

import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import boto3
from botocore.config import Config
from skiff.fileformat.objectstore import open_store
from skiff.fileformat.objectstore.s3 import S3Options

from tests.support.s3servers import ACCESS_KEY, REGION, SECRET_KEY, start_moto, start_seaweed

SIZE = 8 << 20
N = int(os.environ.get("N", "15"))
data = os.urandom(SIZE)


def thread_cpu():
    return time.thread_time()


def run_store(store, label, conc=1):
    store.put("warm", b"x")
    # sequential: CPU measured in this thread only (the server is another process)
    t0 = time.perf_counter()
    c0 = time.process_time()
    for i in range(N):
        store.put(f"k{i}", data)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    res = {
        "label": label,
        "seq_MiBps": round(N * 8 / wall, 1),
        "cpu_ms_per_put": round(cpu / N * 1000, 1),
        "wall_ms_per_put": round(wall / N * 1000, 1),
    }
    t0 = time.perf_counter()
    c0 = time.process_time()
    with ThreadPoolExecutor(4) as ex:
        list(ex.map(lambda i: store.put(f"c{i}", data), range(2 * N)))
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    res["conc4_MiBps"] = round(2 * N * 8 / wall, 1)
    res["conc4_cpu_ms_per_put"] = round(cpu / (2 * N) * 1000, 1)
    return res


class Raw:
    """A bare boto3 client with the given Config, same interface subset."""

    def __init__(self, endpoint, bucket, config):
        self.c = boto3.session.Session().client(
            "s3",
            endpoint_url=endpoint,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            config=config,
        )
        self.b = bucket

    def put(self, k, d):
        self.c.put_object(Bucket=self.b, Key=k, Body=d)


def main(kind):
    wd = Path(tempfile.mkdtemp(prefix=f"osbench-{kind}-"))
    server = (start_moto if kind == "moto" else start_seaweed)(wd)
    try:
        bucket = server.new_bucket()
        ep = server.endpoint_url
        os.environ.update(server.env)
        results = []
        for _round in range(int(os.environ.get("ROUNDS", "2"))):
            results.append(run_store(Raw(ep, bucket, Config()), "botocore defaults"))
            results.append(
                run_store(
                    Raw(ep, bucket, Config(s3={"payload_signing_enabled": False})),
                    "defaults + payload_signing off",
                )
            )
            results.append(
                run_store(
                    open_store(f"s3://{bucket}", s3_options=S3Options(put_crc32c=False)),
                    "skiff S3Options, put_crc32c=False",
                )
            )
            results.append(run_store(open_store(f"s3://{bucket}"), "skiff S3Options (default)"))
        for r in results:
            print(json.dumps(r))
    finally:
        server.process.stop(grace=3)


if __name__ == "__main__":
    main(sys.argv[1])
