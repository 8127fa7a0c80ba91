"""Typed reads: how fast payloads decode (skiff.fileformat.values alone, one core, per
format), and Spark's rate on a typed query over the same records in Skiff's files against
Parquet that Spark wrote from the decoded DataFrame, in one run.

The record (every format): id long, name string (8-16 chars), age int, score double,
active boolean; 64 distinct template batches of `--batch-records` records, repeated.

1. decode: `build_decoder(...).decode(payloads)` over batches of 131,072 payloads (the
   executors' batch size); records/s of one thread (`avro`: writer = reader schema;
   `avro-evolve`: v1 writer (no score) read with the v2 reader, Avro's resolution; `json`:
   Arrow's JSON reader path; `json-rows`: the per-row json.loads path (a leading space forces
   it: a body starting with a space); `protobuf`). Best of `--repeat`.
2. spark: a `skiff metadata` process (SQLite) is the registry (schemas registered with
   confluent-kafka's SchemaRegistryClient) and `--records` records per format are committed
   as agents commit (8 MiB files). Queries: `count(*), sum(value.age), max(value.score)`
   over `spark.read.format("skiff").option("valueFormat", fmt)` (the one partition split
   into as many tasks as the session has cores, `minPartitions`), and over Parquet written
   by Spark from that DataFrame (`value` as a struct column). Interleaved rounds, the best
   time counts (bench/spark_read.py's method).

    python bench/typed_decode.py --records 1000000 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import fastavro  # noqa: E402
import pyarrow as pa  # noqa: E402
from skiff.fileformat.objectstore import open_store  # noqa: E402
from skiff.fileformat.record_build import build_batch  # noqa: E402
from skiff.fileformat.segment import ChunkInput, build_segment  # noqa: E402
from skiff.fileformat.values import AVRO, JSON, PROTOBUF, SchemaSource, build_decoder  # noqa: E402
from skiff.metadata.types import BatchSpec, ChunkSpec, FileSpec  # noqa: E402
from skiff.metadata.wire.http_client import HttpMetadataClient  # noqa: E402

from bench.spark_read import interleaved_best_times  # noqa: E402
from bench.support import start_metadata  # noqa: E402
from tests.unit.test_values_protobuf import message_class, source  # noqa: E402

T0 = 1_700_000_000_000
FIELDS = [
    {"name": "id", "type": "long"},
    {"name": "name", "type": "string"},
    {"name": "age", "type": "int"},
    {"name": "score", "type": "double", "default": 0.0},
    {"name": "active", "type": "boolean"},
]
AVRO_V2 = {"type": "record", "name": "User", "namespace": "b", "fields": FIELDS}
AVRO_V1 = {**AVRO_V2, "fields": [f for f in FIELDS if f["name"] != "score"]}
JSON_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "score": {"type": "number"},
        "active": {"type": "boolean"},
    },
}
PROTO = 'syntax = "proto3"; package b; message User { int64 id = 1; string name = 2; int32 age = 3; double score = 4; bool active = 5; }'
DECODE_BATCH = 131072


def records(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [
        {
            "id": seed * 1_000_000 + i,
            "name": "".join(rng.choice("abcdefghijklmnop") for _ in range(rng.randint(8, 16))),
            "age": rng.randint(18, 90),
            "score": rng.random() * 100,
            "active": rng.random() < 0.5,
        }
        for i in range(n)
    ]


def frame(schema_id: int, body: bytes, protobuf: bool = False) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + (b"\x00" if protobuf else b"") + body


def encoders(ids: dict[str, int]) -> dict[str, object]:
    v2, v1 = fastavro.parse_schema(AVRO_V2), fastavro.parse_schema(AVRO_V1)
    user = message_class(PROTO, "b.User")

    def avro(schema, schema_id):  # type: ignore[no-untyped-def]
        def enc(r: dict) -> bytes:
            out = io.BytesIO()
            fastavro.schemaless_writer(out, schema, r)
            return frame(schema_id, out.getvalue())

        return enc

    return {
        "avro": avro(v2, ids["avro"]),
        "avro-evolve": avro(v1, ids["avro-v1"]),
        "json": lambda r: frame(ids["json"], json.dumps(r, separators=(",", ":")).encode()),
        "json-rows": lambda r: frame(ids["json"], b" " + json.dumps(r, separators=(",", ":")).encode()),
        "protobuf": lambda r: frame(ids["protobuf"], user(**r).SerializeToString(), protobuf=True),
    }


def decode_rates(repeat: int) -> dict[str, float]:
    """Records/s of one thread decoding DECODE_BATCH payloads, per format."""
    ids = {"avro": 2, "avro-v1": 1, "json": 3, "protobuf": 4}
    avro2, avro1 = SchemaSource(AVRO, json.dumps(AVRO_V2)), SchemaSource(AVRO, json.dumps(AVRO_V1))
    js, pb = SchemaSource(JSON, json.dumps(JSON_SCHEMA)), source(PROTO)
    decoders = {
        "avro": build_decoder(AVRO, avro2, {2: avro2}),
        "avro-evolve": build_decoder(AVRO, avro2, {1: avro1, 2: avro2}),
        "json": build_decoder(JSON, js, {3: js}),
        "json-rows": build_decoder(JSON, js, {3: js}),
        "protobuf": build_decoder(PROTOBUF, pb, {4: pb}),
    }
    data = records(DECODE_BATCH, 1)
    out = {}
    for name, enc in encoders(ids).items():
        payloads = pa.array([enc(r) for r in data], pa.binary())  # type: ignore[operator]
        decoder = decoders[name]
        first = decoder.decode(payloads)
        assert first.error_count == 0, first.errors.drop_null()[0]
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            decoder.decode(payloads)
            times.append(time.perf_counter() - t)
        out[name] = DECODE_BATCH / min(times)
    return out


async def load(url: str, bucket: str, topic_name: str, payloads: list[list[bytes]], total: int) -> None:
    """Commit `total` records to `topic_name` (1 partition), cycling the template batches."""
    client = HttpMetadataClient(url)
    store = open_store(bucket, fsync=False)
    topic = await client.create_topic(topic_name, 1, {})
    per = len(payloads[0])
    templates = [build_batch([(i, T0 + i, None, v, []) for i, v in enumerate(vals)]) for vals in payloads]
    done = n = 0
    while done < total // per:
        chunk = [templates[(done + j) % len(templates)] for j in range(min(64, total // per - done))]
        data, (pl,) = build_segment([ChunkInput(topic.topic_id, 0, chunk, len(chunk), len(chunk) * per)])
        key = f"segments/{uuid.uuid4().hex}"
        store.put(key, data)
        specs = [
            ChunkSpec(
                pl.topic_id,
                pl.partition,
                tuple(
                    BatchSpec(pos, len(b), per, per, T0 + per - 1)
                    for pos, b in zip(pl.batch_positions, chunk, strict=True)
                ),
            )
        ]
        results = await client.commit_file(FileSpec(key, len(data)), specs)
        assert all(r.error_code == 0 for r in results), results
        done += len(chunk)
        n += 1
    await client.close()


def register(url: str) -> dict[str, int]:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    sr = SchemaRegistryClient({"url": url})
    try:
        pb_text = source(PROTO).text
        return {
            "avro": sr.register_schema("t-avro-value", Schema(json.dumps(AVRO_V2), "AVRO")),
            "json": sr.register_schema("t-json-value", Schema(json.dumps(JSON_SCHEMA), "JSON")),
            "protobuf": sr.register_schema("t-protobuf-value", Schema(pb_text, "PROTOBUF")),
        }
    finally:
        sr.close()


def spark_rates(
    url: str, work: Path, total: int, per: int, repeat: int, formats: list[str], master: str
) -> None:
    ids = register(url)
    ids["avro-v1"] = ids["avro"]
    encs = encoders(ids)
    bucket = f"file://{work}/bucket"
    for fmt in formats:
        batches = [[encs[fmt](r) for r in records(per, seed)] for seed in range(64)]  # type: ignore[operator]
        asyncio.run(load(url, bucket, f"t-{fmt}", batches, total))
    from skiff.spark import skiff_session

    spark = skiff_session(
        "typed-bench", master, {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
    )
    spark.sparkContext.setLogLevel("ERROR")
    agg = ["count(*) n", "sum(value.age) ages", "max(value.score) top"]
    frames = {}
    for fmt in formats:
        df = (
            spark.read.format("skiff")
            .options(
                **{"metadata.url": url, "bucket": bucket, "subscribe": f"t-{fmt}", "valueFormat": fmt},
                # one partition per topic: split it so that both local cores decode
                minPartitions=str(spark.sparkContext.defaultParallelism),
            )
            .load()
        )
        check = df.selectExpr(*agg).collect()[0]
        assert check.n == total // per * per, check
        path = str(work / f"parquet-{fmt}")
        df.select("offset", "value").write.parquet(path)
        parquet = spark.read.parquet(path)
        assert parquet.selectExpr(*agg).collect()[0] == check
        frames[f"skiff-{fmt}"] = df
        frames[f"parquet-{fmt}"] = parquet
    best = interleaved_best_times(
        {n: (lambda df=df: df.selectExpr(*agg).collect()) for n, df in frames.items()}, repeat
    )
    rows = total // per * per
    print(
        f"spark ({master}), {rows:,} records per format, load average {Path('/proc/loadavg').read_text().strip()}"
    )
    print(f"{'query':<18} {'seconds':>8} {'records/s':>12}")
    for name, s in best.items():
        print(f"{name:<18} {s:>8.2f} {rows / s:>12,.0f}")
    for fmt in formats:
        print(f"skiff-{fmt} / parquet rate: {best[f'parquet-{fmt}'] / best[f'skiff-{fmt}']:.3f}")
    spark.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--batch-records", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--formats", default="avro,json,protobuf")
    ap.add_argument("--no-spark", action="store_true")
    args = ap.parse_args()
    print(f"decode: one thread, batches of {DECODE_BATCH:,} payloads")
    for name, rate in decode_rates(args.repeat).items():
        print(f"  {name:<12} {rate:>12,.0f} records/s")
    if args.no_spark:
        return
    work = Path(tempfile.mkdtemp(prefix="skiff-typed-bench-"))
    try:
        with start_metadata(work) as url:
            spark_rates(
                url,
                work,
                args.records,
                args.batch_records,
                args.repeat,
                args.formats.split(","),
                args.master,
            )
    finally:
        os.system(f"rm -rf {work}")


if __name__ == "__main__":
    main()
