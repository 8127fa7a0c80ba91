"""Who the object store's bill belongs to, from the metadata database: the cluster's request
costs by role (from the usage reports of metadata.usage) and each topic's share of the
agents' PUTs and of storage. For the console and /metrics (metadata.server.metrics_queries).

Attribution rules:

- requests by role: what agents, compactors and Spark executors reported (metadata.usage),
  priced by fileformat.objectstore.pricing (write class: PUTs and LISTs; read class: GETs and
  HEADs; DELETEs free);
- a topic's PUTs: an agent's file (level 0) holds many partitions and costs one PUT, shared
  among the topics in it by their bytes in it: a topic with 1 MiB of the 4 MiB of chunks in
  a file owes a quarter of that PUT (of the chunk rows still there: a file some of whose
  chunks compaction has replaced shares its PUT among those left). Summed over the files committed in the window (files already
  compacted away and collected drop out, so an old window under heavy compaction reads low).
  Compactor PUTs and every GET are not attributed: one GET serves many topics;
- a topic's storage: the bytes of its chunk rows (what reads can still reach) at the storage
  price.

Per-topic lists are capped (`MAX_COST_TOPICS`, the most costly first).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from skiff.fileformat.objectstore.pricing import Prices
from skiff.metadata.schema import chunks, files, topics
from skiff.metadata.types import StoreUsage
from sqlalchemy import Connection, Float, cast, func, select

MAX_COST_TOPICS = 100
HOUR_MS = 3_600_000


def usage_usd(usage: StoreUsage, prices: Prices) -> float:
    """The request cost of one role's reported usage."""
    return (usage.puts + usage.lists) * prices.write_per_1000_usd / 1000 + (
        usage.gets + usage.heads
    ) * prices.read_per_1000_usd / 1000


@dataclass(frozen=True)
class TopicCost:
    topic: str
    written_bytes: int  # bytes of the topic in agents' files committed in the window
    put_share: float  # PUTs attributed (sum over files of the topic's fraction of the file)
    live_bytes: int
    put_usd_per_hour: float
    storage_usd_per_hour: float

    @property
    def usd_per_hour(self) -> float:
        return self.put_usd_per_hour + self.storage_usd_per_hour


def topic_costs(
    conn: Connection, now_ms: int, prices: Prices, window_ms: int = HOUR_MS, limit: int = MAX_COST_TOPICS
) -> list[TopicCost]:
    """Each topic's PUT share over the last `window_ms` and its storage, most costly first."""
    recent = (files.c.level == 0) & (files.c.committed_ms >= now_ms - window_ms)
    per_file = (
        select(chunks.c.file_id, func.sum(chunks.c.byte_length).label("file_bytes"))
        .select_from(chunks.join(files, files.c.id == chunks.c.file_id))
        .where(recent)
        .group_by(chunks.c.file_id)
        .subquery()
    )
    share = func.sum(cast(chunks.c.byte_length, Float) / func.nullif(per_file.c.file_bytes, 0))
    written = {
        r[0]: (int(r[1] or 0), float(r[2] or 0.0))
        for r in conn.execute(
            select(chunks.c.topic_id, func.sum(chunks.c.byte_length), share)
            .select_from(chunks.join(per_file, per_file.c.file_id == chunks.c.file_id))
            .group_by(chunks.c.topic_id)
        )
    }
    live = {
        r[0]: int(r[1] or 0)
        for r in conn.execute(
            select(chunks.c.topic_id, func.sum(chunks.c.byte_length)).group_by(chunks.c.topic_id)
        )
    }
    ids: set[uuid.UUID] = set(written) | set(live)
    names = {
        r[0]: r[1]
        for r in conn.execute(select(topics.c.topic_id, topics.c.name).where(topics.c.topic_id.in_(ids)))
    }
    per_hour = HOUR_MS / window_ms
    out = []
    for topic_id in ids:
        name = names.get(topic_id)
        if name is None:  # a deleted topic's chunks, on their way out
            continue
        wrote, put_share = written.get(topic_id, (0, 0.0))
        stored = live.get(topic_id, 0)
        out.append(
            TopicCost(
                topic=name,
                written_bytes=wrote,
                put_share=put_share,
                live_bytes=stored,
                put_usd_per_hour=put_share * per_hour * prices.write_per_1000_usd / 1000,
                storage_usd_per_hour=prices.storage_usd_per_hour(stored),
            )
        )
    out.sort(key=lambda c: (-c.usd_per_hour, c.topic))
    return out[: max(0, limit)]
