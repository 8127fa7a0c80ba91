"""The agents' registry: heartbeats and the list of live agents.

An agent registers with its first heartbeat and stays live while it heartbeats within
`ttl_ms` of the service's clock (the clock of the service, not the agent's, so agents'
clocks may disagree); `live_agents` lists the live ones by agent id and deletes the
expired rows. Each heartbeat carries the agent's readiness (`AgentInfo.ready`, its own
probe of the bucket and metadata: agent.health); live agents are listed ready or not, and
routing (agent.agent_registry) gives partitions and coordinators to the ready ones only.

The cluster's bucket: `skiff metadata --bucket` configures it; without it, the first agent
that claims a bucket (`claim_bucket`, at its start and then with every
`BUCKET_CLAIM_EVERY_HEARTBEATS`th heartbeat: agent.runtime) teaches it, and an agent that
names another bucket is refused (INVALID_CONFIG), so one cluster never writes to two
buckets and readers such as Spark are told where the data is (`GET /v1/cluster`). A
learned bucket lives in this process: after a restart the agents' next claims teach it
again (each replica of a replicated service learns it from the claims it receives).
URLs are compared without a trailing slash.
"""

from __future__ import annotations

import json
import threading

from skiff.metadata.db import read_tx, write_tx
from skiff.metadata.errors import INVALID_CONFIG, MetadataError
from skiff.metadata.groups import leases as group_leases
from skiff.metadata.rows import Db
from skiff.metadata.schema import agents
from skiff.metadata.types import AgentInfo
from sqlalchemy import delete, select

DEFAULT_AGENT_TTL_MS = 10_000


class Membership:
    def __init__(self, db: Db, ttl_ms: int = DEFAULT_AGENT_TTL_MS, bucket_url: str | None = None) -> None:
        self._db = db
        self.ttl_ms = ttl_ms
        self.configured_bucket_url = bucket_url  # `skiff metadata --bucket`, if given
        self._learned_bucket_url: str | None = None
        self._bucket_lock = threading.Lock()

    @property
    def bucket_url(self) -> str | None:
        """The cluster's bucket: configured, else learned from the agents, else None."""
        return self.configured_bucket_url or self._learned_bucket_url

    def claim_bucket(self, bucket_url: str) -> str:
        """An agent says where it writes; the cluster's bucket is answered (learned now if
        none is known). INVALID_CONFIG when the agent writes elsewhere."""
        with self._bucket_lock:
            known = self.bucket_url
            if known is None:
                self._learned_bucket_url = known = bucket_url
        if known.rstrip("/") != bucket_url.rstrip("/"):
            how = "configured with --bucket" if self.configured_bucket_url else "learned from its first agent"
            raise MetadataError(
                INVALID_CONFIG,
                f"this cluster's bucket is {known} ({how}); an agent writing to {bucket_url} is refused:"
                " give it the cluster's --bucket-url",
            )
        return known

    def heartbeat_agent(self, agent: AgentInfo) -> None:
        """Register or refresh an agent; last_heartbeat_ms is the service's clock. A live
        agent id heartbeated from another address is refused (metadata.groups.leases)."""
        with write_tx(self._db.engine) as conn:
            group_leases.heartbeat_agent(conn, agent, self._db.clock(), self.ttl_ms)

    def deregister_agent(self, agent: AgentInfo) -> None:
        """An agent shutting down cleanly leaves at once (rather than after its TTL), so a
        restart at another address is not refused as a duplicate. Only the registration
        from that same address is removed: a newer holder of the id is left alone."""
        a = agents.c
        with write_tx(self._db.engine) as conn:
            conn.execute(
                delete(agents).where(a.agent_id == agent.agent_id, a.host == agent.host, a.port == agent.port)
            )

    def live_agents(self) -> list[AgentInfo]:
        """Agents that heartbeated within the TTL (ready or not), by agent id; expired ones are
        deleted."""
        cutoff = self._db.clock() - self.ttl_ms
        with read_tx(self._db.engine) as conn:
            rows = conn.execute(select(agents).order_by(agents.c.agent_id)).all()
        live = [
            AgentInfo(
                r.agent_id,
                r.host,
                r.port,
                r.zone,
                r.last_heartbeat_ms,
                _listeners(r.listeners),
                bool(r.ready),
                r.version or "",
            )
            for r in rows
            if r.last_heartbeat_ms >= cutoff
        ]
        if len(live) != len(rows):
            with write_tx(self._db.engine) as conn:
                conn.execute(delete(agents).where(agents.c.last_heartbeat_ms < cutoff))
        return live


def _listeners(raw: str | None) -> tuple[tuple[str, str, int], ...]:
    """The stored JSON listener list; NULL (a row from before listeners) or an unreadable
    value is no list: the row's host/port is then the agent's one address."""
    if not raw:
        return ()
    try:
        return tuple((str(n), str(h), int(p)) for n, h, p in json.loads(raw))
    except (ValueError, TypeError):
        return ()
