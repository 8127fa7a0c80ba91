"""`open_metadata_client` (async) and `open_sync_metadata_client` (blocking): a metadata
client from a URL, for the command line and tools.

`http(s)://...` gives the HTTP client (`metadata.wire.http_client`); a database URL
(`sqlite:///...`, `postgresql://...`) gives an in-process client over a service of its
own (`metadata.server.local_client`). HTTP clients present the credentials of
`metadata.wire.credentials` (token, CA file, client certificate): explicit arguments, else the
`SKIFF_METADATA_TOKEN` / `SKIFF_METADATA_TOKEN_FILE` / `SKIFF_METADATA_CA_FILE` /
`SKIFF_METADATA_CLIENT_CERT` / `SKIFF_METADATA_CLIENT_KEY` variables, so every command
that takes a metadata URL passes the token from one setting. The in-process side is imported only when asked for, so
importing this module (or opening an HTTP client through it) loads no SQLAlchemy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from skiff.metadata.wire.credentials import resolve_credentials
from skiff.metadata.wire.http_client import HttpMetadataClient, SyncHttpMetadataClient
from skiff.metadata.wire.operations import MetadataClient


def open_metadata_client(url_or_db: str, *, timeout_s: float = 10.0, **creds: Any) -> MetadataClient:
    """`http(s)://...` -> HttpMetadataClient with the credentials given (`token`,
    `token_file`, `ca_file`, `cert_file`, `key_file`), else those of the environment (`env`,
    default os.environ); a database URL (sqlite:///..., postgresql://...) -> LocalMetadataClient
    over a MetadataService of its own (migrated; closed with the client)."""
    return cast(MetadataClient, _open(url_or_db, timeout_s, creds, blocking=False))


def open_sync_metadata_client(url_or_db: str, *, timeout_s: float = 10.0, **creds: Any) -> Any:
    """As `open_metadata_client`, blocking: `SyncHttpMetadataClient` or
    `SyncLocalMetadataClient` (every operation of `metadata.wire.operations`, without `await`),
    for code without an event loop (the command line, Spark's driver, compactor jobs)."""
    return _open(url_or_db, timeout_s, creds, blocking=True)


def _open(url_or_db: str, timeout_s: float, creds: Mapping[str, Any], *, blocking: bool) -> Any:
    if url_or_db.startswith(("http://", "https://")):
        credentials = resolve_credentials(**creds)
        http = SyncHttpMetadataClient if blocking else HttpMetadataClient
        return http(url_or_db, timeout_s=timeout_s, credentials=credentials)
    # The database side, imported only when asked for.
    from skiff.metadata.server.local_client import LocalMetadataClient, SyncLocalMetadataClient
    from skiff.metadata.service import MetadataService

    local = SyncLocalMetadataClient if blocking else LocalMetadataClient
    return local(MetadataService.from_url(url_or_db), owns_service=True)
