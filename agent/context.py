"""What every request handler gets: the agent's configuration and its shared services.

One `AgentContext` per agent process, built once at start-up and passed explicitly to
handlers (`handler(ctx, request)`); nothing in the agent reads globals. It holds:

- `config`: the frozen `AgentConfig`;
- `metadata`: a `metadata.api_types.MetadataClient` (in-process or HTTP);
- `topics`: the `TopicCache` in front of metadata's topic lookups;
- `agents`: the `LiveAgents` routing view (brokers, leaders, coordinators);
- `clock`: wall time in ms and a monotonic clock, injectable for tests;
- `services`: a typed-by-convention slot map for the data-path components other modules
  own (the produce buffer, the fetch cache, the group coordinator), so adding one does
  not change this module's signature. Use `ctx.service(name, Type)` to read one checked.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from agent.agent_registry import LiveAgents
from agent.config import AgentConfig
from agent.topic_cache import TopicCache
from metadata.api_types import MetadataClient
from metadata.types import AgentInfo

T = TypeVar("T")


class Clock(Protocol):
    def wall_ms(self) -> int: ...
    def monotonic(self) -> float: ...


class SystemClock:
    def wall_ms(self) -> int:
        return int(time.time() * 1000)

    def monotonic(self) -> float:
        return time.monotonic()


@dataclass
class AgentContext:
    config: AgentConfig
    metadata: MetadataClient
    topics: TopicCache
    agents: LiveAgents
    clock: Clock = field(default_factory=SystemClock)
    services: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def create(
        cls,
        config: AgentConfig,
        metadata: MetadataClient,
        clock: Clock | None = None,
        bound_port: int | None = None,
    ) -> AgentContext:
        """The usual wiring: a topic cache and a live-agent view that starts with this agent."""
        clock = clock or SystemClock()
        me = AgentInfo(
            agent_id=config.agent_id,
            host=config.resolved_advertised_host(),
            port=config.resolved_advertised_port(bound_port),
            zone=config.zone,
        )
        return cls(
            config=config,
            metadata=metadata,
            topics=TopicCache(metadata, ttl_ms=config.topic_cache_ttl_ms, monotonic=clock.monotonic),
            agents=LiveAgents(me, ttl_ms=config.agent_ttl_ms, wall_ms=clock.wall_ms),
            clock=clock,
        )

    def service(self, name: str, kind: type[T]) -> T:
        """A registered data-path service, type-checked; KeyError if it was never registered."""
        value = self.services[name]
        if not isinstance(value, kind):
            raise TypeError(f"service {name!r} is a {type(value).__name__}, not a {kind.__name__}")
        return value
