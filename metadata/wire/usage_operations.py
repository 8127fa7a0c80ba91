"""The object-store usage reports (metadata.usage), declared as every metadata operation is
(`metadata.wire.codec.operation`; `metadata.wire.operations` joins them into the callers'
roles).

One operation per reporting role, each allowed to the token roles that speak for it: an agent
reports its own requests (bound to its agent id, as its heartbeat) and those of an in-process
compaction role; `skiff compact` reports as `compactor`; Spark executors
as `reader`. So a reader token cannot make the agents' bill look larger or smaller. The
reporting side (what was asked since the last report) is metadata.wire.usage_report.
"""

from __future__ import annotations

from typing import Protocol

from skiff.metadata.types import StoreUsage
from skiff.metadata.wire.bounds import Id
from skiff.metadata.wire.codec import Args, operation
from skiff.metadata.wire.roles import AGENT, COMPACTOR, READER


def _agent_id(a: Args) -> list[str]:
    return [a["agent_id"]]


class AgentUsage(Protocol):
    @operation("/v1/usage/agent", AGENT, acting_as=_agent_id)
    async def report_agent_usage(self, agent_id: Id, usage: StoreUsage) -> None:
        """The agent's object-store requests and bytes since its last report."""
        ...


class CompactorUsage(Protocol):
    @operation("/v1/usage/compactor", COMPACTOR, AGENT)
    async def report_compactor_usage(self, usage: StoreUsage) -> None:
        """A compactor's (or an agent's compaction role's) requests since its last report."""
        ...


class ReaderUsage(Protocol):
    @operation("/v1/usage/reader", READER)
    async def report_reader_usage(self, usage: StoreUsage) -> None:
        """A reader's (a Spark executor task) requests since its last report."""
        ...
