"""Kafka ACL bindings in the metadata database, with a version agents poll.

Each change (`create`, `delete`) runs in one write transaction that first increments the
`acl_version` counter row of `sequences`: that row lock (PostgreSQL; SQLite has one writer)
serialises ACL changes, so "is this binding already there?" and "which bindings match this
filter?" are answered against a state no other change is modifying, and the version a
reader sees always names exactly the bindings committed with it. A change that changes
nothing (every binding already present, no filter matching) rolls back, version unmoved.

`version()` is the cheap read agents poll (one primary-key lookup); `list_all()` returns
the version and every binding in one read transaction, consistent with each other.
Filters (Kafka's `AclBindingFilter`, metadata.security.acl_types) are applied in Python over the
rows of the resource type (there are few ACLs: thousands at most, and only DescribeAcls,
DeleteAcls and the agents' reloads read them all).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from skiff.metadata.db import read_tx, write_tx
from skiff.metadata.errors import INVALID_REQUEST, MetadataError
from skiff.metadata.rows import IDS_PER_STATEMENT, Db
from skiff.metadata.schema import ACL_VERSION_SEQUENCE, acls, sequences
from skiff.metadata.security.acl_types import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    binding_error,
    filter_error,
)
from sqlalchemy import Connection, delete, insert, select, update

_COLS = (
    acls.c.id,
    acls.c.resource_type,
    acls.c.resource_name,
    acls.c.pattern_type,
    acls.c.principal,
    acls.c.host,
    acls.c.operation,
    acls.c.permission,
)

# Refused beyond this many bindings per request (the agent's requests are bounded anyway).
MAX_ITEMS_PER_REQUEST = 10_000


class _Unchanged(Exception):
    """Raised inside a write transaction to roll it back (nothing to change)."""


def _binding(r: Any) -> AclBinding:
    return AclBinding(
        ResourceType(r.resource_type),
        r.resource_name,
        PatternType(r.pattern_type),
        r.principal,
        r.host,
        AclOperation(r.operation),
        AclPermissionType(r.permission),
    )


def _read_version(conn: Connection) -> int:
    value = conn.execute(
        select(sequences.c.next_value).where(sequences.c.name == ACL_VERSION_SEQUENCE)
    ).scalar()
    return int(value) if value is not None else 0


def _bump_version(conn: Connection) -> int:
    value = conn.execute(
        update(sequences)
        .where(sequences.c.name == ACL_VERSION_SEQUENCE)
        .values(next_value=sequences.c.next_value + 1)
        .returning(sequences.c.next_value)
    ).scalar()
    if value is None:  # a database migrated without the row: create it
        conn.execute(insert(sequences).values(name=ACL_VERSION_SEQUENCE, next_value=1))
        value = 1
    return int(value)


def _rows(conn: Connection, resource_types: set[ResourceType] | None) -> list[tuple[int, AclBinding]]:
    q = select(*_COLS).order_by(acls.c.id)
    if resource_types is not None:
        q = q.where(acls.c.resource_type.in_([int(t) for t in resource_types]))
    return [(r.id, _binding(r)) for r in conn.execute(q)]


def _types_of(filters: Sequence[AclBindingFilter]) -> set[ResourceType] | None:
    if any(f.resource_type == ResourceType.ANY for f in filters):
        return None
    return {f.resource_type for f in filters}


class AclStore:
    def __init__(self, db: Db) -> None:
        self._db = db

    def version(self) -> int:
        with read_tx(self._db.engine) as conn:
            return _read_version(conn)

    def list_all(self) -> tuple[int, list[AclBinding]]:
        with read_tx(self._db.engine) as conn:
            version = _read_version(conn)
            return version, [b for _, b in _rows(conn, None)]

    def describe(self, f: AclBindingFilter) -> tuple[int, list[AclBinding]]:
        """The bindings matching the filter (INVALID_REQUEST for a filter with UNKNOWN parts)."""
        reason = filter_error(f)
        if reason is not None:
            raise MetadataError(INVALID_REQUEST, reason)
        with read_tx(self._db.engine) as conn:
            version = _read_version(conn)
            return version, [b for _, b in _rows(conn, _types_of([f])) if f.matches(b)]

    def create(self, bindings: Sequence[AclBinding]) -> int:
        """Add the bindings (those already present are left as they are); the version after.
        Every binding must be valid (`binding_error`), else INVALID_REQUEST and nothing changes."""
        if len(bindings) > MAX_ITEMS_PER_REQUEST:
            raise MetadataError(INVALID_REQUEST, f"at most {MAX_ITEMS_PER_REQUEST} ACLs per request")
        for b in bindings:
            reason = binding_error(b)
            if reason is not None:
                raise MetadataError(INVALID_REQUEST, reason)
        try:
            with write_tx(self._db.engine) as conn:
                version = _bump_version(conn)
                existing = {b for _, b in _rows(conn, {b.resource_type for b in bindings})}
                new = list(dict.fromkeys(b for b in bindings if b not in existing))
                if not new:
                    raise _Unchanged
                now = self._db.clock()
                conn.execute(
                    insert(acls),
                    [
                        {
                            "resource_type": int(b.resource_type),
                            "resource_name": b.resource_name,
                            "pattern_type": int(b.pattern_type),
                            "principal": b.principal,
                            "host": b.host,
                            "operation": int(b.operation),
                            "permission": int(b.permission),
                            "created_ms": now,
                        }
                        for b in new
                    ],
                )
                return version
        except _Unchanged:
            return self.version()

    def delete(self, filters: Sequence[AclBindingFilter]) -> tuple[int, list[list[AclBinding]]]:
        """Delete every binding matching any filter, in one transaction; per filter, the
        bindings it matched (a binding matched by two filters is listed under both, as
        Kafka reports it), and the version after. A filter with UNKNOWN parts:
        INVALID_REQUEST, nothing deleted."""
        if len(filters) > MAX_ITEMS_PER_REQUEST:
            raise MetadataError(INVALID_REQUEST, f"at most {MAX_ITEMS_PER_REQUEST} filters per request")
        for f in filters:
            reason = filter_error(f)
            if reason is not None:
                raise MetadataError(INVALID_REQUEST, reason)
        matched: list[list[AclBinding]] = [[] for _ in filters]
        try:
            with write_tx(self._db.engine) as conn:
                version = _bump_version(conn)
                ids: set[int] = set()
                for row_id, b in _rows(conn, _types_of(filters)) if filters else []:
                    for i, f in enumerate(filters):
                        if f.matches(b):
                            matched[i].append(b)
                            ids.add(row_id)
                if not ids:
                    raise _Unchanged
                ordered = sorted(ids)
                for i in range(0, len(ordered), IDS_PER_STATEMENT):
                    conn.execute(delete(acls).where(acls.c.id.in_(ordered[i : i + IDS_PER_STATEMENT])))
                return version, matched
        except _Unchanged:
            return self.version(), matched
