"""`SchemaRegistryOperations`: the schema registry's operations on `MetadataService` (the
`schema_*` methods declared in metadata.wire.schema_operations), over `RegistryReads` and
`RegistryWrites`. A mixin, so that the service facade stays one class with one method per
declared operation while the registry keeps its own module.
"""

from __future__ import annotations

from skiff.metadata.db import read_tx
from skiff.metadata.rows import Db
from skiff.metadata.schemas.store import RegistryReads, explained
from skiff.metadata.schemas.types import (
    IMPORT,
    RegisteredSchema,
    SchemaSettings,
    SchemaSpec,
    StoredSchema,
)
from skiff.metadata.schemas.writes import RegistryWrites


class SchemaRegistryOperations:
    schema_reads: RegistryReads
    schema_writes: RegistryWrites

    def _init_schema_registry(self, db: Db) -> None:
        self._schema_db = db
        self.schema_reads = RegistryReads(db)
        self.schema_writes = RegistryWrites(db, self.schema_reads)

    # reads
    def schema_by_id(self, schema_id: int, fmt: str | None = None) -> StoredSchema:
        return self.schema_reads.schema_by_id(schema_id, fmt)

    def schema_subjects_by_id(self, schema_id: int, deleted: bool = False) -> list[str]:
        return self.schema_reads.subjects_by_id(schema_id, deleted)

    def schema_versions_by_id(self, schema_id: int, deleted: bool = False) -> list[tuple[str, int]]:
        return self.schema_reads.versions_by_id(schema_id, deleted)

    def schema_subjects(
        self, prefix: str = "", deleted: bool = False, deleted_only: bool = False
    ) -> list[str]:
        return self.schema_reads.subjects(prefix, deleted, deleted_only)

    def schema_versions(self, subject: str, deleted: bool = False, deleted_only: bool = False) -> list[int]:
        return self.schema_reads.versions(subject, deleted, deleted_only)

    def schema_version(self, subject: str, version: int, deleted: bool = False) -> RegisteredSchema:
        return self.schema_reads.version(subject, version, deleted)

    def schema_lookup(
        self, subject: str, spec: SchemaSpec, normalize: bool = False, deleted: bool = False
    ) -> RegisteredSchema:
        return self.schema_reads.lookup(subject, spec, normalize, deleted)

    def schema_subject_ids(self, subject: str, deleted: bool = False) -> list[int]:
        return self.schema_reads.subject_schema_ids(subject, deleted)

    def schema_referenced_by(self, subject: str, version: int) -> list[int]:
        return self.schema_reads.referenced_by(subject, version)

    def schema_check(
        self, subject: str, spec: SchemaSpec, version: int | None = None, normalize: bool = False
    ) -> list[str]:
        """Confluent's POST /compatibility: against every live version by the subject's level
        (an unknown subject is compatible), or against `version` alone."""
        reads = self.schema_reads
        with read_tx(self._schema_db.engine) as conn:
            level = reads.settings_in(conn, subject, default_to_global=True).compatibility or "BACKWARD"
            if reads.mode_in(conn, subject, default_to_global=True) == IMPORT:
                return []
            parsed = reads.parse(conn, spec, normalize=normalize)
            if version is not None:
                targets = [reads.version_in(conn, subject, version, deleted=False)]
                level = level.removesuffix("_TRANSITIVE")
            else:
                targets = [
                    reads.registered(conn, r) for r in reads.version_rows(conn, subject) if not r.deleted
                ]
            previous = [
                (t.version, reads.parse(conn, SchemaSpec(t.schema, t.schema_type, t.references)))
                for t in targets
            ]
        return explained(level, parsed, previous)

    def schema_settings(self, subject: str | None = None, default_to_global: bool = False) -> SchemaSettings:
        return self.schema_reads.settings(subject, default_to_global)

    def schema_mode(self, subject: str | None = None, default_to_global: bool = False) -> str:
        return self.schema_reads.mode(subject, default_to_global)

    # writes
    def schema_register(
        self,
        subject: str,
        spec: SchemaSpec,
        normalize: bool = False,
        schema_id: int | None = None,
        version: int | None = None,
    ) -> RegisteredSchema:
        return self.schema_writes.register(subject, spec, normalize, schema_id, version)

    def schema_delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        return self.schema_writes.delete_subject(subject, permanent)

    def schema_delete_version(self, subject: str, version: int, permanent: bool = False) -> int:
        return self.schema_writes.delete_version(subject, version, permanent)

    def schema_set_settings(
        self, subject: str | None, compatibility: str | None, normalize: bool | None = None
    ) -> SchemaSettings:
        return self.schema_writes.set_settings(subject, compatibility, normalize)

    def schema_delete_settings(self, subject: str | None) -> SchemaSettings:
        return self.schema_writes.delete_settings(subject)

    def schema_set_mode(self, subject: str | None, mode: str, force: bool = False) -> str:
        return self.schema_writes.set_mode(subject, mode, force)

    def schema_delete_mode(self, subject: str) -> str:
        return self.schema_writes.delete_mode(subject)
