"""The bucket as the metadata service's HTTP side reads it (the console's message browser, the
Iceberg REST catalog's table metadata): opened on first use from the URL the service knows
(`skiff metadata --bucket`, or learned from agents), once per app, closed with it.
"""

from __future__ import annotations

import threading

from skiff.fileformat.objectstore import ObjectStore, open_store
from skiff.metadata.errors import INVALID_REQUEST, MetadataError
from skiff.metadata.service import MetadataService


class LazyBucket:
    def __init__(self, service: MetadataService) -> None:
        self.service = service
        self._store: ObjectStore | None = None
        self._lock = threading.Lock()

    def url(self) -> str:
        """The bucket URL; MetadataError if the service was not told it."""
        url = self.service.bucket_url()
        if url is None:
            raise MetadataError(
                INVALID_REQUEST,
                "this metadata service does not know the bucket (start it with --bucket) to read from",
            )
        return url

    def store(self) -> ObjectStore:
        url = self.url()
        with self._lock:
            if self._store is None:
                self._store = open_store(url)
            return self._store

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None
