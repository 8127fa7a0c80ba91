"""Offsets in transactions, raw kio requests answered by the agent's handlers called
directly (tests/support/handler_call.py: no socket), exact codes:
OffsetFetch `require_stable` (KIP-447) answers UNSTABLE_OFFSET_COMMIT for partitions an
open transaction holds staged offsets for, in v7 and per group in v8+, and the committed
offset once it completes; TxnOffsetCommit v3's generation / member / instance checks
against a live group (Kafka's handleTxnCommitOffsets); the per-transaction bounds on
partitions and staged offsets (POLICY_VIOLATION)."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest
from kio.schema.add_partitions_to_txn.v3.request import AddPartitionsToTxnRequest as AddV3
from kio.schema.add_partitions_to_txn.v3.request import AddPartitionsToTxnTopic as TopicV3
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v5.request import InitProducerIdRequest
from kio.schema.join_group.v5.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.offset_commit.v7.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_fetch.v6.request import OffsetFetchRequest as FetchV6
from kio.schema.offset_fetch.v6.request import OffsetFetchRequestTopic as FetchTopicV6
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest as FetchV7
from kio.schema.offset_fetch.v7.request import OffsetFetchRequestTopic as FetchTopicV7
from kio.schema.offset_fetch.v8.request import OffsetFetchRequest as FetchV8
from kio.schema.offset_fetch.v8.request import OffsetFetchRequestGroup
from kio.schema.offset_fetch.v8.request import OffsetFetchRequestTopics as FetchTopicV8
from kio.schema.sync_group.v3.request import SyncGroupRequest, SyncGroupRequestAssignment
from kio.schema.txn_offset_commit.v2.request import TxnOffsetCommitRequest as TxnCommitV2
from kio.schema.txn_offset_commit.v2.request import (
    TxnOffsetCommitRequestPartition as TxnPartitionV2,
)
from kio.schema.txn_offset_commit.v2.request import TxnOffsetCommitRequestTopic as TxnTopicV2
from kio.schema.txn_offset_commit.v3.request import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from kio.schema.types import GroupId, ProducerId, TopicName, TransactionalId
from kio.static.primitive import i16, i32, i32Timedelta, i64

from tests.component.fake_metadata import AgentHarness, RunningAgent
from tests.support.handler_call import call_handler

MINUTE = i32Timedelta.parse(datetime.timedelta(minutes=1))
TEN_S = i32Timedelta.parse(datetime.timedelta(seconds=10))
UNSTABLE = ErrorCode.unstable_offset_commit


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentHarness]:
    h = AgentHarness(
        tmp_path_factory.mktemp("txn-offsets"),
        group_initial_rebalance_delay_ms=0,
        transaction_max_partitions=3,
        transaction_max_offsets=3,
    ).start()
    yield h
    h.stop()


def _ask(h: AgentHarness, body: Any, agent: RunningAgent | None = None) -> Any:
    """The agent's (default: the first's) response to `body`, from its handler: no socket."""
    return h.call(call_handler((agent or h.agent).ctx, body))


def _topic(h: AgentHarness, partitions: int = 2) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    h.call(h.metadata.create_topic(name, partitions, {}))
    return name


def _init(h: AgentHarness, txn_id: str) -> tuple[int, int]:
    resp = _ask(
        h,
        InitProducerIdRequest(transactional_id=TransactionalId(txn_id), transaction_timeout=MINUTE),
    )
    assert resp.error_code == ErrorCode.none
    return int(resp.producer_id), int(resp.producer_epoch)


def _add_offsets(
    h: AgentHarness, txn_id: str, pid: int, epoch: int, group: str, expect: ErrorCode = ErrorCode.none
) -> None:
    resp = _ask(
        h,
        AddOffsetsToTxnRequest(
            transactional_id=TransactionalId(txn_id),
            producer_id=ProducerId(pid),
            producer_epoch=i16(epoch),
            group_id=GroupId(group),
        ),
    )
    assert resp.error_code == expect


def _txn_commit(
    h: AgentHarness,
    txn_id: str,
    pid: int,
    epoch: int,
    group: str,
    offsets: dict[tuple[str, int], int],
    *,
    generation: int = -1,
    member: str = "",
    instance: str | None = None,
    agent: RunningAgent | None = None,
) -> dict[tuple[str, int], ErrorCode]:
    topics: dict[str, list[TxnOffsetCommitRequestPartition]] = {}
    for (t, p), off in offsets.items():
        topics.setdefault(t, []).append(
            TxnOffsetCommitRequestPartition(
                partition_index=i32(p),
                committed_offset=i64(off),
                committed_leader_epoch=i32(-1),
                committed_metadata="",
            )
        )
    resp = _ask(
        h,
        TxnOffsetCommitRequest(
            transactional_id=TransactionalId(txn_id),
            group_id=GroupId(group),
            producer_id=ProducerId(pid),
            producer_epoch=i16(epoch),
            generation_id=i32(generation),
            member_id=member,
            group_instance_id=instance,
            topics=tuple(
                TxnOffsetCommitRequestTopic(name=TopicName(t), partitions=tuple(ps))
                for t, ps in topics.items()
            ),
        ),
        agent,
    )
    return {(t.name, int(p.partition_index)): p.error_code for t in resp.topics for p in t.partitions}


def _end(h: AgentHarness, txn_id: str, pid: int, epoch: int, commit: bool) -> None:
    resp = _ask(
        h,
        EndTxnRequest(
            transactional_id=TransactionalId(txn_id),
            producer_id=ProducerId(pid),
            producer_epoch=i16(epoch),
            committed=commit,
        ),
    )
    assert resp.error_code == ErrorCode.none


def _commit(h: AgentHarness, group: str, topic: str, partition: int, offset: int) -> None:
    resp = _ask(
        h,
        OffsetCommitRequest(
            group_id=GroupId(group),
            generation_id_or_member_epoch=i32(-1),
            member_id="",
            group_instance_id=None,
            topics=(
                OffsetCommitRequestTopic(
                    name=TopicName(topic),
                    partitions=(
                        OffsetCommitRequestPartition(
                            partition_index=i32(partition),
                            committed_offset=i64(offset),
                            committed_leader_epoch=i32(-1),
                            committed_metadata="",
                        ),
                    ),
                ),
            ),
        ),
    )
    assert resp.topics[0].partitions[0].error_code == ErrorCode.none


Fetched = dict[tuple[str, int], tuple[int, ErrorCode]]


def _fetch_v7(
    h: AgentHarness, group: str, topic: str | None, stable: bool, agent: RunningAgent | None = None
) -> tuple[ErrorCode, Fetched]:
    topics = (
        None if topic is None else (FetchTopicV7(name=TopicName(topic), partition_indexes=(i32(0), i32(1))),)
    )
    resp = _ask(h, FetchV7(group_id=GroupId(group), topics=topics, require_stable=stable), agent)
    got = {
        (t.name, int(p.partition_index)): (int(p.committed_offset), p.error_code)
        for t in resp.topics
        for p in t.partitions
    }
    return resp.error_code, got


def _fetch_v8(h: AgentHarness, group: str, topic: str, stable: bool) -> tuple[ErrorCode, Fetched]:
    resp = _ask(
        h,
        FetchV8(
            groups=(
                OffsetFetchRequestGroup(
                    group_id=GroupId(group),
                    topics=(FetchTopicV8(name=TopicName(topic), partition_indexes=(i32(0), i32(1))),),
                ),
            ),
            require_stable=stable,
        ),
    )
    (g,) = resp.groups
    got = {
        (t.name, int(p.partition_index)): (int(p.committed_offset), p.error_code)
        for t in g.topics
        for p in t.partitions
    }
    return g.error_code, got


def test_require_stable_sees_pending_offsets_until_the_transaction_ends(harness: AgentHarness) -> None:
    h = harness
    topic, group, txn = _topic(h), f"g-{uuid.uuid4().hex[:8]}", f"tx-{uuid.uuid4().hex[:8]}"
    _commit(h, group, topic, 0, 2)  # a committed offset the pending one will replace
    pid, epoch = _init(h, txn)
    _add_offsets(h, txn, pid, epoch, group)
    assert _txn_commit(h, txn, pid, epoch, group, {(topic, 0): 5}) == {(topic, 0): ErrorCode.none}

    none = ErrorCode.none
    # read_committed consumers (require_stable): partition 0 is unstable, 1 is not
    assert _fetch_v7(h, group, topic, True) == (none, {(topic, 0): (-1, UNSTABLE), (topic, 1): (-1, none)})
    assert _fetch_v8(h, group, topic, True) == (none, {(topic, 0): (-1, UNSTABLE), (topic, 1): (-1, none)})
    # every partition of the group (topics null): those with a committed offset, as Kafka
    assert _fetch_v7(h, group, None, True) == (none, {(topic, 0): (-1, UNSTABLE)})
    # read_uncommitted (no require_stable) and older versions: the committed offset
    assert _fetch_v7(h, group, topic, False) == (none, {(topic, 0): (2, none), (topic, 1): (-1, none)})
    assert _fetch_v8(h, group, topic, False) == (none, {(topic, 0): (2, none), (topic, 1): (-1, none)})
    resp = _ask(
        h,
        FetchV6(
            group_id=GroupId(group),
            topics=(FetchTopicV6(name=TopicName(topic), partition_indexes=(i32(0),)),),
        ),
    )
    assert [(int(p.committed_offset), p.error_code) for p in resp.topics[0].partitions] == [(2, none)]

    _end(h, txn, pid, epoch, True)  # offsets only: completes without markers
    assert _fetch_v7(h, group, topic, True) == (none, {(topic, 0): (5, none), (topic, 1): (-1, none)})

    # an aborted transaction's offsets are unstable while open, then vanish
    _add_offsets(h, txn, pid, epoch, group)
    assert _txn_commit(h, txn, pid, epoch, group, {(topic, 1): 9}) == {(topic, 1): none}
    assert _fetch_v8(h, group, topic, True) == (none, {(topic, 0): (5, none), (topic, 1): (-1, UNSTABLE)})
    _end(h, txn, pid, epoch, False)
    assert _fetch_v8(h, group, topic, True) == (none, {(topic, 0): (5, none), (topic, 1): (-1, none)})


def _join(h: AgentHarness, group: str, instance: str) -> tuple[str, int]:
    """A static member joins and syncs: (member id, generation), the group Stable."""
    joined = _ask(
        h,
        JoinGroupRequest(
            group_id=GroupId(group),
            session_timeout=TEN_S,
            rebalance_timeout=TEN_S,
            member_id="",
            group_instance_id=instance,
            protocol_type="consumer",
            protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),),
        ),
    )
    assert joined.error_code == ErrorCode.none, joined
    member, generation = joined.member_id, int(joined.generation_id)
    synced = _ask(
        h,
        SyncGroupRequest(
            group_id=GroupId(group),
            generation_id=i32(generation),
            member_id=member,
            group_instance_id=instance,
            assignments=(SyncGroupRequestAssignment(member_id=member, assignment=b""),),
        ),
    )
    assert synced.error_code == ErrorCode.none
    return member, generation


def test_txn_offset_commit_checks_the_consumer_against_its_group(harness: AgentHarness) -> None:
    h = harness
    topic, group, txn = _topic(h), f"g-{uuid.uuid4().hex[:8]}", f"tx-{uuid.uuid4().hex[:8]}"
    member, generation = _join(h, group, "instance-1")
    pid, epoch = _init(h, txn)
    _add_offsets(h, txn, pid, epoch, group)
    key = (topic, 0)

    def commit(**kw: object) -> ErrorCode:
        return _txn_commit(h, txn, pid, epoch, group, {key: 1}, **kw)[key]  # type: ignore[arg-type]

    assert (
        commit(generation=generation + 1, member=member, instance="instance-1")
        == ErrorCode.illegal_generation
    )
    assert commit(generation=generation, member="someone-else") == ErrorCode.unknown_member_id
    assert commit(generation=generation, member="someone-else", instance="instance-1") == (
        ErrorCode.fenced_instance_id
    )
    # nothing was staged by the refused requests
    assert _fetch_v7(h, group, topic, True)[1][key] == (-1, ErrorCode.none)
    assert commit(generation=generation, member=member, instance="instance-1") == ErrorCode.none
    # a producer that does not know the group's generation (v3 with -1, or v2) is not checked
    assert commit() == ErrorCode.none
    resp = _ask(
        h,
        TxnCommitV2(
            transactional_id=TransactionalId(txn),
            group_id=GroupId(group),
            producer_id=ProducerId(pid),
            producer_epoch=i16(epoch),
            topics=(
                TxnTopicV2(
                    name=TopicName(topic),
                    partitions=(
                        TxnPartitionV2(
                            partition_index=i32(0),
                            committed_offset=i64(3),
                            committed_leader_epoch=i32(-1),
                            committed_metadata="",
                        ),
                    ),
                ),
            ),
        ),
    )
    assert resp.topics[0].partitions[0].error_code == ErrorCode.none
    # a group this agent has never seen is Kafka's new Empty group, generation 0
    other = f"g-{uuid.uuid4().hex[:8]}"
    _add_offsets(h, txn, pid, epoch, other)
    assert _txn_commit(h, txn, pid, epoch, other, {key: 1}, generation=1)[key] == ErrorCode.illegal_generation
    assert _txn_commit(h, txn, pid, epoch, other, {key: 1}, generation=0, member="m")[key] == (
        ErrorCode.unknown_member_id
    )
    _end(h, txn, pid, epoch, True)
    assert _fetch_v7(h, group, topic, True)[1][key] == (3, ErrorCode.none)


def _add_partitions(
    h: AgentHarness, txn: str, pid: int, epoch: int, topic: str, parts: list[int]
) -> set[int]:
    resp = _ask(
        h,
        AddV3(
            v3_and_below_transactional_id=TransactionalId(txn),
            v3_and_below_producer_id=ProducerId(pid),
            v3_and_below_producer_epoch=i16(epoch),
            v3_and_below_topics=(TopicV3(name=TopicName(topic), partitions=tuple(i32(p) for p in parts)),),
        ),
    )
    return {
        p.partition_error_code for t in resp.results_by_topic_v3_and_below for p in t.results_by_partition
    }


def test_a_transaction_holds_a_bounded_number_of_partitions_and_offsets(harness: AgentHarness) -> None:
    h = harness  # transaction_max_partitions=3, transaction_max_offsets=3
    topic, group, txn = _topic(h, 5), f"g-{uuid.uuid4().hex[:8]}", f"tx-{uuid.uuid4().hex[:8]}"
    pid, epoch = _init(h, txn)
    assert _add_partitions(h, txn, pid, epoch, topic, [0, 1]) == {ErrorCode.none}
    assert _add_partitions(h, txn, pid, epoch, topic, [1]) == {ErrorCode.none}  # already held
    _add_offsets(h, txn, pid, epoch, group)  # 3 in all: a group counts as its offsets partition
    assert _add_partitions(h, txn, pid, epoch, topic, [1, 2]) == {ErrorCode.policy_violation}
    _add_offsets(h, txn, pid, epoch, f"{group}-2", expect=ErrorCode.policy_violation)
    described = _ask(h, DescribeTransactionsRequest(transactional_ids=(TransactionalId(txn),)))
    held = {int(p) for t in described.transaction_states[0].topics for p in t.partitions}
    assert held == {0, 1}  # the refused requests changed nothing

    ok = ErrorCode.none
    assert set(_txn_commit(h, txn, pid, epoch, group, {(topic, 0): 1, (topic, 1): 1}).values()) == {ok}
    # staging a partition again does not count twice
    assert set(_txn_commit(h, txn, pid, epoch, group, {(topic, 1): 2, (topic, 2): 2}).values()) == {ok}
    refused = _txn_commit(h, txn, pid, epoch, group, {(topic, 0): 7, (topic, 3): 7})
    assert refused == {(topic, 0): ErrorCode.policy_violation, (topic, 3): ErrorCode.policy_violation}
    _end(h, txn, pid, epoch, False)
    # the bounds are per transaction: the next one starts from nothing
    assert _add_partitions(h, txn, pid, epoch, topic, [2, 3, 4]) == {ErrorCode.none}
    _end(h, txn, pid, epoch, False)


def test_txn_offset_commit_goes_to_the_group_coordinator(tmp_path_factory: pytest.TempPathFactory) -> None:
    h = AgentHarness(tmp_path_factory.mktemp("txn-offsets-two")).start(agents=2)
    try:
        h.refresh_all()
        topic, txn = _topic(h), f"tx-{uuid.uuid4().hex[:8]}"
        first, second = h.agents
        group = next(
            g
            for g in (f"g-{uuid.uuid4().hex[:8]}" for _ in range(64))
            if first.ctx.agents.coordinator_for_group(g).node_id == second.node_id
        )
        pid, epoch = _init(h, txn)
        _add_offsets(h, txn, pid, epoch, group)
        key = (topic, 0)
        # the producer asked the wrong agent: it looks the group coordinator up again
        assert _txn_commit(h, txn, pid, epoch, group, {key: 4}) == {key: ErrorCode.not_coordinator}
        assert _fetch_v7(h, group, topic, True, agent=second)[1][key] == (-1, ErrorCode.none)
        assert _txn_commit(h, txn, pid, epoch, group, {key: 4}, agent=second) == {key: ErrorCode.none}
        assert _fetch_v7(h, group, topic, True, agent=second)[1][key] == (-1, UNSTABLE)
    finally:
        h.stop()
