"""A ConsumerGroupHeartbeat (KIP-848) as the coordinator reads it (`MemberRequest`), its
answer (`HeartbeatResult`), and step 1 of a heartbeat (`validate`, Kafka's request checks:
INVALID_REQUEST with Kafka's wording, UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION)
before `agent.groups.consumer_protocol` applies it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode
from skiff.agent.groups.assignors import ASSIGNORS, Assignment
from skiff.agent.groups.consumer_model import STATIC_LEAVE_EPOCH, ConsumerGroup, InvalidRegex, compile_regex


@dataclass(frozen=True)
class MemberRequest:
    """A ConsumerGroupHeartbeat, as the coordinator reads it (None: unchanged since the last one)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""
    # Whether the member's principal may DESCRIBE a topic (the handler's authorizer): topics
    # matching its regex that it may not are never assigned to it. None: every topic.
    describable: Callable[[str], bool] | None = field(default=None, compare=False)

    @property
    def is_full(self) -> bool:
        """Kafka's full request (sent on joining and after errors): the answer carries the assignment."""
        has_subscription = self.subscribed_topic_names is not None or self.subscribed_topic_regex is not None
        return self.rebalance_timeout_ms != -1 and has_subscription and self.owned is not None


@dataclass(frozen=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None
    group: ConsumerGroup | None = field(default=None, compare=False)  # to store before answering


def _invalid(req: MemberRequest) -> str | None:
    """Why the request is malformed (INVALID_REQUEST), as Kafka words it; None if it is not."""
    joining = req.member_epoch == 0
    checks = (
        (not req.group_id, "GroupId can't be empty."),
        (req.instance_id is not None and not req.instance_id, "InstanceId can't be empty."),
        (req.member_epoch < STATIC_LEAVE_EPOCH, f"MemberEpoch {req.member_epoch} is invalid."),
        (not joining and not req.member_id, "MemberId can't be empty."),
        (
            req.member_epoch == STATIC_LEAVE_EPOCH and req.instance_id is None,
            "InstanceId can't be null when leaving with epoch -2.",
        ),
        (joining and req.rebalance_timeout_ms == -1, "RebalanceTimeoutMs must be provided in first request."),
        (
            joining and (req.owned is None or any(req.owned.values())),
            "TopicPartitions must be empty when (re-)joining.",
        ),
        (
            joining and req.subscribed_topic_names is None and req.subscribed_topic_regex is None,
            "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
        ),
    )
    return next((message for failed, message in checks if failed), None)


def validate(req: MemberRequest) -> HeartbeatResult | None:
    """Kafka's request checks; None when the request may proceed."""
    message = _invalid(req)
    if message is not None:
        return HeartbeatResult(ErrorCode.invalid_request, message, req.member_id or None)
    if req.server_assignor is not None and req.server_assignor not in ASSIGNORS:
        message = f"Unsupported assignor {req.server_assignor!r}."
        return HeartbeatResult(ErrorCode.unsupported_assignor, message, req.member_id or None)
    if req.subscribed_topic_regex:
        try:
            compile_regex(req.subscribed_topic_regex)
        except InvalidRegex as e:
            return HeartbeatResult(ErrorCode.invalid_regular_expression, str(e), req.member_id or None)
    return None
