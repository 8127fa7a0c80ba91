"""What a client of the metadata service presents: a bearer token and TLS settings.

One set of settings for every client (agents, `skiff compact`, `skiff inspect`, the Spark
driver), each explicit value beating the environment:

| setting    | environment                      | meaning                                         |
|------------|----------------------------------|-------------------------------------------------|
| token      | `SKIFF_METADATA_TOKEN`           | the bearer token                                |
| token_file | `SKIFF_METADATA_TOKEN_FILE`      | a file holding it (a mounted Kubernetes Secret) |
| ca_file    | `SKIFF_METADATA_CA_FILE`         | PEM CA bundle that signed the service's cert    |
| cert_file  | `SKIFF_METADATA_CLIENT_CERT`     | client certificate (PEM), when mTLS is required |
| key_file   | `SKIFF_METADATA_CLIENT_KEY`      | its private key (PEM)                           |

A token and a token file at the same level is an error (which one would win is not
obvious); an explicit one of either replaces both environment variables. The token file
is read once, when the client is made; surrounding whitespace is ignored.

Imports the standard library only (the HTTP client imports it; see pyproject's contracts).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

ENV_TOKEN = "SKIFF_METADATA_TOKEN"
ENV_TOKEN_FILE = "SKIFF_METADATA_TOKEN_FILE"
ENV_CA_FILE = "SKIFF_METADATA_CA_FILE"
ENV_CLIENT_CERT = "SKIFF_METADATA_CLIENT_CERT"
ENV_CLIENT_KEY = "SKIFF_METADATA_CLIENT_KEY"

# A token file is a few dozen bytes; anything much larger is the wrong file.
MAX_TOKEN_FILE_BYTES = 4096


class CredentialsError(ValueError):
    """A credential setting is contradictory or unreadable; the message never holds a token."""


@dataclass(frozen=True)
class MetadataCredentials:
    token: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"} if self.token else {}

    def ssl_verify(self) -> ssl.SSLContext | bool:
        """httpx's `verify`: the system CAs unless a CA file or a client certificate is set."""
        if not (self.ca_file or self.cert_file):
            return True
        try:
            ctx = ssl.create_default_context(cafile=self.ca_file)
            if self.cert_file:
                ctx.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as e:
            raise CredentialsError(f"cannot load the metadata TLS files: {e}") from None
        return ctx


def read_token_file(path: str) -> str:
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_TOKEN_FILE_BYTES + 1)
    except OSError as e:
        raise CredentialsError(f"cannot read the metadata token file {path}: {e.strerror or e}") from None
    if len(raw) > MAX_TOKEN_FILE_BYTES:
        raise CredentialsError(f"the metadata token file {path} is over {MAX_TOKEN_FILE_BYTES} bytes")
    try:
        token = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        raise CredentialsError(f"the metadata token file {path} is not ASCII text") from None
    if not token or any(c.isspace() for c in token):
        raise CredentialsError(f"the metadata token file {path} must hold one token (no spaces)")
    return token


def resolve_credentials(
    *,
    token: str | None = None,
    token_file: str | None = None,
    ca_file: str | None = None,
    cert_file: str | None = None,
    key_file: str | None = None,
    env: Mapping[str, str] | None = None,
) -> MetadataCredentials:
    """Explicit values, then `SKIFF_METADATA_*` from `env` (default `os.environ`)."""
    env = os.environ if env is None else env
    token, token_file = token or None, token_file or None
    if token and token_file:
        raise CredentialsError("give a metadata token or a token file, not both")
    if not (token or token_file):
        token, token_file = env.get(ENV_TOKEN) or None, env.get(ENV_TOKEN_FILE) or None
        if token and token_file:
            raise CredentialsError(f"set one of {ENV_TOKEN} and {ENV_TOKEN_FILE}, not both")
    if token_file:
        token = read_token_file(token_file)
    if token is not None and (not token.strip() or any(c.isspace() for c in token.strip())):
        raise CredentialsError("the metadata token must not be blank or contain spaces")
    cert_file = cert_file or env.get(ENV_CLIENT_CERT) or None
    key_file = key_file or env.get(ENV_CLIENT_KEY) or None
    if key_file and not cert_file:
        raise CredentialsError(f"a client key needs a client certificate ({ENV_CLIENT_CERT})")
    return MetadataCredentials(
        token=token.strip() if token else None,
        ca_file=ca_file or env.get(ENV_CA_FILE) or None,
        cert_file=cert_file,
        key_file=key_file,
    )
