"""The schema registry's writes: register, delete (soft, then hard), settings and modes.

Every write runs in one transaction holding the registry's write lock (PostgreSQL: a
transaction-scoped advisory lock; SQLite: BEGIN IMMEDIATE already serialises writers), so
replicas of the metadata service never allocate one id or one version twice and a
compatibility check sees the versions it is checked against.

Registering (Confluent's order of checks): the mode (READONLY refuses, 42205; an explicit id
or version needs IMPORT); the schema parses with its references (42201); a live version of
the subject that already holds the same schema answers it unchanged; the compatibility level
against the subject's live versions (409; not in IMPORT mode); then the schema's id (the
existing one for the same schema anywhere, else max + 1) and the subject's next version
(one past every version it ever had, soft-deleted ones included).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from skiff.metadata.db import is_postgresql, write_tx
from skiff.metadata.rows import Db, upsert
from skiff.metadata.schema import registry_schemas, registry_settings, registry_versions
from skiff.metadata.schemas import formats
from skiff.metadata.schemas.errors import (
    ID_CONFLICT,
    INCOMPATIBLE_SCHEMA,
    INVALID_MODE,
    INVALID_VERSION,
    OPERATION_NOT_PERMITTED,
    REFERENCE_EXISTS,
    SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED,
    SUBJECT_NOT_SOFT_DELETED,
    SUBJECT_SOFT_DELETED,
    VERSION_NOT_FOUND,
    VERSION_NOT_SOFT_DELETED,
    VERSION_SOFT_DELETED,
    RegistryError,
)
from skiff.metadata.schemas.store import (
    GLOBAL,
    RegistryReads,
    check_level,
    explained,
    fingerprint,
    referrers,
    refs_to_json,
    settings_rows,
    subject_not_found,
)
from skiff.metadata.schemas.types import (
    IMPORT,
    LATEST,
    MODES,
    READONLY,
    READWRITE,
    RegisteredSchema,
    SchemaSettings,
    SchemaSpec,
)
from sqlalchemy import Connection, Row, delete, func, select, text, update

V = registry_versions.c
S = registry_schemas.c
C = registry_settings.c

# The advisory lock key of registry writes on PostgreSQL (any constant unique to Skiff).
_PG_LOCK_KEY = 0x5C1FF5C4E3A


class RegistryWrites:
    def __init__(self, db: Db, reads: RegistryReads) -> None:
        self._db = db
        self._reads = reads

    @contextmanager
    def _locked(self) -> Iterator[Connection]:
        with write_tx(self._db.engine) as conn:
            if is_postgresql(self._db.engine):
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})
            yield conn

    # ---------------------------------------------------------------- register

    def register(
        self,
        subject: str,
        spec: SchemaSpec,
        normalize: bool = False,
        schema_id: int | None = None,
        version: int | None = None,
    ) -> RegisteredSchema:
        with self._locked() as conn:
            mode = self._reads.mode_in(conn, subject, default_to_global=True)
            _check_mode_admits(subject, mode, schema_id, version)
            settings = self._reads.settings_in(conn, subject, default_to_global=True)
            parsed = self._reads.parse(conn, spec, normalize=normalize or bool(settings.normalize))
            fp = fingerprint(parsed, spec.references)
            rows = self._reads.version_rows(conn, subject)
            existing_id = conn.execute(select(S.schema_id).where(S.fingerprint == fp)).scalar()
            same = [r for r in rows if not r.deleted and r.schema_id == existing_id]
            if same and (schema_id is None or schema_id == existing_id):
                return self._reads.registered(conn, same[-1])
            if mode != IMPORT:
                self._check_compatible(conn, subject, parsed, [r for r in rows if not r.deleted], settings)
            new_id = self._schema_id(conn, existing_id, schema_id, parsed, fp, spec)
            new_version = self._next_version(rows, version)
            conn.execute(
                registry_versions.insert().values(
                    subject=subject,
                    version=new_version,
                    schema_id=new_id,
                    deleted=False,
                    created_ms=self._db.clock(),
                )
            )
            return RegisteredSchema(
                subject, new_version, new_id, parsed.schema_type, parsed.canonical, spec.references
            )

    def _check_compatible(
        self,
        conn: Connection,
        subject: str,
        parsed: formats.ParsedSchema,
        live: Sequence[Row[Any]],
        settings: SchemaSettings,
    ) -> None:
        level = settings.compatibility or "BACKWARD"
        if level == "NONE" or not live:
            return
        previous = [
            (int(r.version), self._reads.parse(conn, _spec_of(self._reads.registered(conn, r)))) for r in live
        ]
        problems = explained(level, parsed, previous)
        if problems:
            raise RegistryError(
                INCOMPATIBLE_SCHEMA,
                f'Schema being registered is incompatible with an earlier schema for subject "{subject}",'
                f" details: [{', '.join(problems)}]",
            )

    def _schema_id(
        self,
        conn: Connection,
        existing_id: int | None,
        wanted: int | None,
        parsed: formats.ParsedSchema,
        fp: str,
        spec: SchemaSpec,
    ) -> int:
        if existing_id is not None:
            if wanted is not None and wanted != existing_id:
                raise RegistryError(
                    ID_CONFLICT,
                    f"Schema already registered with id {existing_id} instead of input id {wanted}",
                )
            return existing_id
        if wanted is not None:
            taken = conn.execute(select(S.schema_id).where(S.schema_id == wanted)).scalar()
            if taken is not None:
                raise RegistryError(
                    ID_CONFLICT,
                    f"Overwrite new schema with id {wanted} is not permitted: another schema has it",
                )
            new_id = wanted
        else:
            new_id = int(conn.execute(select(func.coalesce(func.max(S.schema_id), 0))).scalar_one()) + 1
        conn.execute(
            registry_schemas.insert().values(
                schema_id=new_id,
                schema_type=parsed.schema_type,
                schema_text=parsed.canonical,
                references=refs_to_json(spec.references),
                fingerprint=fp,
                created_ms=self._db.clock(),
            )
        )
        return new_id

    @staticmethod
    def _next_version(rows: Sequence[Row[Any]], wanted: int | None) -> int:
        taken = {int(r.version) for r in rows}
        if wanted is not None:
            if wanted < 1 or wanted in taken:
                raise RegistryError(
                    INVALID_VERSION, f"The specified version '{wanted}' is not a valid version id."
                )
            return wanted
        return max(taken, default=0) + 1

    # ---------------------------------------------------------------- deletes

    def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        with self._locked() as conn:
            self._check_writable(conn, subject)
            rows = self._reads.version_rows(conn, subject)
            if not rows:
                raise subject_not_found(subject)
            live = [r.version for r in rows if not r.deleted]
            if permanent and live:
                raise RegistryError(
                    SUBJECT_NOT_SOFT_DELETED,
                    f"Subject '{subject}' was not deleted first before being permanently deleted",
                )
            if not permanent and not live:
                raise RegistryError(
                    SUBJECT_SOFT_DELETED,
                    f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently",
                )
            versions = [r.version for r in rows] if permanent else live
            for v in versions:
                _refuse_if_referenced(conn, subject, v)
            if permanent:
                conn.execute(delete(registry_versions).where(V.subject == subject))
                conn.execute(delete(registry_settings).where(C.subject == subject))
            else:
                conn.execute(update(registry_versions).where(V.subject == subject).values(deleted=True))
            return versions

    def delete_version(self, subject: str, version: int, permanent: bool = False) -> int:
        with self._locked() as conn:
            self._check_writable(conn, subject)
            rows = self._reads.version_rows(conn, subject)
            if not rows:
                raise subject_not_found(subject)
            row = _pick(rows, version, permanent)
            if permanent and not row.deleted:
                raise RegistryError(
                    VERSION_NOT_SOFT_DELETED,
                    f"Subject '{subject}' Version {row.version} was not deleted first before being permanently deleted",
                )
            if not permanent and row.deleted:
                raise RegistryError(
                    VERSION_SOFT_DELETED,
                    f"Subject '{subject}' Version {row.version} was soft deleted.Set permanent=true to delete permanently",
                )
            _refuse_if_referenced(conn, subject, row.version)
            where = (V.subject == subject, V.version == row.version)
            if permanent:
                conn.execute(delete(registry_versions).where(*where))
            else:
                conn.execute(update(registry_versions).where(*where).values(deleted=True))
            return int(row.version)

    def _check_writable(self, conn: Connection, subject: str) -> None:
        if self._reads.mode_in(conn, subject, default_to_global=True) == READONLY:
            raise RegistryError(OPERATION_NOT_PERMITTED, f"Subject {subject} is in read-only mode")

    # ---------------------------------------------------------------- settings

    def set_settings(
        self, subject: str | None, compatibility: str | None, normalize: bool | None = None
    ) -> SchemaSettings:
        level = check_level(compatibility) if compatibility is not None else None
        with self._locked() as conn:
            values = {"updated_ms": self._db.clock()}
            if level is not None:
                values["compatibility"] = level  # type: ignore[assignment]
            if normalize is not None:
                values["normalize"] = normalize
            upsert(conn, registry_settings, ["subject"], [{"subject": subject or GLOBAL, **values}])
            return self._reads.settings_in(conn, subject, default_to_global=True)

    def delete_settings(self, subject: str | None) -> SchemaSettings:
        """Forget the compatibility level at `subject` (globally: back to the default)."""
        with self._locked() as conn:
            before = self._reads.settings_in(conn, subject, default_to_global=subject is None)
            key = subject or GLOBAL
            if subject and settings_rows(conn, subject).get(key) is None:
                raise RegistryError(
                    SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED,
                    f"Subject '{subject}' does not have subject-level compatibility configured",
                )
            conn.execute(
                update(registry_settings).where(C.subject == key).values(compatibility=None, normalize=None)
            )
            return before

    def set_mode(self, subject: str | None, mode: str, force: bool = False) -> str:
        up = mode.upper()
        if up not in MODES:
            raise RegistryError(INVALID_MODE, f"Invalid mode. Valid values are {', '.join(MODES)}.")
        with self._locked() as conn:
            if up == IMPORT and not force and _has_versions(conn, subject):
                raise RegistryError(
                    OPERATION_NOT_PERMITTED,
                    "Cannot import since found existing subjects (set force=true to switch anyway)",
                )
            upsert(
                conn,
                registry_settings,
                ["subject"],
                [{"subject": subject or GLOBAL, "mode": up, "updated_ms": self._db.clock()}],
            )
            return up

    def delete_mode(self, subject: str) -> str:
        with self._locked() as conn:
            before = self._reads.mode_in(conn, subject, default_to_global=False)
            conn.execute(update(registry_settings).where(C.subject == subject).values(mode=None))
            return before


def _check_mode_admits(subject: str, mode: str, schema_id: int | None, version: int | None) -> None:
    if mode == READONLY:
        raise RegistryError(OPERATION_NOT_PERMITTED, f"Subject {subject} is in read-only mode")
    if (schema_id is not None or version is not None) and mode != IMPORT:
        raise RegistryError(
            OPERATION_NOT_PERMITTED,
            f"Subject {subject} is not in import mode: an id or version cannot be given",
        )
    if mode == IMPORT and schema_id is None:
        raise RegistryError(
            OPERATION_NOT_PERMITTED, f"Subject {subject} is in import mode: give the schema's id"
        )
    assert mode in (READWRITE, IMPORT)


def _pick(rows: Sequence[Row[Any]], version: int, permanent: bool) -> Row[Any]:
    if version == LATEST:
        candidates = [r for r in rows if permanent or not r.deleted]
        if candidates:
            return candidates[-1]
    else:
        for r in rows:
            if r.version == version:
                return r
    raise RegistryError(VERSION_NOT_FOUND, f"Version {version} not found.")


def _refuse_if_referenced(conn: Connection, subject: str, version: int) -> None:
    if referrers(conn, subject, version):
        raise RegistryError(
            REFERENCE_EXISTS,
            f"One or more references exist to the schema {{subject={subject},version={version}}}.",
        )


def _has_versions(conn: Connection, subject: str | None) -> bool:
    q = select(V.version).limit(1)
    if subject:
        q = q.where(V.subject == subject)
    return conn.execute(q).first() is not None


def _spec_of(r: RegisteredSchema) -> SchemaSpec:
    return SchemaSpec(r.schema, r.schema_type, r.references)
