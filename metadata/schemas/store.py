"""The schema registry's reads over the metadata database (tables `registry_schemas`,
`registry_versions`, `registry_settings`, see metadata.schema); the writes are in
`metadata.schemas.writes`, the parsing and compatibility rules in `metadata.schemas.formats`.

Confluent's semantics, which clients rely on:

- a schema's id is global: the same schema (type, text as canonicalised by its format, and
  references) registered under any subject has one id (`fingerprint` finds it);
- reads hide soft-deleted versions unless asked (`deleted=True`); "latest" (version -1) is
  the newest live version;
- a schema id is found only while some version (live or soft-deleted) holds it: after a hard
  delete of its last version the id answers 40403, although the row stays, so that an id is
  never reused and registering the same schema again gives the same id back.

Every answer is bounded: subjects and versions listed are capped at `MAX_LISTED`, a
reference chain at `MAX_REFERENCE_DEPTH` and `MAX_RESOLVED_REFERENCES` schemas.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

from skiff.metadata.db import read_tx
from skiff.metadata.rows import Db
from skiff.metadata.schema import registry_schemas, registry_settings, registry_versions
from skiff.metadata.schemas import formats
from skiff.metadata.schemas.errors import (
    INVALID_COMPATIBILITY_LEVEL,
    INVALID_SCHEMA,
    SCHEMA_NOT_FOUND,
    SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED,
    SUBJECT_LEVEL_MODE_NOT_CONFIGURED,
    SUBJECT_NOT_FOUND,
    VERSION_NOT_FOUND,
    RegistryError,
)
from skiff.metadata.schemas.types import (
    DEFAULT_COMPATIBILITY,
    LATEST,
    READWRITE,
    RegisteredSchema,
    SchemaReference,
    SchemaSettings,
    SchemaSpec,
    StoredSchema,
)
from sqlalchemy import Connection, Row, func, select

MAX_LISTED = 100_000
MAX_REFERENCE_DEPTH = 32
MAX_RESOLVED_REFERENCES = 1_000
GLOBAL = ""  # the settings row of the registry as a whole

V = registry_versions.c
S = registry_schemas.c
C = registry_settings.c


def refs_to_json(refs: Sequence[SchemaReference]) -> list[list[Any]]:
    return [[r.name, r.subject, r.version] for r in refs]


def refs_from_json(value: Any) -> tuple[SchemaReference, ...]:
    return tuple(SchemaReference(str(n), str(s), int(v)) for n, s, v in value or ())


def fingerprint(parsed: formats.ParsedSchema, refs: Sequence[SchemaReference]) -> str:
    """What makes two registrations the same schema (and so the same id)."""
    key = json.dumps([parsed.schema_type, parsed.canonical, refs_to_json(refs)], separators=(",", ":"))
    return hashlib.sha256(key.encode()).hexdigest()


def invalid(message: str) -> RegistryError:
    return RegistryError(INVALID_SCHEMA, f"Invalid schema {message}")


def check_level(level: str) -> str:
    up = level.upper()
    if up not in formats.LEVELS:
        raise RegistryError(
            INVALID_COMPATIBILITY_LEVEL,
            "Invalid compatibility level. Valid values are none, backward, forward, full,"
            " backward_transitive, forward_transitive, and full_transitive",
        )
    return up


class RegistryReads:
    """Lookups by id, subject and version; settings; the parsing of stored schemas."""

    def __init__(self, db: Db) -> None:
        self._db = db

    # ---------------------------------------------------------------- by id

    def schema_by_id(self, schema_id: int, fmt: str | None = None) -> StoredSchema:
        with read_tx(self._db.engine) as conn:
            row = self._held_schema(conn, schema_id)
            stored = StoredSchema(
                row.schema_id, row.schema_type, row.schema_text, refs_from_json(row.references)
            )
            if fmt:
                parsed = self.parse(conn, SchemaSpec(stored.schema, stored.schema_type, stored.references))
                stored = StoredSchema(
                    stored.id, stored.schema_type, formats.serialized_form(parsed, fmt), stored.references
                )
        return stored

    def subjects_by_id(self, schema_id: int, deleted: bool = False) -> list[str]:
        return sorted({s for s, _ in self.versions_by_id(schema_id, deleted)})

    def versions_by_id(self, schema_id: int, deleted: bool = False) -> list[tuple[str, int]]:
        with read_tx(self._db.engine) as conn:
            self._held_schema(conn, schema_id)
            q = select(V.subject, V.version).where(V.schema_id == schema_id)
            if not deleted:
                q = q.where(V.deleted.is_(False))
            rows = conn.execute(q.order_by(V.subject, V.version).limit(MAX_LISTED)).all()
        return [(r.subject, r.version) for r in rows]

    def _held_schema(self, conn: Connection, schema_id: int) -> Row[Any]:
        row = conn.execute(
            select(registry_schemas).where(
                S.schema_id == schema_id,
                select(V.version).where(V.schema_id == schema_id).exists(),
            )
        ).first()
        if row is None:
            raise RegistryError(SCHEMA_NOT_FOUND, f"Schema {schema_id} not found")
        return row

    # ---------------------------------------------------------------- by subject

    def subjects(self, prefix: str = "", deleted: bool = False, deleted_only: bool = False) -> list[str]:
        q = select(V.subject).distinct()
        if deleted_only:
            q = q.where(V.deleted.is_(True))
        elif not deleted:
            q = q.where(V.deleted.is_(False))
        if prefix:
            q = q.where(func.substr(V.subject, 1, len(prefix)) == prefix)
        with read_tx(self._db.engine) as conn:
            return [r.subject for r in conn.execute(q.order_by(V.subject).limit(MAX_LISTED))]

    def versions(self, subject: str, deleted: bool = False, deleted_only: bool = False) -> list[int]:
        with read_tx(self._db.engine) as conn:
            rows = self.version_rows(conn, subject)
        if not rows:
            raise subject_not_found(subject)
        if deleted_only:
            return [r.version for r in rows if r.deleted]
        out = [r.version for r in rows if deleted or not r.deleted]
        if not out:
            raise subject_not_found(subject)
        return out

    def version(self, subject: str, version: int, deleted: bool = False) -> RegisteredSchema:
        with read_tx(self._db.engine) as conn:
            return self.version_in(conn, subject, version, deleted)

    def version_in(self, conn: Connection, subject: str, version: int, deleted: bool) -> RegisteredSchema:
        rows = [r for r in self.version_rows(conn, subject) if deleted or not r.deleted]
        if not rows:
            raise subject_not_found(subject)
        if version == LATEST:
            row = rows[-1]
        else:
            found = [r for r in rows if r.version == version]
            if not found:
                raise RegistryError(VERSION_NOT_FOUND, f"Version {version} not found.")
            row = found[0]
        return self.registered(conn, row)

    def version_rows(self, conn: Connection, subject: str) -> list[Row[Any]]:
        """Every version of `subject` (soft-deleted ones too), oldest first."""
        q = select(V.subject, V.version, V.schema_id, V.deleted).where(V.subject == subject)
        return cast(list[Row[Any]], conn.execute(q.order_by(V.version).limit(MAX_LISTED)).all())

    def registered(self, conn: Connection, vrow: Row[Any]) -> RegisteredSchema:
        srow = conn.execute(select(registry_schemas).where(S.schema_id == vrow.schema_id)).one()
        return RegisteredSchema(
            vrow.subject,
            vrow.version,
            srow.schema_id,
            srow.schema_type,
            srow.schema_text,
            refs_from_json(srow.references),
            bool(vrow.deleted),
        )

    def lookup(
        self, subject: str, spec: SchemaSpec, normalize: bool = False, deleted: bool = False
    ) -> RegisteredSchema:
        """The version of `subject` holding `spec` (POST /subjects/{subject})."""
        with read_tx(self._db.engine) as conn:
            rows = [r for r in self.version_rows(conn, subject) if deleted or not r.deleted]
            if not rows:
                raise subject_not_found(subject)
            parsed = self.parse(conn, spec, normalize=normalize)
            fp = fingerprint(parsed, spec.references)
            schema_id = conn.execute(select(S.schema_id).where(S.fingerprint == fp)).scalar()
            match = [r for r in rows if r.schema_id == schema_id]
            if not match:
                raise RegistryError(SCHEMA_NOT_FOUND, "Schema not found")
            return self.registered(conn, match[-1])

    def subject_schema_ids(self, subject: str, deleted: bool = False) -> list[int]:
        """The ids of `subject`'s live versions (what broker-side validation admits), and of
        its soft-deleted ones too with `deleted`."""
        with read_tx(self._db.engine) as conn:
            return sorted({r.schema_id for r in self.version_rows(conn, subject) if deleted or not r.deleted})

    def referenced_by(self, subject: str, version: int) -> list[int]:
        """Ids of the schemas whose references name `subject` at `version`."""
        with read_tx(self._db.engine) as conn:
            target = self.version_in(conn, subject, version, deleted=True)
            return sorted(referrers(conn, subject, target.version))

    # ---------------------------------------------------------------- parsing

    def parse(self, conn: Connection, spec: SchemaSpec, *, normalize: bool = False) -> formats.ParsedSchema:
        """`spec` parsed by its format with its references resolved (42201 when it does not)."""
        if spec.schema_type not in formats.SCHEMA_TYPES:
            raise RegistryError(INVALID_SCHEMA, f"Invalid schema type {spec.schema_type}")
        resolved = self.resolve_references(conn, spec.references)
        try:
            return formats.parse_schema(spec.schema_type, spec.schema, resolved, normalize=normalize)
        except formats.InvalidSchema as e:
            raise invalid(str(e)) from None

    def resolve_references(self, conn: Connection, refs: Sequence[SchemaReference]) -> dict[str, str]:
        """name -> text of every schema `refs` reach, dependencies first."""
        out: dict[str, str] = {}
        self._resolve(conn, refs, out, depth=0)
        return out

    def _resolve(
        self, conn: Connection, refs: Sequence[SchemaReference], out: dict[str, str], depth: int
    ) -> None:
        if depth > MAX_REFERENCE_DEPTH:
            raise invalid(f"references nest deeper than {MAX_REFERENCE_DEPTH}")
        for ref in refs:
            if ref.name in out:
                continue
            try:
                target = self.version_in(conn, ref.subject, ref.version, deleted=False)
            except RegistryError:
                raise invalid(
                    f"reference {ref.name!r} to subject {ref.subject!r} version {ref.version} not found"
                ) from None
            self._resolve(conn, target.references, out, depth + 1)
            out[ref.name] = target.schema
            if len(out) > MAX_RESOLVED_REFERENCES:
                raise invalid(f"more than {MAX_RESOLVED_REFERENCES} referenced schemas")

    # ---------------------------------------------------------------- settings

    def settings(self, subject: str | None, default_to_global: bool = False) -> SchemaSettings:
        """The compatibility level at `subject` (or globally): a subject without its own
        level is 40408 unless `default_to_global`."""
        with read_tx(self._db.engine) as conn:
            return self.settings_in(conn, subject, default_to_global)

    def settings_in(self, conn: Connection, subject: str | None, default_to_global: bool) -> SchemaSettings:
        own = effective_row(conn, subject, "compatibility", default_to_global)
        level = own.compatibility if own is not None and own.compatibility else DEFAULT_COMPATIBILITY
        normalize = own.normalize if own is not None else None
        return SchemaSettings(subject, level, normalize)

    def mode(self, subject: str | None, default_to_global: bool = False) -> str:
        with read_tx(self._db.engine) as conn:
            return self.mode_in(conn, subject, default_to_global)

    def mode_in(self, conn: Connection, subject: str | None, default_to_global: bool) -> str:
        own = effective_row(conn, subject, "mode", default_to_global)
        return own.mode if own is not None and own.mode else READWRITE


_NOT_CONFIGURED = {
    "compatibility": SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED,
    "mode": SUBJECT_LEVEL_MODE_NOT_CONFIGURED,
}


def effective_row(
    conn: Connection, subject: str | None, setting: str, default_to_global: bool
) -> Row[Any] | None:
    """The settings row that decides `setting` at `subject`: its own when it sets it, else the
    global one when `default_to_global` (else Confluent's 40408 / 40409); None: nothing set."""
    rows = settings_rows(conn, subject)
    own = rows.get(subject or GLOBAL)
    if subject and (own is None or getattr(own, setting) is None):
        if not default_to_global:
            raise RegistryError(
                _NOT_CONFIGURED[setting],
                f"Subject '{subject}' does not have subject-level {setting} configured",
            )
        own = rows.get(GLOBAL)
    return own


def settings_rows(conn: Connection, subject: str | None) -> Mapping[str, Row[Any]]:
    keys = [GLOBAL] if not subject else [GLOBAL, subject]
    return {r.subject: r for r in conn.execute(select(registry_settings).where(C.subject.in_(keys)))}


def referrers(conn: Connection, subject: str, version: int) -> set[int]:
    """Ids of schemas held by some live version whose references name (subject, version)."""
    q = (
        select(S.schema_id, S.references)
        .where(select(V.version).where(V.schema_id == S.schema_id, V.deleted.is_(False)).exists())
        .limit(MAX_LISTED)
    )
    return {
        row.schema_id
        for row in conn.execute(q)
        if any(r.subject == subject and r.version == version for r in refs_from_json(row.references))
    }


def explained(
    level: str, new: formats.ParsedSchema, previous: Sequence[tuple[int, formats.ParsedSchema]]
) -> list[str]:
    """`formats.incompatibilities` of `new` against the (version, schema) pairs, with the parts of
    Confluent's verbose message only the store knows: `{oldSchemaVersion: N}` before the failing
    version's `{oldSchema: ...}`, and `{validateFields: 'false', compatibility: 'LEVEL'}` last."""
    problems = formats.incompatibilities(level, new, [p for _, p in previous])
    if not problems:
        return []
    out: list[str] = []
    for message in problems:
        for version, old in previous:
            if message.startswith("{oldSchema: ") and old.canonical[:200] in message:
                out.append(f"{{oldSchemaVersion: {version}}}")
                break
        out.append(message)
    out.append(f"{{validateFields: 'false', compatibility: '{level}'}}")
    return out


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")
