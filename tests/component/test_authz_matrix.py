"""The generated authorization matrix: every API key the agent advertises, at its lowest and
highest version, sent by five kinds of caller, answered as Kafka answers.

The cells, per (API, version):

  pre    before authentication on a SASL listener: only ApiVersions and the SASL exchange
         are served; anything else closes the connection;
  anon   `User:ANONYMOUS` on PLAINTEXT, holding no ACL;
  other  a SASL user holding every operation on *other* resources (topics, groups and
         transactional ids named `elsewhere-*`), none on the cluster;
  exact  a SASL user holding exactly the ACLs Kafka requires for this request (the `grants`
         of the row, written here from Kafka's `KafkaApis` and its "Operations and Resources
         on Protocols" table, independently of the handlers' declarations);
  super  a super user.

A refused cell must carry the row's error code (or, for a filtering API, leave the resource
out) and must change nothing in the metadata database (every table but the agents' own
heartbeats and leases is compared before and after). An allowed cell must carry no
authorization error anywhere in the response (other errors, e.g. UNKNOWN_MEMBER_ID for a
made-up member, are expected and fine). The agent's registry audits every check its
handlers make: a handler may only check what its `access` declaration names, and the
declaration must name at least what this table grants.

`ROWS` must hold a row for every advertised API key: a new handler fails
`test_every_advertised_api_has_a_row` until its row is written here.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import sqlite3
import struct
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.static.primitive import Records, f64, i8, i16, i32, i32Timedelta, i64, i64Timedelta
from skiff.agent.config import AgentConfig
from skiff.agent.handlers import HandlerSpec, default_registry
from skiff.agent.handlers._access import Refusal
from skiff.agent.protocol import convert
from skiff.agent.runtime import RunningAgent, start_agent
from skiff.fileformat.objectstore.memory import AsyncMemoryStore
from skiff.fileformat.record_build import build_batch
from skiff.metadata.security.acl_types import (
    CLUSTER_NAME,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from skiff.metadata.security.scram_types import make_credential
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService

from tests.component.test_listener_security import sasl_login
from tests.support.kafka_wire import KafkaWire

Op = AclOperation
RT = ResourceType
E = ErrorCode
PASSWORD = "matrix-secret"
SUPER = "root"
OTHER = "other"
CELLS = ("pre", "anon", "other", "exact", "super")
AUTH_ERRORS = frozenset(
    {
        E.topic_authorization_failed,
        E.group_authorization_failed,
        E.cluster_authorization_failed,
        E.transactional_id_authorization_failed,
        E.delegation_token_authorization_failed,
    }
)
# Rows the agent itself changes on its own schedule, whatever a client sends.
VOLATILE_TABLES = frozenset({"agents", "group_leases", "maintenance_runs", "alembic_version"})
TIMEOUT_30S = i32Timedelta.parse(datetime.timedelta(seconds=30))


# --- the rows ----------------------------------------------------------------------------------


@dataclass
class Names:
    """The resources one cell works on (fresh per API, version and cell)."""

    topic: str
    group: str
    txn: str
    user: str
    state: dict[str, Any] = field(default_factory=dict)


Grant = tuple[ResourceType, str, AclOperation]  # name: "topic" | "group" | "txn" | "cluster"
Build = Callable[[int, Names], Any]


@dataclass(frozen=True)
class Row:
    api_key: int
    build: Build  # the request at a version
    grants: tuple[Grant, ...]  # what Kafka requires, for the `exact` cell
    refused: ErrorCode | None  # the refusal's error code; None: a filtering API
    visible: Callable[[Any, Names], bool] | None = None  # filtering APIs: is the resource there?
    setup: tuple[str, ...] = ()  # "topic", "offsets" (a group with a committed offset), "txn", "user", "acl"
    other_allowed: bool = False  # Kafka lets the `other` principal through (authorizeByResourceType)
    min_version: int | None = None  # narrower than the handler's range (a variant's own range)
    pre_auth: bool = False
    variant: str = ""


def _tree_codes(value: Any) -> set[ErrorCode]:
    """Every error code anywhere in a kio entity."""
    found: set[ErrorCode] = set()
    if isinstance(value, ErrorCode):
        found.add(value)
    elif is_dataclass(value):
        for f in fields(value):
            found |= _tree_codes(getattr(value, f.name))
    elif isinstance(value, tuple):
        for v in value:
            found |= _tree_codes(v)
    return found


def _at(api_key: int, version: int, newest: Any) -> Any:
    """`newest` (an entity of the newest version) as the request class of `version`."""
    return convert(newest, load_request_schema(api_key, version))


def _req(api_key: int, version: int, **kwargs: Any) -> Any:
    """The request class of `version` built from keyword fields (nested ones already built)."""
    return load_request_schema(api_key, version)(**kwargs)


def _nested(api_key: int, version: int, cls_name: str, **kwargs: Any) -> Any:
    module = __import__(load_request_schema(api_key, version).__module__, fromlist=[cls_name])
    return getattr(module, cls_name)(**kwargs)


def _batch() -> Records:
    return Records.parse(build_batch([(0, 0, b"k", b"v", ())], base_timestamp=1_700_000_000_000))


def produce(v: int, n: Names) -> Any:
    part = _nested(0, v, "PartitionProduceData", index=i32(0), records=_batch())
    topic = _nested(0, v, "TopicProduceData", name=n.topic, partition_data=(part,))
    return _req(0, v, transactional_id=None, acks=i16(1), timeout=TIMEOUT_30S, topic_data=(topic,))


def fetch(v: int, n: Names) -> Any:
    part = _nested(
        1, v, "FetchPartition", partition=i32(0), fetch_offset=i64(0), partition_max_bytes=i32(65536)
    )
    topic = _nested(1, v, "FetchTopic", topic=n.topic, partitions=(part,))
    kw: dict[str, Any] = {
        "max_wait": i32Timedelta.parse(datetime.timedelta(0)),
        "min_bytes": i32(0),
        "topics": (topic,),
    }
    kw["forgotten_topics_data"] = ()
    if v < 7:
        del kw["forgotten_topics_data"]
    return _req(1, v, replica_id=i32(-1), **kw) if v < 12 else _req(1, v, **kw)


def list_offsets(v: int, n: Names) -> Any:
    part = _nested(2, v, "ListOffsetsPartition", partition_index=i32(0), timestamp=i64(-1))
    topic = _nested(2, v, "ListOffsetsTopic", name=n.topic, partitions=(part,))
    kw: dict[str, Any] = {"replica_id": i32(-1), "topics": (topic,)}
    if v >= 2:
        kw["isolation_level"] = i8(0)
    if v >= 10:
        kw["timeout"] = TIMEOUT_30S
    return _req(2, v, **kw)


def metadata_named(v: int, n: Names) -> Any:
    t = _nested(3, v, "MetadataRequestTopic", name=n.topic, **({"topic_id": None} if v >= 10 else {}))
    kw: dict[str, Any] = {"topics": (t,)}
    if v >= 4:
        kw["allow_auto_topic_creation"] = False
    if v >= 8:
        kw["include_topic_authorized_operations"] = True
    if 8 <= v <= 10:
        kw["include_cluster_authorized_operations"] = True
    return _req(3, v, **kw)


def metadata_all(v: int, n: Names) -> Any:
    kw: dict[str, Any] = {"topics": None}
    if v >= 4:
        kw["allow_auto_topic_creation"] = False
    if v >= 8:
        kw["include_topic_authorized_operations"] = False
    if 8 <= v <= 10:
        kw["include_cluster_authorized_operations"] = False
    return _req(3, v, **kw)


def metadata_auto_create(v: int, n: Names) -> Any:
    t = _nested(3, v, "MetadataRequestTopic", name=n.topic, **({"topic_id": None} if v >= 10 else {}))
    kw: dict[str, Any] = {"topics": (t,), "allow_auto_topic_creation": True}
    if v >= 8:
        kw["include_topic_authorized_operations"] = False
    if 8 <= v <= 10:
        kw["include_cluster_authorized_operations"] = False
    return _req(3, v, **kw)


def offset_commit(v: int, n: Names) -> Any:
    part = _nested(
        8,
        v,
        "OffsetCommitRequestPartition",
        partition_index=i32(0),
        committed_offset=i64(1),
        committed_metadata="",
    )
    topic = _nested(8, v, "OffsetCommitRequestTopic", name=n.topic, partitions=(part,))
    kw: dict[str, Any] = {
        "group_id": n.group,
        "generation_id_or_member_epoch": i32(-1),
        "member_id": "",
        "topics": (topic,),
    }
    if 2 <= v <= 4:
        kw["retention_time"] = i64Timedelta.parse(datetime.timedelta(milliseconds=-1))
    return _req(8, v, **kw)


def offset_fetch(v: int, n: Names) -> Any:
    if v >= 8:
        t = _nested(9, v, "OffsetFetchRequestTopics", name=n.topic, partition_indexes=(i32(0),))
        g = _nested(9, v, "OffsetFetchRequestGroup", group_id=n.group, topics=(t,))
        return _req(9, v, groups=(g,))
    t = _nested(9, v, "OffsetFetchRequestTopic", name=n.topic, partition_indexes=(i32(0),))
    return _req(9, v, group_id=n.group, topics=(t,))


def find_group_coordinator(v: int, n: Names) -> Any:
    if v >= 4:
        return _req(10, v, key_type=i8(0), coordinator_keys=(n.group,))
    return _req(10, v, key=n.group, **({"key_type": i8(0)} if v >= 1 else {}))


def find_txn_coordinator(v: int, n: Names) -> Any:
    if v >= 4:
        return _req(10, v, key_type=i8(1), coordinator_keys=(n.txn,))
    return _req(10, v, key=n.txn, key_type=i8(1))


def join_group(v: int, n: Names) -> Any:
    proto = _nested(11, 9, "JoinGroupRequestProtocol", name="range", metadata=b"")
    newest = _nested(
        11,
        9,
        "JoinGroupRequest",
        group_id=n.group,
        session_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        member_id="",
        protocol_type="consumer",
        protocols=(proto,),
    )
    return _at(11, v, newest)


def heartbeat(v: int, n: Names) -> Any:
    return _req(12, v, group_id=n.group, generation_id=i32(1), member_id="nobody")


def leave_group(v: int, n: Names) -> Any:
    if v >= 3:
        return _req(13, v, group_id=n.group, members=(_nested(13, v, "MemberIdentity", member_id="nobody"),))
    return _req(13, v, group_id=n.group, member_id="nobody")


def sync_group(v: int, n: Names) -> Any:
    return _req(14, v, group_id=n.group, generation_id=i32(1), member_id="nobody", assignments=())


def describe_groups(v: int, n: Names) -> Any:
    return _req(15, v, groups=(n.group,), **({"include_authorized_operations": True} if v >= 3 else {}))


def list_groups(v: int, n: Names) -> Any:
    return _req(16, v)


def consumer_group_heartbeat(v: int, n: Names) -> Any:
    return _req(
        68,
        v,
        group_id=n.group,
        member_id="authz-member",
        member_epoch=i32(0),
        rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        subscribed_topic_names=(n.topic,),
        topic_partitions=(),
    )


def consumer_group_describe(v: int, n: Names) -> Any:
    return _req(69, v, group_ids=(n.group,), include_authorized_operations=True)


def api_versions(v: int, n: Names) -> Any:
    kw = {"client_software_name": "matrix", "client_software_version": "1"} if v >= 3 else {}
    return _req(18, v, **kw)


def sasl_handshake(v: int, n: Names) -> Any:
    return _req(17, v, mechanism="PLAIN")


def sasl_authenticate(v: int, n: Names) -> Any:
    return _req(36, v, auth_bytes=f"\0{OTHER}\0wrong".encode())


def create_topics(v: int, n: Names) -> Any:
    t = _nested(
        19,
        v,
        "CreatableTopic",
        name=n.topic,
        num_partitions=i32(1),
        replication_factor=i16(-1),
        assignments=(),
        configs=(),
    )
    return _req(19, v, topics=(t,), timeout=TIMEOUT_30S, **({"validate_only": False} if v >= 1 else {}))


def delete_topics(v: int, n: Names) -> Any:
    if v >= 6:
        return _req(
            20,
            v,
            topics=(_nested(20, v, "DeleteTopicState", name=n.topic, topic_id=None),),
            timeout=TIMEOUT_30S,
        )
    return _req(20, v, topic_names=(n.topic,), timeout=TIMEOUT_30S)


def delete_records(v: int, n: Names) -> Any:
    part = _nested(21, v, "DeleteRecordsPartition", partition_index=i32(0), offset=i64(0))
    topic = _nested(21, v, "DeleteRecordsTopic", name=n.topic, partitions=(part,))
    return _req(21, v, topics=(topic,), timeout=TIMEOUT_30S)


def init_producer_id_txn(v: int, n: Names) -> Any:
    newest = _nested(22, 5, "InitProducerIdRequest", transactional_id=n.txn, transaction_timeout=TIMEOUT_30S)
    return _at(22, v, newest)


def init_producer_id_idempotent(v: int, n: Names) -> Any:
    newest = _nested(22, 5, "InitProducerIdRequest", transactional_id=None, transaction_timeout=TIMEOUT_30S)
    return _at(22, v, newest)


def add_partitions_to_txn(v: int, n: Names) -> Any:
    if v >= 4:
        topic = _nested(24, v, "AddPartitionsToTxnTopic", name=n.topic, partitions=(i32(0),))
        txn = _nested(
            24,
            v,
            "AddPartitionsToTxnTransaction",
            transactional_id=n.txn,
            producer_id=i64(7),
            producer_epoch=i16(0),
            topics=(topic,),
        )
        return _req(24, v, transactions=(txn,))
    topic = _nested(24, v, "AddPartitionsToTxnTopic", name=n.topic, partitions=(i32(0),))
    return _req(
        24,
        v,
        v3_and_below_transactional_id=n.txn,
        v3_and_below_producer_id=i64(7),
        v3_and_below_producer_epoch=i16(0),
        v3_and_below_topics=(topic,),
    )


def add_offsets_to_txn(v: int, n: Names) -> Any:
    return _req(25, v, transactional_id=n.txn, producer_id=i64(7), producer_epoch=i16(0), group_id=n.group)


def end_txn(v: int, n: Names) -> Any:
    return _req(26, v, transactional_id=n.txn, producer_id=i64(7), producer_epoch=i16(0), committed=False)


def txn_offset_commit(v: int, n: Names) -> Any:
    part = _nested(
        28,
        v,
        "TxnOffsetCommitRequestPartition",
        partition_index=i32(0),
        committed_offset=i64(1),
        committed_metadata="",
    )
    topic = _nested(28, v, "TxnOffsetCommitRequestTopic", name=n.topic, partitions=(part,))
    return _req(
        28,
        v,
        transactional_id=n.txn,
        group_id=n.group,
        producer_id=i64(7),
        producer_epoch=i16(0),
        topics=(topic,),
    )


def describe_acls(v: int, n: Names) -> Any:
    return _req(
        29, v, resource_type_filter=i8(1), resource_name_filter=None, pattern_type_filter=i8(1),
        principal_filter=None, host_filter=None, operation=i8(1), permission_type=i8(1),
    )  # fmt: skip


def create_acls(v: int, n: Names) -> Any:
    c = _nested(
        30, v, "AclCreation", resource_type=i8(int(RT.TOPIC)), resource_name=n.topic, resource_pattern_type=i8(3),
        principal="User:mallory", host="*", operation=i8(int(Op.ALL)), permission_type=i8(3),
    )  # fmt: skip
    return _req(30, v, creations=(c,))


def delete_acls(v: int, n: Names) -> Any:
    f = _nested(
        31, v, "DeleteAclsFilter", resource_type_filter=i8(int(RT.TOPIC)), resource_name_filter=n.topic,
        pattern_type_filter=i8(3), principal_filter="User:victim", host_filter=None, operation=i8(1), permission_type=i8(1),
    )  # fmt: skip
    return _req(31, v, filters=(f,))


def describe_configs(v: int, n: Names) -> Any:
    r = _nested(
        32, v, "DescribeConfigsResource", resource_type=i8(2), resource_name=n.topic, configuration_keys=None
    )
    return _req(32, v, resources=(r,), **({"include_synonyms": False} if v >= 1 else {}))


def alter_configs(v: int, n: Names) -> Any:
    c = _nested(33, v, "AlterableConfig", name="retention.ms", value="123456")
    r = _nested(33, v, "AlterConfigsResource", resource_type=i8(2), resource_name=n.topic, configs=(c,))
    return _req(33, v, resources=(r,), validate_only=False)


def incremental_alter_configs(v: int, n: Names) -> Any:
    c = _nested(44, v, "AlterableConfig", name="retention.ms", config_operation=i8(0), value="123456")
    r = _nested(44, v, "AlterConfigsResource", resource_type=i8(2), resource_name=n.topic, configs=(c,))
    return _req(44, v, resources=(r,), validate_only=False)


def create_partitions(v: int, n: Names) -> Any:
    t = _nested(37, v, "CreatePartitionsTopic", name=n.topic, count=i32(2), assignments=None)
    return _req(37, v, topics=(t,), timeout=TIMEOUT_30S, validate_only=False)


def delete_groups(v: int, n: Names) -> Any:
    return _req(42, v, groups_names=(n.group,))


def describe_client_quotas(v: int, n: Names) -> Any:
    c = _nested(48, v, "ComponentData", entity_type="user", match_type=i8(2), match=None)
    return _req(48, v, components=(c,), strict=False)


def alter_client_quotas(v: int, n: Names) -> Any:
    e = _nested(49, v, "EntityData", entity_type="user", entity_name="mallory")
    o = _nested(49, v, "OpData", key="producer_byte_rate", value=f64(1024.0), remove=False)
    return _req(49, v, entries=(_nested(49, v, "EntryData", entity=(e,), ops=(o,)),), validate_only=False)


def offset_delete(v: int, n: Names) -> Any:
    t = _nested(
        47,
        v,
        "OffsetDeleteRequestTopic",
        name=n.topic,
        partitions=(_nested(47, v, "OffsetDeleteRequestPartition", partition_index=i32(0)),),
    )
    return _req(47, v, group_id=n.group, topics=(t,))


def describe_scram(v: int, n: Names) -> Any:
    return _req(50, v, users=None)


def alter_scram(v: int, n: Names) -> Any:
    cred = make_credential(n.user, "SCRAM-SHA-512", "pwned", iterations=4096)
    up = _nested(
        51, v, "ScramCredentialUpsertion", name=n.user, mechanism=i8(2), iterations=i32(4096), salt=cred.salt,
        salted_password=b"\x01" * 64,
    )  # fmt: skip
    return _req(51, v, deletions=(), upsertions=(up,))


def describe_cluster(v: int, n: Names) -> Any:
    return _req(
        60,
        v,
        include_cluster_authorized_operations=True,
        **({"include_fenced_brokers": False} if v >= 2 else {}),
    )


def describe_transactions(v: int, n: Names) -> Any:
    return _req(65, v, transactional_ids=(n.txn,))


def list_transactions(v: int, n: Names) -> Any:
    return _req(66, v)


def describe_log_dirs(v: int, n: Names) -> Any:
    t = _nested(35, v, "DescribableLogDirTopic", topic=n.topic, partitions=(i32(0),))
    return _req(35, v, topics=(t,))


def elect_leaders(v: int, n: Names) -> Any:
    t = _nested(43, v, "TopicPartitions", topic=n.topic, partitions=(i32(0),))
    return _req(43, v, topic_partitions=(t,), **({"election_type": i8(0)} if v >= 1 else {}))


def alter_partition_reassignments(v: int, n: Names) -> Any:
    part = _nested(45, v, "ReassignablePartition", partition_index=i32(0), replicas=None)
    t = _nested(45, v, "ReassignableTopic", name=n.topic, partitions=(part,))
    return _req(45, v, topics=(t,))


def list_partition_reassignments(v: int, n: Names) -> Any:
    t = _nested(46, v, "ListPartitionReassignmentsTopics", name=n.topic, partition_indexes=(i32(0),))
    return _req(46, v, topics=(t,))


def describe_producers(v: int, n: Names) -> Any:
    t = _nested(61, v, "TopicRequest", name=n.topic, partition_indexes=(i32(0),))
    return _req(61, v, topics=(t,))


def describe_topic_partitions_named(v: int, n: Names) -> Any:
    return _req(75, v, topics=(_nested(75, v, "TopicRequest", name=n.topic),))


def describe_topic_partitions_all(v: int, n: Names) -> Any:
    return _req(75, v, topics=())


def _topic_listed(resp: Any, n: Names) -> bool:
    return any(t.name == n.topic for t in resp.topics)


def _group_listed(resp: Any, n: Names) -> bool:
    return any(g.group_id == n.group for g in resp.groups)


def _txn_listed(resp: Any, n: Names) -> bool:
    return any(t.transactional_id == n.txn for t in resp.transaction_states)


def _cluster_described(resp: Any, n: Names) -> bool:
    return bool(resp.cluster_authorized_operations & (1 << int(Op.DESCRIBE)))


CLUSTER = "cluster"
ROWS: tuple[Row, ...] = (
    Row(0, produce, ((RT.TOPIC, "topic", Op.WRITE),), E.topic_authorization_failed, setup=("topic",)),
    Row(1, fetch, ((RT.TOPIC, "topic", Op.READ),), E.topic_authorization_failed, setup=("topic",)),
    Row(2, list_offsets, ((RT.TOPIC, "topic", Op.DESCRIBE),), E.topic_authorization_failed, setup=("topic",)),
    Row(3, metadata_named, ((RT.TOPIC, "topic", Op.DESCRIBE),), E.topic_authorization_failed, setup=("topic",), variant="named"),
    Row(3, metadata_all, ((RT.TOPIC, "topic", Op.DESCRIBE),), None, _topic_listed, setup=("topic",), variant="all topics"),
    Row(3, metadata_auto_create, ((RT.TOPIC, "topic", Op.DESCRIBE), (RT.TOPIC, "topic", Op.CREATE)), E.topic_authorization_failed, variant="auto-create", min_version=4),
    Row(8, offset_commit, ((RT.GROUP, "group", Op.READ), (RT.TOPIC, "topic", Op.READ)), E.group_authorization_failed, setup=("topic", "offsets")),
    Row(9, offset_fetch, ((RT.GROUP, "group", Op.READ), (RT.TOPIC, "topic", Op.DESCRIBE)), E.group_authorization_failed, setup=("topic", "offsets")),
    Row(10, find_group_coordinator, ((RT.GROUP, "group", Op.DESCRIBE),), E.group_authorization_failed, variant="group"),
    Row(10, find_txn_coordinator, ((RT.TRANSACTIONAL_ID, "txn", Op.DESCRIBE),), E.transactional_id_authorization_failed, variant="transaction", min_version=1),
    Row(11, join_group, ((RT.GROUP, "group", Op.READ),), E.group_authorization_failed),
    Row(12, heartbeat, ((RT.GROUP, "group", Op.READ),), E.group_authorization_failed),
    Row(13, leave_group, ((RT.GROUP, "group", Op.READ),), E.group_authorization_failed),
    Row(14, sync_group, ((RT.GROUP, "group", Op.READ),), E.group_authorization_failed),
    Row(15, describe_groups, ((RT.GROUP, "group", Op.DESCRIBE),), E.group_authorization_failed, setup=("topic", "offsets")),
    Row(16, list_groups, ((RT.GROUP, "group", Op.DESCRIBE),), None, _group_listed, setup=("topic", "offsets")),
    Row(17, sasl_handshake, (), None, pre_auth=True),
    Row(18, api_versions, (), None, pre_auth=True),
    Row(19, create_topics, ((RT.TOPIC, "topic", Op.CREATE), (RT.TOPIC, "topic", Op.DESCRIBE_CONFIGS)), E.topic_authorization_failed),
    Row(20, delete_topics, ((RT.TOPIC, "topic", Op.DELETE),), E.topic_authorization_failed, setup=("topic",)),
    Row(21, delete_records, ((RT.TOPIC, "topic", Op.DELETE),), E.topic_authorization_failed, setup=("topic",)),
    Row(22, init_producer_id_txn, ((RT.TRANSACTIONAL_ID, "txn", Op.WRITE),), E.transactional_id_authorization_failed, variant="transactional"),
    Row(22, init_producer_id_idempotent, ((RT.CLUSTER, CLUSTER, Op.IDEMPOTENT_WRITE),), E.cluster_authorization_failed, variant="idempotent", other_allowed=True),
    Row(24, add_partitions_to_txn, ((RT.CLUSTER, CLUSTER, Op.CLUSTER_ACTION), (RT.TRANSACTIONAL_ID, "txn", Op.WRITE), (RT.TOPIC, "topic", Op.WRITE)), None, setup=("topic",)),
    Row(25, add_offsets_to_txn, ((RT.TRANSACTIONAL_ID, "txn", Op.WRITE), (RT.GROUP, "group", Op.READ)), E.transactional_id_authorization_failed),
    Row(26, end_txn, ((RT.TRANSACTIONAL_ID, "txn", Op.WRITE),), E.transactional_id_authorization_failed),
    Row(28, txn_offset_commit, ((RT.TRANSACTIONAL_ID, "txn", Op.WRITE), (RT.GROUP, "group", Op.READ), (RT.TOPIC, "topic", Op.READ)), E.transactional_id_authorization_failed, setup=("topic",)),
    Row(29, describe_acls, ((RT.CLUSTER, CLUSTER, Op.DESCRIBE),), E.cluster_authorization_failed),
    Row(30, create_acls, ((RT.CLUSTER, CLUSTER, Op.ALTER),), E.cluster_authorization_failed),
    Row(31, delete_acls, ((RT.CLUSTER, CLUSTER, Op.ALTER),), E.cluster_authorization_failed, setup=("acl",)),
    Row(32, describe_configs, ((RT.TOPIC, "topic", Op.DESCRIBE_CONFIGS),), E.topic_authorization_failed, setup=("topic",)),
    Row(33, alter_configs, ((RT.TOPIC, "topic", Op.ALTER_CONFIGS),), E.topic_authorization_failed, setup=("topic",)),
    Row(36, sasl_authenticate, (), None, pre_auth=True),
    Row(37, create_partitions, ((RT.TOPIC, "topic", Op.ALTER),), E.topic_authorization_failed, setup=("topic",)),
    Row(42, delete_groups, ((RT.GROUP, "group", Op.DELETE),), E.group_authorization_failed, setup=("topic", "offsets")),
    Row(44, incremental_alter_configs, ((RT.TOPIC, "topic", Op.ALTER_CONFIGS),), E.topic_authorization_failed, setup=("topic",)),
    Row(47, offset_delete, ((RT.GROUP, "group", Op.DELETE), (RT.TOPIC, "topic", Op.READ)), E.group_authorization_failed, setup=("topic", "offsets")),
    Row(48, describe_client_quotas, ((RT.CLUSTER, CLUSTER, Op.DESCRIBE_CONFIGS),), E.cluster_authorization_failed),
    Row(49, alter_client_quotas, ((RT.CLUSTER, CLUSTER, Op.ALTER_CONFIGS),), E.cluster_authorization_failed),
    Row(50, describe_scram, ((RT.CLUSTER, CLUSTER, Op.DESCRIBE),), E.cluster_authorization_failed, setup=("user",)),
    Row(51, alter_scram, ((RT.CLUSTER, CLUSTER, Op.ALTER),), E.cluster_authorization_failed, setup=("user",)),
    Row(60, describe_cluster, ((RT.CLUSTER, CLUSTER, Op.DESCRIBE),), None, _cluster_described),
    Row(35, describe_log_dirs, ((RT.CLUSTER, CLUSTER, Op.DESCRIBE),), E.cluster_authorization_failed, setup=("topic",), min_version=3),
    Row(43, elect_leaders, ((RT.CLUSTER, CLUSTER, Op.ALTER),), E.cluster_authorization_failed, setup=("topic",)),
    Row(45, alter_partition_reassignments, ((RT.CLUSTER, CLUSTER, Op.ALTER),), E.cluster_authorization_failed, setup=("topic",)),
    Row(46, list_partition_reassignments, ((RT.CLUSTER, CLUSTER, Op.DESCRIBE),), E.cluster_authorization_failed, setup=("topic",)),
    Row(61, describe_producers, ((RT.TOPIC, "topic", Op.READ),), E.topic_authorization_failed, setup=("topic",)),
    Row(65, describe_transactions, ((RT.TRANSACTIONAL_ID, "txn", Op.DESCRIBE),), E.transactional_id_authorization_failed),
    Row(66, list_transactions, ((RT.TRANSACTIONAL_ID, "txn", Op.DESCRIBE),), None, _txn_listed, setup=("txn",)),
    Row(75, describe_topic_partitions_named, ((RT.TOPIC, "topic", Op.DESCRIBE),), E.topic_authorization_failed, setup=("topic",), variant="named"),
    Row(75, describe_topic_partitions_all, ((RT.TOPIC, "topic", Op.DESCRIBE),), None, _topic_listed, setup=("topic",), variant="all topics"),
    Row(68, consumer_group_heartbeat, ((RT.GROUP, "group", Op.READ), (RT.TOPIC, "topic", Op.DESCRIBE)), E.group_authorization_failed, setup=("topic",)),
    Row(69, consumer_group_describe, ((RT.GROUP, "group", Op.DESCRIBE),), E.group_authorization_failed),
)  # fmt: skip

# DescribeLogDirs v1-v2 have no error code: a refusal there is an empty answer (from v3 on the
# row's code), so the matrix starts at v3.

# DescribeTransactions has no `txn` setup: an Empty transaction's start time is -1, which kio's
# response parser (used here) refuses to read as a timestamp; an unknown id is answered
# TRANSACTIONAL_ID_NOT_FOUND when allowed, and the refusal is the same either way.

# AddPartitionsToTxn answers a refused transactional id per partition before v4 and the whole
# request (CLUSTER_ACTION) from v4: its refusal code depends on the version.
REFUSAL_BY_VERSION: dict[int, Callable[[int], ErrorCode]] = {
    24: lambda v: E.cluster_authorization_failed if v >= 4 else E.transactional_id_authorization_failed,
}


# --- the running agent -------------------------------------------------------------------------


class Cluster:
    """One agent (PLAINTEXT + SASL_PLAINTEXT listeners, authorizer on) over SQLite."""

    def __init__(self, tmp: Path) -> None:
        self.db_path = tmp / "matrix.db"
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.service = MetadataService.from_url(f"sqlite:///{self.db_path}")
        metadata = LocalMetadataClient(self.service, owns_service=True)
        cfg = AgentConfig(
            agent_id="m1",
            host="127.0.0.1",
            port=0,
            listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            authorizer_enabled=True,
            super_users=f"User:{SUPER}",
            acl_refresh_interval_ms=600_000,
            group_initial_rebalance_delay_ms=0,
            flush_interval_ms=20,
        )
        self.agent: RunningAgent = self.call(
            start_agent(cfg, metadata, AsyncMemoryStore(f"mx-{uuid.uuid4().hex}"))
        )
        self.registry = self.agent.server.registry
        self.registry.audit = []
        for user in (SUPER, OTHER):
            self.add_user(user)
        self.grant(
            *(
                AclBinding(
                    rt,
                    "elsewhere-",
                    PatternType.PREFIXED,
                    f"User:{OTHER}",
                    "*",
                    Op.ALL,
                    AclPermissionType.ALLOW,
                )
                for rt in (RT.TOPIC, RT.GROUP, RT.TRANSACTIONAL_ID)
            )
        )

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def bootstrap(self, listener: str) -> str:
        names = [li.name for li in self.agent.config.resolved_listeners()]
        return f"127.0.0.1:{self.agent.servers[names.index(listener)].port}"

    def add_user(self, user: str) -> None:
        self.service.upsert_scram_credential(
            make_credential(user, "SCRAM-SHA-512", PASSWORD, iterations=4096)
        )

    def grant(self, *bindings: AclBinding) -> None:
        self.service.create_acls(list(bindings))
        self.call(self.agent.context.acls.refresh())

    def forget_topics(self) -> None:
        """Topics made straight in metadata: the agent's topic cache reloads (on its loop)."""

        async def go() -> None:
            self.agent.context.topics.invalidate()

        self.call(go())

    def snapshot(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of every table but the volatile ones, in a stable order."""
        with sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True) as db:
            tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            return {
                t: sorted(db.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr)  # noqa: S608 (names from sqlite_master)
                for t in tables
                if t not in VOLATILE_TABLES and not t.startswith("sqlite_")
            }

    def close(self) -> None:
        self.call(self.agent.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()  # else collected open, with a ResourceWarning


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("authz-matrix"))
    yield c
    c.close()


def _super_request(cluster: Cluster, body: Any) -> Any:
    with KafkaWire(cluster.bootstrap("SASL_PLAINTEXT")) as w:
        assert sasl_login(w, "PLAIN", SUPER, PASSWORD).error_code == E.none
        return w.request(body).parse()


def _setup(cluster: Cluster, row: Row, n: Names) -> None:
    """Create, as the super user or straight in metadata, what the row's request works on."""
    if "topic" in row.setup:
        cluster.service.create_topic(n.topic, 1, {})
        cluster.forget_topics()
    if "offsets" in row.setup:
        resp = _super_request(cluster, offset_commit(8, n))
        assert _tree_codes(resp) == {E.none}, resp
    if "txn" in row.setup:
        resp = _super_request(cluster, init_producer_id_txn(4, n))
        assert resp.error_code == E.none, resp
    if "user" in row.setup:
        cluster.add_user(n.user)
    if "acl" in row.setup:
        cluster.grant(
            AclBinding(
                RT.TOPIC, n.topic, PatternType.LITERAL, "User:victim", "*", Op.READ, AclPermissionType.ALLOW
            )
        )


def _exact_bindings(row: Row, principal: str, n: Names) -> list[AclBinding]:
    names = {"topic": n.topic, "group": n.group, "txn": n.txn, CLUSTER: CLUSTER_NAME}
    return [
        AclBinding(rt, names[which], PatternType.LITERAL, principal, "*", op, AclPermissionType.ALLOW)
        for rt, which, op in row.grants
    ]


def _send(cluster: Cluster, cell: str, user: str, body: Any) -> Any | None:
    """The cell's answer, or None when the agent closed the connection instead."""
    listener = "PLAINTEXT" if cell == "anon" else "SASL_PLAINTEXT"
    with KafkaWire(cluster.bootstrap(listener)) as w:
        if cell not in ("pre", "anon"):
            assert sasl_login(w, "PLAIN", user, PASSWORD).error_code == E.none
        try:
            return w.request(body).parse()
        except (ConnectionError, struct.error, OSError):
            return None


def _versions(row: Row, spec: HandlerSpec) -> list[int]:
    low = max(spec.min_version, row.min_version or spec.min_version)
    return sorted({low, spec.max_version})


def _row_id(row: Row) -> str:
    return f"{row.api_key}-{default_registry().get(row.api_key).name}{'-' + row.variant if row.variant else ''}".replace(
        " ", "_"
    )  # type: ignore[union-attr]


def test_every_advertised_api_has_a_row() -> None:
    advertised = {s.api_key for s in default_registry().specs()}
    covered = {r.api_key for r in ROWS}
    assert advertised - covered == set(), (
        f"APIs without a row in the authorization matrix: {sorted(advertised - covered)}"
    )
    assert covered - advertised == set()


@pytest.mark.parametrize("row", ROWS, ids=_row_id)
def test_declaration_names_what_kafka_requires(row: Row) -> None:
    spec = default_registry().get(row.api_key)
    assert spec is not None
    assert spec.access.pre_auth == row.pre_auth
    declared = spec.access.pairs()
    for rt, _which, op in row.grants:
        assert (rt, op) in declared, (
            f"{spec.name}: Kafka checks {op.name} on {rt.name}; the declaration does not say so"
        )


@pytest.mark.parametrize("row", ROWS, ids=_row_id)
def test_matrix(cluster: Cluster, row: Row) -> None:
    spec = default_registry().get(row.api_key)
    assert spec is not None
    tag = uuid.uuid4().hex[:8]
    for version in _versions(row, spec):
        for cell in CELLS:
            n = Names(
                f"mt-{tag}-{version}-{cell}",
                f"mg-{tag}-{version}-{cell}",
                f"mx-{tag}-{version}-{cell}",
                f"mu-{tag}-{version}-{cell}",
            )
            _cell(cluster, row, spec, version, cell, n)


def _cell(cluster: Cluster, row: Row, spec: HandlerSpec, version: int, cell: str, n: Names) -> None:
    where = f"{spec.name}{' (' + row.variant + ')' if row.variant else ''} v{version} as {cell}"
    _setup(cluster, row, n)
    user = {"other": OTHER, "super": SUPER}.get(cell, f"exact-{n.user}")
    if cell == "exact":
        cluster.add_user(user)
        if row.grants:
            cluster.grant(*_exact_bindings(row, f"User:{user}", n))
    body = row.build(version, n)
    audit = cluster.registry.audit
    assert audit is not None
    audit.clear()
    before = cluster.snapshot()
    denied_before = sum(cluster.agent.context.acls.denied.values())
    resp = _send(cluster, cell, user, body)
    checked = {(rt, op) for key, rt, op in audit if key == row.api_key}
    _assert_checks_declared(spec, checked, where)

    if row.pre_auth:
        if cell == "pre":
            assert resp is not None, f"{where}: a pre-authentication API must be answered"
        if resp is not None:
            assert not (_tree_codes(resp) & AUTH_ERRORS), f"{where}: {resp}"
        return
    if cell == "pre":
        assert resp is None, f"{where}: answered before authentication: {resp}"
        assert cluster.snapshot() == before, f"{where}: metadata changed before authentication"
        return
    assert resp is not None, f"{where}: the connection was closed"
    codes = _tree_codes(resp)
    allowed = cell in ("exact", "super") or (cell == "other" and row.other_allowed)
    if allowed:
        assert not (codes & AUTH_ERRORS), f"{where}: refused: {resp}"
        if row.visible is not None:
            assert row.visible(resp, n), f"{where}: the resource is missing: {resp}"
        return
    if row.visible is not None:
        assert not row.visible(resp, n), f"{where}: shows a resource it may not see: {resp}"
        assert not (codes & AUTH_ERRORS), f"{where}: a filtering API answers no error: {resp}"
    else:
        code = REFUSAL_BY_VERSION[row.api_key](version) if row.api_key in REFUSAL_BY_VERSION else row.refused
        assert code in codes, f"{where}: not refused with {code!r}: {resp}"
        assert sum(cluster.agent.context.acls.denied.values()) > denied_before, (
            f"{where}: refusal not counted"
        )
    assert cluster.snapshot() == before, f"{where}: refused, but metadata changed"


def _assert_checks_declared(
    spec: HandlerSpec, checked: set[tuple[ResourceType, AclOperation | None]], where: str
) -> None:
    declared = spec.access.pairs()
    reported = {n.resource for c in spec.access.checks if c.refusal is Refusal.REPORT for n in c.needs}
    for rt, op in checked:
        if op is None:
            assert rt in reported, f"{where}: reports authorized operations on {rt.name} without declaring it"
        else:
            assert (rt, op) in declared, (
                f"{where}: checks {op.name} on {rt.name}, which its declaration does not name"
            )


# --- the takeover this matrix exists for (issue: SCRAM credentials without authorization) -------


ATTACKER = """
import json, sys
from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
    UserScramCredentialDeletion, UserScramCredentialUpsertion)
bootstrap, victim, other, what = sys.argv[1:5]
admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})
out = {}
if what == "alter":  # the only attack: kept as a switch for the next one
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(victim, info, b"pwned"),
        UserScramCredentialDeletion(other, ScramMechanism.SCRAM_SHA_512)])
    for user, fut in futures.items():
        try:
            fut.result(15)
            out[user] = 0
        except Exception as e:
            out[user] = e.args[0].code()
print(json.dumps(out))
"""


def _attack(cluster: Cluster, what: str) -> dict[str, Any]:
    """confluent-kafka in its own process (its binding has aborted processes on a refused
    DescribeUserScramCredentials), with no credentials: the issue's attacker."""
    done = subprocess.run(
        [sys.executable, "-c", ATTACKER, cluster.bootstrap("PLAINTEXT"), SUPER, OTHER, what],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_an_anonymous_client_cannot_replace_the_super_users_password(cluster: Cluster) -> None:
    """confluent-kafka with no credentials at all, as an attacker would: replacing the super
    user's SCRAM password, deleting another user's credential and listing every user are all
    refused and change nothing; the super user still logs in with its own password, never
    with the attacker's."""
    before = cluster.snapshot()
    assert _attack(cluster, "alter") == {
        SUPER: E.cluster_authorization_failed,
        OTHER: E.cluster_authorization_failed,
    }
    # Listing every user, raw (confluent-kafka's binding aborts the process on a refused
    # describe: "munmap_chunk(): invalid pointer", with the per-user errors Kafka also sends)
    listing = _send(cluster, "anon", "", describe_scram(0, Names("", "", "", "")))
    assert (
        listing is not None and listing.error_code == E.cluster_authorization_failed and listing.results == ()
    )
    assert cluster.snapshot() == before
    for password, expected in (("pwned", E.sasl_authentication_failed), (PASSWORD, E.none)):
        with KafkaWire(cluster.bootstrap("SASL_PLAINTEXT")) as w:
            assert sasl_login(w, "SCRAM-SHA-512", SUPER, password).error_code == expected
