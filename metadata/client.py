"""`open_metadata_client`: a `MetadataClient` from a URL, for the command line and tools.

`http(s)://...` gives the HTTP client (`metadata.http_client`); a database URL
(`sqlite:///...`, `postgresql://...`) gives an in-process client over a service of its
own (`metadata.local_client`). The in-process side is imported only when asked for, so
importing this module (or opening an HTTP client through it) loads no SQLAlchemy.
"""

from __future__ import annotations

from metadata.api_types import MetadataClient
from metadata.http_client import HttpMetadataClient


def open_metadata_client(url_or_db: str, *, timeout_s: float = 10.0) -> MetadataClient:
    """`http(s)://...` -> HttpMetadataClient; a database URL (sqlite:///..., postgresql://...)
    -> LocalMetadataClient over a MetadataService of its own (migrated; closed with the client)."""
    if url_or_db.startswith(("http://", "https://")):
        return HttpMetadataClient(url_or_db, timeout_s=timeout_s)
    from metadata.local_client import LocalMetadataClient  # the database side, only when asked for
    from metadata.service import MetadataService

    return LocalMetadataClient(MetadataService.from_url(url_or_db), owns_service=True)
