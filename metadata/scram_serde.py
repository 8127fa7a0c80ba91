"""The HTTP/JSON form of SCRAM credentials (metadata.scram_types), shared by the routes in
`metadata.app` and `metadata.http_client`. Salts and keys travel as base64."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator
from skiff.metadata.scram_types import MAX_SALT_BYTES, ScramCredential, ScramCredentialInfo

UserName = Annotated[str, Field(min_length=1, max_length=255)]
Mechanism = Annotated[str, Field(min_length=1, max_length=32)]


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScramCredentialM(_M):
    user: UserName
    mechanism: Mechanism
    # base64
    salt: Annotated[str, Field(max_length=2 * MAX_SALT_BYTES)]
    iterations: Annotated[int, Field(ge=0, le=2**31 - 1)]
    stored_key: Annotated[str, Field(max_length=256)]
    server_key: Annotated[str, Field(max_length=256)]

    @field_validator("salt", "stored_key", "server_key")
    @classmethod
    def _base64(cls, v: str) -> str:
        try:
            base64.b64decode(v, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("not base64") from None
        return v

    @classmethod
    def of(cls, c: ScramCredential) -> ScramCredentialM:
        def b64(b: bytes) -> str:
            return base64.b64encode(b).decode("ascii")

        return cls.model_construct(
            user=c.user,
            mechanism=c.mechanism,
            salt=b64(c.salt),
            iterations=c.iterations,
            stored_key=b64(c.stored_key),
            server_key=b64(c.server_key),
        )

    def to_credential(self) -> ScramCredential:
        return ScramCredential(
            self.user,
            self.mechanism,
            base64.b64decode(self.salt),
            self.iterations,
            base64.b64decode(self.stored_key),
            base64.b64decode(self.server_key),
        )


class ScramCredentialInfoM(_M):
    user: UserName
    mechanism: Mechanism
    iterations: int

    def to_info(self) -> ScramCredentialInfo:
        return ScramCredentialInfo(self.user, self.mechanism, self.iterations)


class DeleteScramCredentialRequest(_M):
    user: UserName
    mechanism: Mechanism


class DescribeScramUsersRequest(_M):
    users: Annotated[list[UserName], Field(max_length=10_000)] | None = None


class ScramCredentialsRequest(_M):
    user: UserName
