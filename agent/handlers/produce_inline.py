"""Produce's synchronous path: a request handled without a task, coroutine or kio entity.

The common Produce request (topics in the topic cache, no transaction, room in the produce
buffer, no earlier Produce of the connection still waiting to append, no client quota, no
schema lookup) is checked and appended by `start_inline` in the connection's read step, so
it reaches the buffer in request order without a ticket; anything else returns None and the
connection runs the awaiting path (`agent.handlers.produce.begin`). The checks, the answers
and the response bytes are the awaiting path's (`produce._check_partitions`,
`produce._combine`, `agent.protocol.produce_response`).

Acks: the buffer hands each batch's outcome to a waiter (`agent.produce_buffer.BatchWaiter`)
that acts at once, in the buffer's resolution of the file: the request's `_InlineAck` for a
one-batch request, a `_BatchPart` per batch otherwise. When the last outcome is in, the
response is encoded and the connection's future for the request is resolved: one future
per request, none per batch (a keyed request carries a hundred batches).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from skiff.agent.context import AgentContext
from skiff.agent.handlers import Request
from skiff.agent.handlers.produce import Answer, Validated, _check_partitions, _combine, _schemas_now
from skiff.agent.metrics import observe_produce_ack
from skiff.agent.protocol.produce_response import encode_produce_answers
from skiff.metadata.types import BatchResult, Topic

log = logging.getLogger(__name__)

T = TypeVar("T")


def start_inline(
    ctx: AgentContext, request: Request, outcome: Callable[[bytearray | None], T], failed: T
) -> asyncio.Future[T] | None:
    """Handle a Produce request without a task when nothing in it needs to wait, or None
    (nothing done: the caller runs `begin` instead).

    The returned future gets `outcome(frame)` (the encoded response at the request's
    version, or None for acks=0) once every batch is committed (see the module doc).
    `failed` is the result if the response cannot be encoded.
    """
    started_s = time.perf_counter()  # the ack latency histogram's start (agent.metrics)
    tail = request.connection.produce_tail
    if (tail is not None and not tail.done()) or ctx.quotas.limited(request):  # quotas: the task path
        return None
    try:
        checked = _checked_now(ctx, request)
    except Exception:  # boundary: the awaiting path answers (and logs) whatever went wrong
        return None
    if checked is None:
        return None
    answers, validated = checked
    done: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    ack = _InlineAck(request, answers, done, outcome, failed, started_s)
    _append(ctx, ack, validated)
    if int(request.body.acks) == 0:
        done.set_result(outcome(None))  # the ack's finish then does nothing
        observe_produce_ack(0, time.perf_counter() - started_s)
    elif not ack.remaining:  # every partition refused: answered now
        ack.finish()
    return done


def _checked_now(
    ctx: AgentContext, request: Request
) -> tuple[dict[tuple[int, int], Answer], Validated] | None:
    """The request's refusals and validated batches from the caches alone, or None when
    something must be awaited (a topic load, a registry lookup, room in the buffer)."""
    topics: dict[str, Topic] = {}
    for t in request.body.topic_data:
        topic = ctx.topics.fresh(t.name)
        if topic is None:
            return None  # a load (or an unknown topic): the awaiting path
        topics[t.name] = topic
    answers, checked = _check_partitions(ctx, request, topics, None, ctx.clock.wall_ms())
    validated = _schemas_now(ctx, checked, answers)
    if validated is None:
        return None  # a registry lookup first: the awaiting path
    size = 0
    for v in validated:
        for b in v[3]:
            size += len(b.data)
    if validated and not ctx.parts.produce_buffer.has_room(size):
        return None
    return answers, validated


def _append(ctx: AgentContext, ack: _InlineAck, validated: Validated) -> None:
    """Append every validated partition's batches, each with its waiter (see the module doc)."""
    buffer = ctx.parts.produce_buffer
    count = 0
    for v in validated:
        count += len(v[3])
    ack.remaining = count
    if count == 1:  # the usual request: one batch, the ack is its waiter
        key, topic, partition, batches, append_time = validated[0]
        buffer.append_now(topic.topic_id, partition, batches, (ack,))
        ack.pending.append((key, ack.results, append_time))
        return
    for key, topic, partition, batches, append_time in validated:
        results: list[BatchResult | None] = [None] * len(batches)
        parts = [_BatchPart(ack, results, i) for i in range(len(batches))]
        buffer.append_now(topic.topic_id, partition, batches, parts)
        ack.pending.append((key, results, append_time))


class _InlineAck:
    """The answer of a `start_inline` request, encoded once its last batch is resolved.

    The buffer hands each batch's outcome to a waiter (agent.produce_buffer.BatchWaiter)
    that acts at once: this object itself for a one-batch request, else a `_BatchPart` per
    batch. No future, done callback or loop turn per batch; `finish` runs when the last
    outcome is in (the buffer resolves a file's batches in arrival order, chunk by chunk)."""

    __slots__ = (
        "request",
        "answers",
        "pending",
        "answered",
        "outcome",
        "failed",
        "started_s",
        "remaining",
        "results",
    )

    def __init__(
        self,
        request: Request,
        answers: dict[tuple[int, int], Answer],
        done: asyncio.Future[Any],
        outcome: Callable[[bytearray | None], Any],
        failed: Any,
        started_s: float,
    ) -> None:
        self.started_s = started_s
        self.request = request
        self.answers = answers
        # (partition key, its batches' outcomes, its LogAppendTime or None) per appended partition
        self.pending: list[tuple[tuple[int, int], list[BatchResult | None], int | None]] = []
        self.answered = done
        self.outcome = outcome
        self.failed = failed
        self.remaining = 0  # outcomes still to come
        self.results: list[BatchResult | None] = [None]  # a one-batch request's outcome

    # BatchWaiter, for a one-batch request
    def done(self) -> bool:
        return self.remaining == 0

    def set_result(self, result: BatchResult, /) -> None:
        self.results[0] = result
        self.remaining = 0
        self.finish()

    def finish(self) -> None:
        """Encode the response and hand it to the connection. Never raises: it runs inside
        the buffer's resolution of a whole file."""
        if self.answered.done():  # acks=0, or cancelled: the connection is gone
            return
        request = self.request
        body = request.body
        answers = self.answers
        try:
            topic_data = body.topic_data
            for key, results, append_time in self.pending:
                index = topic_data[key[0]].partition_data[key[1]].index
                answers[key] = _combine(index, results, append_time)  # type: ignore[arg-type]
            if len(topic_data) == 1 and len(topic_data[0].partition_data) == 1:  # the usual request
                topics = [(topic_data[0].name, [answers[(0, 0)]])]
            else:
                topics = [
                    (t.name, [answers[(ti, pi)] for pi in range(len(t.partition_data))])
                    for ti, t in enumerate(topic_data)
                ]
            frame = encode_produce_answers(request.correlation_id, request.api_version, topics)
        except Exception:  # boundary: an unencodable answer is logged and answered as an error
            log.exception(
                "cannot encode the Produce v%d response (correlation id %d)",
                request.api_version,
                request.correlation_id,
            )
            self.answered.set_result(self.failed)
            return
        self.answered.set_result(self.outcome(frame))
        observe_produce_ack(int(body.acks), time.perf_counter() - self.started_s)


class _BatchPart:
    """One batch's waiter in a request of several: its outcome into its partition's list;
    the last outcome of the request finishes it."""

    __slots__ = ("ack", "results", "index")

    def __init__(self, ack: _InlineAck, results: list[BatchResult | None], index: int) -> None:
        self.ack = ack
        self.results = results
        self.index = index

    def done(self) -> bool:
        return self.results[self.index] is not None

    def set_result(self, result: BatchResult, /) -> None:
        self.results[self.index] = result
        ack = self.ack
        ack.remaining -= 1
        if not ack.remaining:
            ack.finish()
