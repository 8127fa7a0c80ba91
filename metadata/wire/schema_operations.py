"""The schema registry's operations (metadata.schemas), declared as every metadata operation
is (`metadata.wire.codec.operation`; `metadata.wire.operations` joins them into the callers'
roles): reads for every role (agents validate produced records, Spark decodes them), register
for the `writer` role, deletes and settings for admin.

The metadata service also answers Confluent Schema Registry's REST API over the same methods
(`metadata.server.registry_api`), so Confluent's clients use its URL as a registry URL; these
`/v1/schemas/...` routes are Skiff's own clients' typed view. Errors carry Confluent's codes
(`metadata.schemas.errors.RegistryError`).
"""

from __future__ import annotations

from typing import Protocol

from skiff.metadata.schemas.types import (
    RegisteredSchema,
    SchemaId,
    SchemaSettings,
    SchemaSpec,
    StoredSchema,
    Subject,
    Version,
)
from skiff.metadata.wire.bounds import ShortName
from skiff.metadata.wire.codec import operation
from skiff.metadata.wire.roles import ADMIN, READ, WRITER

SCHEMA_READ = (*READ, WRITER)


class SchemaLookups(Protocol):
    """What agents (validation) and readers (Spark decoding) ask of the registry."""

    @operation("/v1/schemas/by-id", *SCHEMA_READ)
    async def schema_by_id(self, schema_id: SchemaId, fmt: ShortName | None = None) -> StoredSchema:
        """The schema with this global id (40403 when no version holds it); `fmt` asks for
        another form (PROTOBUF `serialized`: a base64 FileDescriptorProto)."""
        ...

    @operation("/v1/schemas/version", *SCHEMA_READ)
    async def schema_version(
        self, subject: Subject, version: Version, deleted: bool = False
    ) -> RegisteredSchema:
        """One version (-1: the latest live one); 40401 / 40402 when absent."""
        ...

    @operation("/v1/schemas/subject-ids", *SCHEMA_READ)
    async def schema_subject_ids(self, subject: Subject, deleted: bool = False) -> list[int]:
        """The schema ids of the subject's live versions (broker-side validation admits these),
        with `deleted` also of its soft-deleted ones (readers: data written with a version
        soft-deleted since still decodes)."""
        ...


class SchemaBrowsing(Protocol):
    """The rest of the registry's reads (operators, the `skiff schemas` command)."""

    @operation("/v1/schemas/subjects-by-id", *SCHEMA_READ)
    async def schema_subjects_by_id(self, schema_id: SchemaId, deleted: bool = False) -> list[str]: ...

    @operation("/v1/schemas/versions-by-id", *SCHEMA_READ)
    async def schema_versions_by_id(
        self, schema_id: SchemaId, deleted: bool = False
    ) -> list[tuple[str, int]]:
        """(subject, version) pairs holding the schema."""
        ...

    @operation("/v1/schemas/subjects", *SCHEMA_READ)
    async def schema_subjects(
        self, prefix: ShortName = "", deleted: bool = False, deleted_only: bool = False
    ) -> list[str]: ...

    @operation("/v1/schemas/versions", *SCHEMA_READ)
    async def schema_versions(
        self, subject: Subject, deleted: bool = False, deleted_only: bool = False
    ) -> list[int]:
        """The subject's version numbers (40401 when it has none)."""
        ...

    @operation("/v1/schemas/lookup", *SCHEMA_READ)
    async def schema_lookup(
        self, subject: Subject, spec: SchemaSpec, normalize: bool = False, deleted: bool = False
    ) -> RegisteredSchema:
        """The subject's version holding this schema (40403 when none does)."""
        ...

    @operation("/v1/schemas/referenced-by", *SCHEMA_READ)
    async def schema_referenced_by(self, subject: Subject, version: Version) -> list[int]: ...

    @operation("/v1/schemas/check", *SCHEMA_READ)
    async def schema_check(
        self, subject: Subject, spec: SchemaSpec, version: Version | None = None, normalize: bool = False
    ) -> list[str]:
        """Why `spec` may not be registered under the subject by its compatibility level
        (against `version` only when given): [] when it may."""
        ...

    @operation("/v1/schemas/settings", *SCHEMA_READ)
    async def schema_settings(
        self, subject: Subject | None = None, default_to_global: bool = False
    ) -> SchemaSettings: ...

    @operation("/v1/schemas/mode", *SCHEMA_READ)
    async def schema_mode(self, subject: Subject | None = None, default_to_global: bool = False) -> str: ...


class SchemaWrites(Protocol):
    @operation("/v1/schemas/register", WRITER)
    async def schema_register(
        self,
        subject: Subject,
        spec: SchemaSpec,
        normalize: bool = False,
        schema_id: SchemaId | None = None,
        version: Version | None = None,
    ) -> RegisteredSchema:
        """Register `spec` as the subject's next version (or answer the version holding it);
        409 when incompatible; an explicit id and version only in IMPORT mode."""
        ...


class SchemaAdmin(Protocol):
    @operation("/v1/schemas/delete-subject", ADMIN)
    async def schema_delete_subject(self, subject: Subject, permanent: bool = False) -> list[int]: ...

    @operation("/v1/schemas/delete-version", ADMIN)
    async def schema_delete_version(
        self, subject: Subject, version: Version, permanent: bool = False
    ) -> int: ...

    @operation("/v1/schemas/set-settings", ADMIN)
    async def schema_set_settings(
        self, subject: Subject | None, compatibility: ShortName | None, normalize: bool | None = None
    ) -> SchemaSettings: ...

    @operation("/v1/schemas/delete-settings", ADMIN)
    async def schema_delete_settings(self, subject: Subject | None) -> SchemaSettings: ...

    @operation("/v1/schemas/set-mode", ADMIN)
    async def schema_set_mode(self, subject: Subject | None, mode: ShortName, force: bool = False) -> str: ...

    @operation("/v1/schemas/delete-mode", ADMIN)
    async def schema_delete_mode(self, subject: Subject) -> str: ...
