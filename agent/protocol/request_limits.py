"""Upper bounds on the arrays of requests, checked before a request is decoded.

Kafka bounds a request only by its size (`socket.request.max.bytes`, here
`max_request_bytes`). Inside that, a few kilobytes per item are enough for a request that
names millions of topics or groups: an 8 MB Metadata request naming 4 million topics took
7.9 s to decode and answer, a DescribeGroups for 2 million ids 16.5 s, and the agent serves all
its connections on one event loop, so every client waited. The arrays below are therefore
bounded, at counts far above what a client sends (the Java and librdkafka clients send one
entry per topic, group or partition they use; listing every topic is `topics = null`, which
is not bounded by this table):

    API (key)                   array                                  limit
    Metadata (3)                topics                                 10,000
    DescribeGroups (15)         groups                                 10,000
    DescribeConfigs (32)        resources                              10,000
                                resources[].configuration_keys          1,000
    AlterConfigs (33)           resources; resources[].configs         10,000; 1,000
    IncrementalAlterConfigs (44) resources; resources[].configs        10,000; 1,000
    CreateTopics (19)           topics; topics[].configs               10,000; 1,000
    DeleteTopics (20)           topics (v6+), topic_names (v0-v5)      10,000
    CreatePartitions (37)       topics                                 10,000
    DeleteGroups (42)           groups_names                           10,000
    FindCoordinator (10)        coordinator_keys                       10,000
    ListGroups (16)             states_filter, types_filter               100
    CreateAcls (30), DeleteAcls (31)  creations, filters               10,000
    OffsetFetch (9)             groups (v8+)                            1,000
    ListOffsets (2), OffsetCommit (8), OffsetFetch (9), OffsetDelete (47)
                                topics                                 10,000
                                topics[].partitions (partition_indexes)  100,000

A request over a limit is refused as Kafka refuses one over `socket.request.max.bytes`: the
connection is closed and the reason logged (one WARNING line, no traceback). No per-item
error can be sent, since naming the items in a response means decoding them, which is the
work the limit exists to avoid. Produce and Fetch are bounded by bytes (`max_request_bytes`,
`max.message.bytes`) and not here.
"""

from __future__ import annotations

LIMITS: dict[tuple[int, str, str], int] = {}
"""(api key, kio entity class name, field name) -> the most items that array may hold."""

_NAMES = 10_000
_PARTITIONS = 100_000


def _add(api_key: int, entity: str, fields: tuple[str, ...], limit: int) -> None:
    for name in fields:
        LIMITS[(api_key, entity, name)] = limit


_add(3, "MetadataRequest", ("topics",), _NAMES)
_add(15, "DescribeGroupsRequest", ("groups",), _NAMES)
_add(32, "DescribeConfigsRequest", ("resources",), _NAMES)
_add(32, "DescribeConfigsResource", ("configuration_keys",), 1_000)
_add(33, "AlterConfigsRequest", ("resources",), _NAMES)
_add(33, "AlterConfigsResource", ("configs",), 1_000)
_add(44, "IncrementalAlterConfigsRequest", ("resources",), _NAMES)
_add(44, "AlterConfigsResource", ("configs",), 1_000)
_add(19, "CreateTopicsRequest", ("topics",), _NAMES)
_add(19, "CreatableTopic", ("configs", "assignments"), 1_000)
_add(20, "DeleteTopicsRequest", ("topics", "topic_names"), _NAMES)
_add(37, "CreatePartitionsRequest", ("topics",), _NAMES)
_add(42, "DeleteGroupsRequest", ("groups_names",), _NAMES)
_add(10, "FindCoordinatorRequest", ("coordinator_keys",), _NAMES)
_add(16, "ListGroupsRequest", ("states_filter", "types_filter"), 100)
_add(30, "CreateAclsRequest", ("creations",), _NAMES)
_add(31, "DeleteAclsRequest", ("filters",), _NAMES)
_add(9, "OffsetFetchRequest", ("groups",), 1_000)
_add(9, "OffsetFetchRequest", ("topics",), _NAMES)
_add(9, "OffsetFetchRequestGroup", ("topics",), _NAMES)
_add(9, "OffsetFetchRequestTopic", ("partition_indexes",), _PARTITIONS)
_add(9, "OffsetFetchRequestTopics", ("partition_indexes",), _PARTITIONS)
_add(2, "ListOffsetsRequest", ("topics",), _NAMES)
_add(2, "ListOffsetsTopic", ("partitions",), _PARTITIONS)
_add(8, "OffsetCommitRequest", ("topics",), _NAMES)
_add(8, "OffsetCommitRequestTopic", ("partitions",), _PARTITIONS)
_add(47, "OffsetDeleteRequest", ("topics",), _NAMES)
_add(47, "OffsetDeleteRequestTopic", ("partitions",), _PARTITIONS)


def array_limit(api_key: int, entity: str, field: str) -> int | None:
    """The bound on one array field of a request entity, or None (only bytes bound it)."""
    return LIMITS.get((api_key, entity, field))
