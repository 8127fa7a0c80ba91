"""Kafka client quotas in the metadata database, with a version agents poll.

One row per (entity, quota key) in `client_quotas` (metadata.schema: the entity's user and
client-id parts encoded as `""` absent, `"*"` the default, `"=" + name` a name). Rules of the
values are Kafka's (metadata.security.quota_types). As for ACLs (metadata.security.acls),
each change runs in one write transaction that first increments the `client_quota_version`
row of `sequences`: that row lock serialises quota changes, and the version a reader sees
always names exactly the quotas committed with it. An alteration that changes nothing (a
value set to what it is, a key removed that is absent) rolls back, version unmoved, so
agents reload only on a real change.

`version()` is the cheap read agents poll; `list_all()` the version and every quota in one
read transaction. Descriptions filter in Python (quotas are few: one row per configured
user or client key).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kio.schema.errors import ErrorCode
from skiff.metadata.db import read_tx, write_tx
from skiff.metadata.errors import INVALID_REQUEST, MetadataError
from skiff.metadata.rows import Db
from skiff.metadata.schema import CLIENT_QUOTA_VERSION_SEQUENCE, client_quotas, sequences
from skiff.metadata.security.quota_types import (
    CLIENT_ID,
    MAX_ALTERATIONS,
    USER,
    ClientQuotaEntry,
    QuotaAlteration,
    QuotaEntity,
    QuotaFilterComponent,
    alteration_errors,
    filter_error,
    filter_matches,
)
from sqlalchemy import Connection, and_, delete, insert, select, update

# An unknown entity or match type in a describe filter (Kafka's UnsupportedVersionException).
UNSUPPORTED_VERSION = int(ErrorCode.unsupported_version)

_ABSENT = ""
_DEFAULT = "*"
_NAMED = "="


class _Unchanged(Exception):
    """Raised inside a write transaction to roll it back (nothing to change)."""


def _encode(entity: QuotaEntity, entity_type: str) -> str:
    present, name = entity.name_of(entity_type)
    if not present:
        return _ABSENT
    return _DEFAULT if name is None else _NAMED + name


def _decode(user: str, client_id: str) -> QuotaEntity:
    parts: list[tuple[str, str | None]] = []
    for entity_type, text in ((CLIENT_ID, client_id), (USER, user)):
        if text == _ABSENT:
            continue
        parts.append((entity_type, None if text == _DEFAULT else text[len(_NAMED) :]))
    return QuotaEntity(tuple(parts))


def _read_version(conn: Connection) -> int:
    value = conn.execute(
        select(sequences.c.next_value).where(sequences.c.name == CLIENT_QUOTA_VERSION_SEQUENCE)
    ).scalar()
    return int(value) if value is not None else 0


def _bump_version(conn: Connection) -> int:
    value = conn.execute(
        update(sequences)
        .where(sequences.c.name == CLIENT_QUOTA_VERSION_SEQUENCE)
        .values(next_value=sequences.c.next_value + 1)
        .returning(sequences.c.next_value)
    ).scalar()
    if value is None:  # a database migrated without the row: create it
        conn.execute(insert(sequences).values(name=CLIENT_QUOTA_VERSION_SEQUENCE, next_value=1))
        value = 1
    return int(value)


def _entries(conn: Connection) -> list[ClientQuotaEntry]:
    rows = conn.execute(
        select(
            client_quotas.c.entity_user,
            client_quotas.c.entity_client_id,
            client_quotas.c.quota_key,
            client_quotas.c.value,
        ).order_by(client_quotas.c.entity_user, client_quotas.c.entity_client_id, client_quotas.c.quota_key)
    )
    grouped: dict[tuple[str, str], list[tuple[str, float]]] = {}
    for r in rows:
        grouped.setdefault((r.entity_user, r.entity_client_id), []).append((r.quota_key, float(r.value)))
    return [ClientQuotaEntry(_decode(u, c), tuple(values)) for (u, c), values in grouped.items()]


def _where(user: str, client_id: str, key: str) -> Any:
    return and_(
        client_quotas.c.entity_user == user,
        client_quotas.c.entity_client_id == client_id,
        client_quotas.c.quota_key == key,
    )


def _apply(conn: Connection, alteration: QuotaAlteration, now_ms: int) -> bool:
    """One valid alteration's changes; True if anything changed."""
    user, client_id = _encode(alteration.entity, USER), _encode(alteration.entity, CLIENT_ID)
    changed = False
    for op in alteration.ops:
        current = conn.execute(select(client_quotas.c.value).where(_where(user, client_id, op.key))).scalar()
        if op.value is None:
            if current is not None:
                conn.execute(delete(client_quotas).where(_where(user, client_id, op.key)))
                changed = True
        elif current is None:
            conn.execute(
                insert(client_quotas).values(
                    entity_user=user,
                    entity_client_id=client_id,
                    quota_key=op.key,
                    value=op.value,
                    updated_ms=now_ms,
                )
            )
            changed = True
        elif float(current) != op.value:
            conn.execute(
                update(client_quotas)
                .where(_where(user, client_id, op.key))
                .values(value=op.value, updated_ms=now_ms)
            )
            changed = True
    return changed


class ClientQuotaStore:
    def __init__(self, db: Db) -> None:
        self._db = db

    def version(self) -> int:
        with read_tx(self._db.engine) as conn:
            return _read_version(conn)

    def list_all(self) -> tuple[int, list[ClientQuotaEntry]]:
        with read_tx(self._db.engine) as conn:
            return _read_version(conn), _entries(conn)

    def describe(self, components: Sequence[QuotaFilterComponent], strict: bool) -> list[ClientQuotaEntry]:
        """The entities matching the filter with their quotas (Kafka's errors for a bad filter:
        INVALID_REQUEST or UNSUPPORTED_VERSION with Kafka's message)."""
        problem = filter_error(list(components))
        if problem is not None:
            kind, message = problem
            raise MetadataError(
                INVALID_REQUEST if kind == "invalid_request" else UNSUPPORTED_VERSION, message
            )
        with read_tx(self._db.engine) as conn:
            entries = _entries(conn)
        return [e for e in entries if filter_matches(list(components), strict, e.entity)]

    def alter(
        self, alterations: Sequence[QuotaAlteration], validate_only: bool
    ) -> tuple[int, list[str | None]]:
        """Apply the valid alterations in one transaction (none with `validate_only`); per
        alteration, why it was refused (INVALID_REQUEST) or None; and the version after."""
        if len(alterations) > MAX_ALTERATIONS:
            raise MetadataError(INVALID_REQUEST, f"at most {MAX_ALTERATIONS} quota alterations per request")
        errors = alteration_errors(list(alterations))
        valid = [a for a, e in zip(alterations, errors, strict=True) if e is None]
        if validate_only or not valid:
            return self.version(), errors
        try:
            with write_tx(self._db.engine) as conn:
                version = _bump_version(conn)
                now = self._db.clock()
                changed = [_apply(conn, a, now) for a in valid]
                if not any(changed):
                    raise _Unchanged
                return version, errors
        except _Unchanged:
            return self.version(), errors
