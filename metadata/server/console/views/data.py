"""View models of the console's pages: service answers in, rows and charts out (pure).

Nothing here does I/O: the routes (metadata.server.console.routes) gather the service's
answers and the console's queries, and these functions shape them for the templates.

- overview: agents, the committed-files series as throughput and files-per-second charts
  (the object-store bill is views.cost's, from the usage the processes report).
- topics and partitions: bytes and chunk rows from the chunk table, offsets from
  `partition_states`, configs with their defaults (`metadata.configs.effective_configs`),
  compaction state (cleaner checkpoint, lease) per partition.
- consumer groups: the stored generation (members, assignments) as `skiff groups describe`
  reads it, committed offsets, log end offsets and lag per partition.
"""

from __future__ import annotations

import base64
import json
import struct
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from skiff.metadata.compaction.types import CompactionCandidate
from skiff.metadata.configs import effective_configs, is_compacted
from skiff.metadata.server.console.queries import CompactionRow, FileBucket, Size
from skiff.metadata.server.console.views.charts import Point, bar_chart
from skiff.metadata.server.console.views.formats import fmt_clock
from skiff.metadata.types import AgentInfo, GroupOffset, PartitionState, StoredGroup, Topic

# ------------------------------------------------------------------------------ paging


@dataclass(frozen=True)
class Paging:
    """One page of a list: `offset` and `limit` of `total` rows."""

    offset: int
    limit: int
    total: int

    @property
    def prev_offset(self) -> int | None:
        return None if self.offset <= 0 else max(0, self.offset - self.limit)

    @property
    def next_offset(self) -> int | None:
        return self.offset + self.limit if self.offset + self.limit < self.total else None

    @property
    def last_shown(self) -> int:
        return min(self.offset + self.limit, self.total)


def page_of(items: Sequence[Any], offset: int, limit: int) -> tuple[list[Any], Paging]:
    offset = max(0, min(offset, max(len(items) - 1, 0)))
    return list(items[offset : offset + limit]), Paging(offset, limit, len(items))


# ------------------------------------------------------------------------------ overview


@dataclass(frozen=True)
class AgentRow:
    agent_id: str
    zone: str
    rack: str
    address: str
    listeners: str
    ready: bool
    version: str
    heartbeat_age_ms: int


def agent_rows(agents: Sequence[AgentInfo], now_ms: int) -> list[AgentRow]:
    """Rack is not reported by agents' heartbeats, nor the version by agents from before
    versions (metadata.build_info): shown as '-'."""
    return [
        AgentRow(
            agent_id=a.agent_id,
            zone=a.zone or "-",
            rack="-",
            address=f"{a.host}:{a.port}",
            listeners=", ".join(f"{n} {h}:{p}" for n, h, p in a.listeners) or "-",
            ready=a.ready,
            version=a.version or "-",
            heartbeat_age_ms=max(0, now_ms - a.last_heartbeat_ms),
        )
        for a in agents
    ]


@dataclass(frozen=True)
class Throughput:
    """The committed-files series of the overview, summed and charted."""

    window_ms: int
    files: int
    level0_bytes: int
    compacted_files: int
    compacted_bytes: int
    bytes_chart: str
    files_chart: str

    @property
    def bytes_per_s(self) -> float:
        return self.level0_bytes * 1000 / self.window_ms

    @property
    def files_per_s(self) -> float:
        return self.files * 1000 / self.window_ms


def throughput(series: Sequence[FileBucket], bucket_ms: int) -> Throughput:
    """Sums and two charts (agents' bytes per second; files per second) of the series."""
    per_s = 1000 / bucket_ms
    bytes_pts = [Point(fmt_clock(b.start_ms), b.level0_bytes * per_s) for b in series]
    files_pts = [Point(fmt_clock(b.start_ms), b.level0_files * per_s) for b in series]
    return Throughput(
        window_ms=max(len(series), 1) * bucket_ms,
        files=sum(b.level0_files for b in series),
        level0_bytes=sum(b.level0_bytes for b in series),
        compacted_files=sum(b.compacted_files for b in series),
        compacted_bytes=sum(b.compacted_bytes for b in series),
        bytes_chart=bar_chart(bytes_pts, title="bytes written by agents per second", unit="B/s"),
        files_chart=bar_chart(files_pts, title="files committed by agents per second", unit="files/s"),
    )


# ------------------------------------------------------------------------------ topics


@dataclass(frozen=True)
class TopicRow:
    name: str
    partitions: int
    policy: str
    bytes: int
    chunks: int
    records: int  # sum over partitions of high watermark - log start (holes included)
    high_watermark_sum: int


def topic_rows(
    topics: Sequence[Topic], sizes: Mapping[uuid.UUID, Size], states: Mapping[str, Sequence[PartitionState]]
) -> list[TopicRow]:
    out = []
    for t in sorted(topics, key=lambda t: t.name):
        size = sizes.get(t.topic_id, Size())
        st = [s for s in states.get(t.name, ()) if not s.error_code]
        out.append(
            TopicRow(
                name=t.name,
                partitions=t.partition_count,
                policy=effective_configs(t.configs)["cleanup.policy"][0],
                bytes=size.bytes,
                chunks=size.chunks,
                records=sum(s.high_watermark - s.log_start_offset for s in st),
                high_watermark_sum=sum(s.high_watermark for s in st),
            )
        )
    return out


@dataclass(frozen=True)
class PartitionRow:
    partition: int
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    bytes: int
    chunks: int
    first_dirty_offset: int | None
    lease_holder: str | None

    @property
    def records(self) -> int:
        return max(self.high_watermark - self.log_start_offset, 0)

    @property
    def dirty_offsets(self) -> int | None:
        """Offsets not yet cleaned (compacted topics with a checkpoint)."""
        if self.first_dirty_offset is None:
            return None
        return max(self.high_watermark - max(self.first_dirty_offset, self.log_start_offset), 0)


def partition_rows(
    states: Sequence[PartitionState],
    sizes: Mapping[int, Size],
    compaction: Sequence[CompactionRow],
    now_ms: int,
) -> list[PartitionRow]:
    """One row per partition (`states[i]` is partition i); a lease counts while unexpired."""
    by_p = {r.partition: r for r in compaction}
    out = []
    for p, s in enumerate(states):
        c = by_p.get(p)
        leased = c is not None and c.lease_expires_ms is not None and c.lease_expires_ms >= now_ms
        size = sizes.get(p, Size())
        out.append(
            PartitionRow(
                partition=p,
                log_start_offset=s.log_start_offset,
                high_watermark=s.high_watermark,
                last_stable_offset=s.last_stable_offset,
                bytes=size.bytes,
                chunks=size.chunks,
                first_dirty_offset=None if c is None else c.first_dirty_offset,
                lease_holder=c.lease_holder if leased and c is not None else None,
            )
        )
    return out


@dataclass(frozen=True)
class ConfigRow:
    name: str
    value: str
    is_default: bool


def config_rows(topic: Topic) -> list[ConfigRow]:
    """Every known topic config: the topic's own first, then the defaults, by name."""
    rows = [ConfigRow(n, v, d) for n, (v, d) in effective_configs(topic.configs).items()]
    return sorted(rows, key=lambda r: (r.is_default, r.name))


def topic_is_compacted(topic: Topic) -> bool:
    return is_compacted(topic.configs)


# ------------------------------------------------------------------------------ groups


@dataclass
class MemberRow:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    assignment: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class GroupState:
    """What a group's stored generation says (the JSON `agent.groups.persistence` writes)."""

    group_id: str
    state: str
    coordinator: str | None
    protocol: str | None = None
    generation: int | None = None
    members: list[MemberRow] = field(default_factory=list)


def assignment_partitions(data: bytes) -> list[tuple[str, int]]:
    """The (topic, partition)s of a ConsumerProtocolAssignment (`version: int16, [topic:
    string, [partition: int32]], user_data`); [] if it does not parse. The command line's
    `skiff groups` reads it the same way (cli.groups, which metadata may not import)."""
    try:
        version, count = struct.unpack_from(">hi", data, 0)
        if version < 0:
            return []
        pos, out = 6, list[tuple[str, int]]()
        for _ in range(max(count, 0)):
            (size,) = struct.unpack_from(">h", data, pos)
            topic = data[pos + 2 : pos + 2 + size].decode()
            pos += 2 + size
            (n,) = struct.unpack_from(">i", data, pos)
            out.extend((topic, int(p)) for p in struct.unpack_from(f">{max(n, 0)}i", data, pos + 4))
            pos += 4 + 4 * max(n, 0)
        return sorted(out)
    except (struct.error, UnicodeDecodeError, ValueError):
        return []


def group_state(stored: StoredGroup) -> GroupState:
    """State as `skiff groups` names it: Stable (members, assignment given),
    CompletingRebalance (members, no assignment yet), Empty (no active members)."""
    state: dict[str, Any] = {}
    if stored.group_state:
        try:
            loaded = json.loads(stored.group_state)
            state = loaded if isinstance(loaded, dict) else {}
        except ValueError:
            state = {}
    members = []
    for m in (state.get("members") or []) if stored.active else []:
        raw = m.get("assignment") or ""
        members.append(
            MemberRow(
                member_id=str(m.get("id", "")),
                instance_id=m.get("instance"),
                client_id=str(m.get("client_id", "")),
                host=str(m.get("client_host", "")),
                assignment=assignment_partitions(base64.b64decode(raw)) if raw else [],
            )
        )
    name = "Empty" if not members else ("Stable" if state.get("assigned") else "CompletingRebalance")
    return GroupState(
        stored.group_id, name, stored.coordinator, state.get("protocol"), state.get("generation"), members
    )


@dataclass(frozen=True)
class OffsetRow:
    topic: str
    partition: int
    committed: int
    log_start: int
    log_end: int
    member_id: str | None

    @property
    def lag(self) -> int:
        """Kafka's lag: log end - committed (the log end when the committed offset is below 0)."""
        if self.log_end < 0:
            return 0
        return max(self.log_end - max(self.committed, 0), 0)


def offset_rows(
    offsets: Sequence[GroupOffset],
    ends: Mapping[tuple[str, int], tuple[int, int]],
    members: Sequence[MemberRow],
) -> list[OffsetRow]:
    """Committed offsets with their partition's log start and end, and the member assigned it."""
    owner = {tp: m.member_id for m in members for tp in m.assignment}
    rows = []
    for o in sorted(offsets, key=lambda o: (o.topic, o.partition)):
        start, end = ends.get((o.topic, o.partition), (-1, -1))
        rows.append(OffsetRow(o.topic, o.partition, o.offset, start, end, owner.get((o.topic, o.partition))))
    return rows


@dataclass(frozen=True)
class GroupRow:
    group_id: str
    state: str
    coordinator: str | None
    members: int
    partitions: int
    lag: int


def group_row(g: GroupState, offsets: Sequence[OffsetRow]) -> GroupRow:
    return GroupRow(
        g.group_id, g.state, g.coordinator, len(g.members), len(offsets), sum(o.lag for o in offsets)
    )


# ------------------------------------------------------------------------------ compaction


@dataclass(frozen=True)
class CandidateRow:
    topic: str
    partition: int
    kind: str  # clean (compacted topic) | merge (delete-policy topic)
    dirty_ratio: float
    cleanable_bytes: int
    chunks: int
    forced: bool
    reason: str


def candidate_rows(candidates: Sequence[CompactionCandidate]) -> list[CandidateRow]:
    return [
        CandidateRow(
            c.topic_name,
            c.partition,
            "clean" if c.compact else "merge",
            c.dirty_ratio,
            c.cleanable_bytes,
            len(c.chunks),
            c.forced,
            c.reason,
        )
        for c in candidates
    ]


@dataclass(frozen=True)
class LeaseRow:
    topic: str
    partition: int
    holder: str
    expires_in_ms: int
    first_dirty_offset: int | None


def lease_rows(rows: Sequence[CompactionRow], names: Mapping[uuid.UUID, str], now_ms: int) -> list[LeaseRow]:
    """The unexpired compaction leases: the jobs running now."""
    return [
        LeaseRow(
            names.get(r.topic_id, str(r.topic_id)),
            r.partition,
            r.lease_holder or "",
            r.lease_expires_ms - now_ms,
            r.first_dirty_offset,
        )
        for r in rows
        if r.lease_expires_ms is not None and r.lease_expires_ms >= now_ms
    ]


def lag_chart(samples: Sequence[tuple[int, int]]) -> str:
    """The SVG chart of a group's total lag over the samples metadata keeps (metadata.server.lag_sampler)."""
    points = [Point(time.strftime("%H:%M:%S", time.gmtime(ms / 1000)), float(lag)) for ms, lag in samples]
    return bar_chart(points, title="total lag (records), sampled while the console is viewed", unit="records")
