"""Group coordinator leases and agent registration: the transactional rules, over a
SQLAlchemy connection inside the caller's write transaction (`MetadataService` opens it).

Why: agents pick a group's coordinator by rendezvous hashing over the agents they believe
alive, and those views differ for up to a heartbeat interval whenever an agent starts or
stops. The lease makes "who coordinates" a fact in metadata, so two agents never both
coordinate a group (the design of Kafka's coordinator epochs, on a table row).

Rules (`now_ms` is the metadata service's clock):

- acquire(group, agent, ttl): granted when the group has no lease, its lease lapsed
  (`expires_ms < now`), or the agent already holds it; the epoch is then bumped (a fresh
  grant, never reused: whatever the agent did under an older grant is fenced off) and the
  lease runs until `now + ttl`. Otherwise refused, with the current holder. One statement,
  `INSERT ... ON CONFLICT DO UPDATE ... WHERE`: PostgreSQL locks the row and re-checks the
  condition on its newest version, SQLite runs one writer at a time, so two metadata
  replicas over one database can never both grant a lease.
- renew(agent, [(group, epoch)], ttl): one conditional UPDATE per batch; a lease is
  renewed only if the agent still holds that epoch and it has not lapsed (a lapsed lease
  is re-acquired, with a new epoch). Returns the groups renewed.
- release(agent, [(group, epoch)]): the lease lapses at once (`expires_ms = 0`), so the
  next coordinator need not wait for the TTL. The row (epoch, group_state) stays.
- holders(groups): the holder of each unexpired lease (a plain read; FindCoordinator's
  "the group stays with its coordinator", agent.groups.placement).
- check(group, token): inside another transaction (an offset commit), the row is locked
  (`FOR UPDATE`) and must show this holder and epoch, unexpired; else NOT_COORDINATOR.
- confirm(group, token, ttl, group_state): a new generation; renews the lease and stores
  the generation's state in one conditional UPDATE, NOT_COORDINATOR if not the holder.

Agent registration (`heartbeat_agent`): a live agent id (heartbeated within the TTL)
heartbeated from a different host/port is refused with DUPLICATE_BROKER_REGISTRATION, as
Kafka refuses a second broker registering a live broker id; an expired entry may be taken
over from anywhere (a restarted agent at a new address).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from skiff.metadata.errors import (
    DUPLICATE_BROKER_REGISTRATION,
    INVALID_REQUEST,
    NOT_COORDINATOR,
    MetadataError,
)
from skiff.metadata.groups.lease_types import LeaseGrant, LeaseToken
from skiff.metadata.rows import insert_on_conflict
from skiff.metadata.schema import agents, group_leases
from skiff.metadata.types import AgentInfo
from sqlalchemy import Connection, select, tuple_, update

# Bounds on the TTL an agent may ask for.
MIN_LEASE_TTL_MS = 100
MAX_LEASE_TTL_MS = 600_000
MAX_GROUP_STATE_CHARS = 4 * 1024 * 1024
_KEYS_PER_STATEMENT = 400  # (group, epoch) pairs: within SQLite's bound-parameter limit

_L = group_leases.c


def _check_ttl(ttl_ms: int) -> None:
    if not MIN_LEASE_TTL_MS <= ttl_ms <= MAX_LEASE_TTL_MS:
        raise MetadataError(
            INVALID_REQUEST, f"lease ttl_ms must be in [{MIN_LEASE_TTL_MS}, {MAX_LEASE_TTL_MS}], got {ttl_ms}"
        )


def _batches(keys: Sequence[tuple[str, int]]) -> Iterable[Sequence[tuple[str, int]]]:
    for i in range(0, len(keys), _KEYS_PER_STATEMENT):
        yield keys[i : i + _KEYS_PER_STATEMENT]


def acquire(conn: Connection, group_id: str, agent_id: str, now_ms: int, ttl_ms: int) -> LeaseGrant:
    _check_ttl(ttl_ms)
    expires = now_ms + ttl_ms
    ins = insert_on_conflict(conn, group_leases).values(
        group_id=group_id, holder=agent_id, epoch=1, expires_ms=expires, group_state=None
    )
    stmt = ins.on_conflict_do_update(
        index_elements=[_L.group_id],
        set_={"holder": agent_id, "epoch": _L.epoch + 1, "expires_ms": expires},
        where=(_L.holder == agent_id) | (_L.expires_ms < now_ms),
    ).returning(_L.epoch, _L.group_state)
    row = conn.execute(stmt).first()
    if row is not None:
        return LeaseGrant(group_id, True, agent_id, int(row.epoch), expires, row.group_state)
    cur = conn.execute(select(_L.holder, _L.epoch, _L.expires_ms).where(_L.group_id == group_id)).one()
    return LeaseGrant(group_id, False, cur.holder, int(cur.epoch), int(cur.expires_ms))


def renew(
    conn: Connection, agent_id: str, leases: Sequence[tuple[str, int]], now_ms: int, ttl_ms: int
) -> list[str]:
    _check_ttl(ttl_ms)
    renewed: list[str] = []
    for batch in _batches(sorted(set(leases))):
        stmt = (
            update(group_leases)
            .where(
                _L.holder == agent_id,
                _L.expires_ms >= now_ms,
                tuple_(_L.group_id, _L.epoch).in_(list(batch)),
            )
            .values(expires_ms=now_ms + ttl_ms)
            .returning(_L.group_id)
        )
        renewed.extend(r[0] for r in conn.execute(stmt))
    return sorted(renewed)


def release(conn: Connection, agent_id: str, leases: Sequence[tuple[str, int]]) -> None:
    for batch in _batches(sorted(set(leases))):
        conn.execute(
            update(group_leases)
            .where(_L.holder == agent_id, tuple_(_L.group_id, _L.epoch).in_(list(batch)))
            .values(expires_ms=0)
        )


def holders(conn: Connection, group_ids: Sequence[str], now_ms: int) -> dict[str, str]:
    """The holder of each of `group_ids` whose lease has not lapsed (a read: who coordinates
    a group now, for FindCoordinator; agent.groups.placement)."""
    found: dict[str, str] = {}
    ids = sorted(set(group_ids))
    for i in range(0, len(ids), _KEYS_PER_STATEMENT):
        stmt = select(_L.group_id, _L.holder).where(
            _L.group_id.in_(ids[i : i + _KEYS_PER_STATEMENT]), _L.expires_ms >= now_ms
        )
        found.update((str(r.group_id), str(r.holder)) for r in conn.execute(stmt))
    return found


def check(conn: Connection, group_id: str, token: LeaseToken, now_ms: int) -> None:
    """Refuse (NOT_COORDINATOR) unless `token` is the group's current, unexpired lease. The
    row stays locked until the caller's transaction ends, so no takeover interleaves."""
    row = conn.execute(
        select(_L.holder, _L.epoch, _L.expires_ms).where(_L.group_id == group_id).with_for_update()
    ).first()
    if row is None or row.holder != token.holder or row.epoch != token.epoch or row.expires_ms < now_ms:
        raise MetadataError(NOT_COORDINATOR, _lost_message(group_id, token, row))


def confirm(
    conn: Connection, group_id: str, token: LeaseToken, now_ms: int, ttl_ms: int, group_state: str
) -> None:
    _check_ttl(ttl_ms)
    if len(group_state) > MAX_GROUP_STATE_CHARS:
        raise MetadataError(INVALID_REQUEST, f"group state over {MAX_GROUP_STATE_CHARS} characters")
    stmt = (
        update(group_leases)
        .where(
            _L.group_id == group_id,
            _L.holder == token.holder,
            _L.epoch == token.epoch,
            _L.expires_ms >= now_ms,
        )
        .values(expires_ms=now_ms + ttl_ms, group_state=group_state)
    )
    if conn.execute(stmt).rowcount != 1:
        row = conn.execute(select(_L.holder, _L.epoch, _L.expires_ms).where(_L.group_id == group_id)).first()
        raise MetadataError(NOT_COORDINATOR, _lost_message(group_id, token, row))


def _lost_message(group_id: str, token: LeaseToken, row: Any) -> str:
    if row is None:
        return f"{token.holder} holds no lease on group {group_id!r}"
    if row.holder != token.holder or row.epoch != token.epoch:
        return (
            f"{token.holder} (epoch {token.epoch}) lost the lease on group {group_id!r}: "
            f"{row.holder} holds it at epoch {row.epoch}"
        )
    return f"the lease of {token.holder} on group {group_id!r} expired"


def heartbeat_agent(conn: Connection, agent: AgentInfo, now_ms: int, ttl_ms: int) -> None:
    """Register or refresh an agent (see the module docstring for the refusal rule)."""
    a = agents.c
    listeners = json.dumps([list(e) for e in agent.listeners]) if agent.listeners else None
    ins = insert_on_conflict(conn, agents).values(
        agent_id=agent.agent_id,
        host=agent.host,
        port=agent.port,
        zone=agent.zone,
        last_heartbeat_ms=now_ms,
        listeners=listeners,
        ready=agent.ready,
        version=agent.version or None,
    )
    stmt = ins.on_conflict_do_update(
        index_elements=[a.agent_id],
        set_={
            "host": agent.host,
            "port": agent.port,
            "zone": agent.zone,
            "last_heartbeat_ms": now_ms,
            "listeners": listeners,
            "ready": agent.ready,
            "version": agent.version or None,
        },
        where=((a.host == agent.host) & (a.port == agent.port)) | (a.last_heartbeat_ms < now_ms - ttl_ms),
    ).returning(a.agent_id)
    if conn.execute(stmt).first() is None:
        cur = conn.execute(
            select(a.host, a.port, a.last_heartbeat_ms).where(a.agent_id == agent.agent_id)
        ).one()
        raise MetadataError(
            DUPLICATE_BROKER_REGISTRATION,
            f"agent id {agent.agent_id!r} is in use by a live agent at {cur.host}:{cur.port} (last "
            f"heartbeat {now_ms - cur.last_heartbeat_ms} ms ago), refused for {agent.host}:{agent.port}: "
            "give every agent its own --agent-id (or leave it unset)",
        )
