"""An agent names the bucket it writes to, so metadata knows the cluster's bucket without
being told (`skiff metadata` without `--bucket`: metadata.membership).

At start (`claim_bucket_at_start`, before serving) a refusal stops the agent: the cluster
writes elsewhere (configured, or learned from an earlier agent), and one cluster must not
write to two buckets. Then `BucketClaim` claims again every
`BUCKET_CLAIM_EVERY_HEARTBEATS` heartbeat intervals, so a metadata service restarted
without `--bucket` learns the bucket again within that time (one small call per agent:
at the default 3 s heartbeat, one every 30 s). A later refusal is logged, not fatal: the
agent's data is where it always was.
"""

from __future__ import annotations

import logging

from skiff.agent.periodic import Periodic
from skiff.metadata.errors import INVALID_CONFIG, MetadataError, MetadataUnavailable
from skiff.metadata.wire.operations import MetadataClient

log = logging.getLogger(__name__)

# The agent names its bucket to metadata at start and then every this many heartbeats, so
# a metadata service restarted without --bucket learns it again (metadata.membership).
BUCKET_CLAIM_EVERY_HEARTBEATS = 10


class BucketClaim:
    """A background task: claim this agent's bucket (`claim_bucket`) every
    `interval_ms`; a refusal is logged (another bucket was learned meanwhile)."""

    def __init__(self, metadata: MetadataClient, bucket_url: str, interval_ms: int) -> None:
        self._metadata = metadata
        self._bucket_url = bucket_url
        self._poller = Periodic("bucket-claim", lambda: interval_ms / 1000, self._claim, self._unexpected)

    def start(self) -> None:
        self._poller.start()

    async def _claim(self) -> None:
        try:
            await self._metadata.claim_bucket(self._bucket_url)
        except MetadataError as e:
            log.error("metadata refuses this agent's bucket: %s", e.message)
        except MetadataUnavailable:
            pass  # the heartbeat reports it; the next claim retries

    @staticmethod
    def _unexpected(e: Exception) -> None:
        log.warning("bucket claim failed: %s", e)

    async def close(self) -> None:
        await self._poller.close()


async def claim_bucket_at_start(metadata: MetadataClient, bucket_url: str) -> str | None:
    """Metadata's refusal of this agent's bucket (None: accepted, or metadata unreachable:
    the agent starts and the later claims retry)."""
    try:
        await metadata.claim_bucket(bucket_url)
    except MetadataError as e:
        if e.error_code == INVALID_CONFIG:
            return e.message
        raise
    except MetadataUnavailable:
        pass
    return None
