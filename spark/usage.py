"""Spark executors' share of the object-store bill (metadata.usage): after each task, the
requests its store made are reported to metadata as role `reader`
(`report_reader_usage`), with the credentials the driver resolved (`UsageTarget`, carried by
the task). Best effort by design: a report takes at most `REPORT_TIMEOUT_S`, and a refused or
unreachable metadata service is logged at debug level and never fails the task (the option
`metadata.reportUsage=false` turns reporting off where executors cannot reach metadata).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from skiff.fileformat.objectstore import ObjectStore
from skiff.metadata.wire.credentials import MetadataCredentials
from skiff.metadata.wire.http_client import SyncHttpMetadataClient
from skiff.metadata.wire.usage_report import UsageBook, report_sync

log = logging.getLogger(__name__)

REPORT_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class UsageTarget:
    """Where an executor reports (pickled into each task)."""

    metadata_url: str
    credentials: MetadataCredentials


def report_task_usage(target: UsageTarget, store: ObjectStore) -> bool:
    """Report everything `store` was asked (a store opened for this task); False if the
    report failed (logged at debug level)."""
    book = UsageBook(store.stats.snapshot)
    client = SyncHttpMetadataClient(target.metadata_url, REPORT_TIMEOUT_S, credentials=target.credentials)
    try:
        return report_sync(book, client.report_reader_usage)
    finally:
        client.close()
