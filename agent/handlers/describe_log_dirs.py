"""DescribeLogDirs (api key 35), v1-v4: the agent's one "log dir", the bucket.

v5 (Kafka 4.3) is not advertised: clients infer the broker's version from the newest APIs it
advertises (kafka-python reads DescribeLogDirs v5 as Kafka 4.3, then uses its own 4.3 table,
not the versions this agent answers), and nothing else here is 4.3.

An agent keeps no log on disk: every partition's data is in the bucket, so each agent
answers with one log directory named by the bucket URL (its path, without any query or
credentials), holding the partitions it leads in Metadata's answer (the replicas Metadata
names it for, by rendezvous hashing), so that sizes summed over the agents count each
partition once, as tools sum Kafka's brokers. A partition's size is the bytes of its
chunks in the bucket (metadata `partition_sizes`), its offset lag 0 (no replica is ever
behind: there is one copy), never a future replica. The bucket's total and usable bytes
are unknown (-1, v4+): an object store has no capacity to report. `topics` null asks for
every partition; named partitions that do not exist, or that another agent leads, are
left out, as Kafka leaves out partitions a broker does not host.

Authorization (Kafka's `handleDescribeLogDirsRequest`): DESCRIBE on the cluster, else
CLUSTER_AUTHORIZATION_FAILED with no results (v3+; v1-v2 have no error code and answer
no results). When metadata cannot be reached, the log dir carries its error
(KAFKA_STORAGE_ERROR is not claimed: the bucket is fine, metadata is not).
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from kio.schema.describe_log_dirs.v5.request import DescribeLogDirsRequest
from kio.schema.describe_log_dirs.v5.response import (
    DescribeLogDirsPartition,
    DescribeLogDirsResponse,
    DescribeLogDirsResult,
    DescribeLogDirsTopic,
)
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import i32, i64
from skiff.agent.context import AgentContext
from skiff.agent.handlers import (
    METADATA_ERRORS,
    NO_THROTTLE,
    HandlerSpec,
    Op,
    Request,
    authorized_on_cluster,
    error_of,
)
from skiff.agent.handlers._access import CLUSTER_DENIED, RT, on, request, requires
from skiff.agent.protocol import convert
from skiff.metadata.types import PartitionKey, Topic
from skiff.metadata.wire.bounds import MAX_PARTITIONS

API_KEY = 35
MIN_VERSION = 1
MAX_VERSION = 4

UNKNOWN_BYTES = i64(-1)  # Kafka's "volume size unknown"


def log_dir_name(bucket_url: str) -> str:
    """The bucket URL without credentials, query or fragment."""
    parts = urllib.parse.urlsplit(bucket_url)
    host = parts.hostname or ""
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))


def _response(code: ErrorCode, results: tuple[DescribeLogDirsResult, ...] = ()) -> DescribeLogDirsResponse:
    return DescribeLogDirsResponse(throttle_time=NO_THROTTLE, error_code=code, results=results)


async def _wanted(ctx: AgentContext, body: DescribeLogDirsRequest) -> list[tuple[Topic, list[int]]]:
    """(topic, partitions) this agent leads, of those asked (all when `topics` is null)."""
    me = ctx.agents.self_node_id
    asked: list[tuple[Topic, set[int] | None]]
    if body.topics is None:
        asked = [(t, None) for t in await ctx.topics.all_topics()]
    else:
        names = list(dict.fromkeys(t.topic for t in body.topics))
        found = await ctx.topics.get_by_name(names)
        parts: dict[str, set[int]] = {}
        for t in body.topics:
            parts.setdefault(t.topic, set()).update(int(p) for p in t.partitions)
        asked = [(found[n], parts[n]) for n in names if n in found]
    out: list[tuple[Topic, list[int]]] = []
    for topic, only in asked:
        leaders = ctx.agents.leaders_for_topic(topic.topic_id, topic.partition_count)
        mine = [p for p, leader in enumerate(leaders) if leader == me and (only is None or p in only)]
        if mine:
            out.append((topic, mine))
    return out


async def _sizes(ctx: AgentContext, keys: list[PartitionKey]) -> list[int]:
    sizes: list[int] = []
    for i in range(0, len(keys), MAX_PARTITIONS):
        sizes += await ctx.metadata.partition_sizes(keys[i : i + MAX_PARTITIONS])
    return sizes


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = convert(request.body, DescribeLogDirsRequest)
    if not authorized_on_cluster(ctx, request, Op.DESCRIBE):  # v1-v2: no error code to carry
        return _response(ErrorCode.cluster_authorization_failed)
    name = log_dir_name(ctx.config.bucket_url)
    try:
        wanted = await _wanted(ctx, body)
        keys = [PartitionKey(t.topic_id, p) for t, ps in wanted for p in ps]
        sizes = iter(await _sizes(ctx, keys))
    except METADATA_ERRORS as e:
        failed = DescribeLogDirsResult(error_code=error_of(e)[0], log_dir=name, topics=())
        return _response(ErrorCode.none, (failed,))
    topics = tuple(
        DescribeLogDirsTopic(
            name=TopicName(t.name),
            partitions=tuple(
                DescribeLogDirsPartition(
                    partition_index=i32(p),
                    partition_size=i64(next(sizes)),
                    offset_lag=i64(0),
                    is_future_key=False,
                )
                for p in ps
            ),
        )
        for t, ps in wanted
    )
    result = DescribeLogDirsResult(
        error_code=ErrorCode.none,
        log_dir=name,
        topics=topics,
        total_bytes=UNKNOWN_BYTES,
        usable_bytes=UNKNOWN_BYTES,
        is_cordoned=False,
    )
    return _response(ErrorCode.none, (result,))


ACCESS = requires(request(on(RT.CLUSTER, Op.DESCRIBE), CLUSTER_DENIED))

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
