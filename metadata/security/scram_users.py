"""SCRAM users: the stored credentials (table `scram_credentials`), one row per user and
mechanism, upserted, deleted and read in one transaction each.

The formats and the arithmetic are in `metadata.security.scram_types`; this module only stores.
Errors carry Kafka's codes, as AlterUserScramCredentials reports them: a credential that
cannot be stored (iterations out of Kafka's bounds, a salt or key of the wrong size) is
UNACCEPTABLE_CREDENTIAL, an unknown mechanism UNSUPPORTED_SASL_MECHANISM, deleting a
credential that does not exist RESOURCE_NOT_FOUND.
"""

from __future__ import annotations

from collections.abc import Sequence

from skiff.metadata.db import read_tx, write_tx
from skiff.metadata.errors import (
    RESOURCE_NOT_FOUND,
    UNACCEPTABLE_CREDENTIAL,
    UNSUPPORTED_SASL_MECHANISM,
    MetadataError,
)
from skiff.metadata.rows import Db, upsert
from skiff.metadata.schema import scram_credentials
from skiff.metadata.security.scram_types import (
    MECHANISM_CODES,
    ScramCredential,
    ScramCredentialInfo,
    check_credential,
    check_user_name,
)
from sqlalchemy import delete, select

# A describe of named users reads at most this many names (the rest of a hostile list is refused).
MAX_USERS_PER_DESCRIBE = 10_000


def check_mechanism(mechanism: str) -> None:
    if mechanism not in MECHANISM_CODES:
        raise MetadataError(
            UNSUPPORTED_SASL_MECHANISM,
            f"unsupported SCRAM mechanism {mechanism!r} (use {' or '.join(MECHANISM_CODES)})",
        )


class ScramUsers:
    def __init__(self, db: Db) -> None:
        self._db = db

    def upsert(self, cred: ScramCredential) -> None:
        check_mechanism(cred.mechanism)
        try:
            check_credential(cred)
        except ValueError as e:
            raise MetadataError(UNACCEPTABLE_CREDENTIAL, str(e)) from None
        values = {
            "salt": cred.salt,
            "iterations": cred.iterations,
            "stored_key": cred.stored_key,
            "server_key": cred.server_key,
            "updated_ms": self._db.clock(),
        }
        with write_tx(self._db.engine) as conn:
            upsert(
                conn,
                scram_credentials,
                ["user_name", "mechanism"],
                [{"user_name": cred.user, "mechanism": cred.mechanism, **values}],
            )

    def delete(self, user: str, mechanism: str) -> None:
        """Remove one credential; RESOURCE_NOT_FOUND if there is none."""
        check_mechanism(mechanism)
        c = scram_credentials.c
        with write_tx(self._db.engine) as conn:
            n = conn.execute(
                delete(scram_credentials).where(c.user_name == user, c.mechanism == mechanism)
            ).rowcount
        if not n:
            raise MetadataError(
                RESOURCE_NOT_FOUND,
                f"attempt to delete a user credential that does not exist: {user} {mechanism}",
            )

    def describe(self, users: Sequence[str] | None = None) -> list[ScramCredentialInfo]:
        """The credentials (mechanism and iterations, never keys) of `users`, or of every
        user when None; by user, then mechanism. Users without credentials are absent."""
        c = scram_credentials.c
        q = select(c.user_name, c.mechanism, c.iterations).order_by(c.user_name, c.mechanism)
        if users is not None:
            if len(users) > MAX_USERS_PER_DESCRIBE:
                raise MetadataError(42, f"at most {MAX_USERS_PER_DESCRIBE} users per describe")
            if not users:
                return []
            q = q.where(c.user_name.in_(list(users)))
        with read_tx(self._db.engine) as conn:
            rows = conn.execute(q).all()
        return [ScramCredentialInfo(r.user_name, r.mechanism, r.iterations) for r in rows]

    def credentials(self, user: str) -> list[ScramCredential]:
        """Every stored credential of one user (what an agent authenticates against)."""
        check_user_name_or_refuse(user)
        c = scram_credentials.c
        with read_tx(self._db.engine) as conn:
            rows = conn.execute(
                select(scram_credentials).where(c.user_name == user).order_by(c.mechanism)
            ).all()
        return [
            ScramCredential(
                r.user_name,
                r.mechanism,
                bytes(r.salt),
                r.iterations,
                bytes(r.stored_key),
                bytes(r.server_key),
            )
            for r in rows
        ]


def check_user_name_or_refuse(user: str) -> None:
    try:
        check_user_name(user)
    except ValueError as e:
        raise MetadataError(42, str(e)) from None
