"""Consumer groups as operators see them (`skiff groups`): the stored state of each group,
and the two changes an operator may make, as Kafka's kafka-consumer-groups.sh allows them.

- `stored_groups`: every group with committed offsets or a stored generation: the state
  its coordinators last confirmed (`group_leases.group_state`, written by
  `agent.groups.persistence`: generation, protocol, members and their assignments), the
  agent holding the lease and whether the group has active members.
- `reset_offsets` (--reset-offsets --execute) and `delete_group` (--delete): refused with
  NON_EMPTY_GROUP while the group has active members, as Kafka refuses them unless the
  group is Empty or Dead. Active: the group's coordinator lease has not lapsed and its
  stored generation lists members. The lease row is read FOR UPDATE in the same
  transaction as the change, and every new generation is confirmed by an UPDATE of that
  row (`metadata.groups.leases.confirm`), so a member joining meanwhile either is seen
  here or is confirmed only after the change.

Deleting a group forgets its committed offsets and its activity record and clears the
stored state of its lapsed lease row (the row itself stays: lease epochs are never reused).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from skiff.metadata.db import read_tx
from skiff.metadata.errors import NON_EMPTY_GROUP, MetadataError
from skiff.metadata.rows import Db
from skiff.metadata.schema import group_activity, group_leases, group_offsets
from skiff.metadata.types import StoredGroup
from sqlalchemy import Connection, delete, select, update

_L = group_leases.c


def member_count(group_state: str | None) -> int:
    """Members of a stored generation (0 for none, or for state this code cannot read)."""
    if not group_state:
        return 0
    try:
        members = json.loads(group_state).get("members") or []
    except (ValueError, AttributeError):
        return 0
    return len(members) if isinstance(members, list) else 0


def stored_groups(db: Db, group_ids: Sequence[str] | None) -> list[StoredGroup]:
    """Groups (of `group_ids`, or all when None) with offsets or a stored state, by id."""
    if group_ids is not None and not group_ids:
        return []
    wanted = None if group_ids is None else sorted(set(group_ids))
    with_offsets = select(group_offsets.c.group_id).distinct()
    leases = select(_L.group_id, _L.holder, _L.expires_ms, _L.group_state).where(_L.group_state.is_not(None))
    if wanted is not None:
        with_offsets = with_offsets.where(group_offsets.c.group_id.in_(wanted))
        leases = leases.where(_L.group_id.in_(wanted))
    now = db.clock()
    with read_tx(db.engine) as conn:
        ids = {r[0] for r in conn.execute(with_offsets)}
        rows = {r.group_id: r for r in conn.execute(leases)}
    out = []
    for gid in sorted(ids | set(rows)):
        r = rows.get(gid)
        live = r is not None and r.expires_ms >= now
        out.append(
            StoredGroup(
                group_id=gid,
                coordinator=r.holder if live and r is not None else None,
                active=live and member_count(r.group_state if r is not None else None) > 0,
                group_state=r.group_state if r is not None else None,
            )
        )
    return out


def check_empty(conn: Connection, db: Db, group_id: str, what: str) -> None:
    """Inside a write transaction: lock the group's lease row and refuse (NON_EMPTY_GROUP)
    if the group has active members."""
    row = conn.execute(
        select(_L.expires_ms, _L.group_state).where(_L.group_id == group_id).with_for_update()
    ).first()
    if row is None or row.expires_ms < db.clock():
        return
    n = member_count(row.group_state)
    if n:
        raise MetadataError(
            NON_EMPTY_GROUP,
            f"cannot {what} group {group_id!r}: it has {n} active member(s); stop its consumers first",
        )


def forget_group(conn: Connection, group_id: str) -> bool:
    """Inside a write transaction, after `check_empty`: offsets, activity, stored state.
    False if the group had neither offsets nor stored state."""
    n = conn.execute(delete(group_offsets).where(group_offsets.c.group_id == group_id)).rowcount
    conn.execute(delete(group_activity).where(group_activity.c.group_id == group_id))
    n += conn.execute(
        update(group_leases)
        .where(_L.group_id == group_id, _L.group_state.is_not(None))
        .values(group_state=None)
    ).rowcount
    return n > 0
