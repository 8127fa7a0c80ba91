"""The console's pages (GET, `reader` role and up): overview, topics, a topic, its
messages, consumer groups, a group, compaction and retention.

Each page gathers the service's answers (in this process: the same `MetadataService`
methods the API serves) and the console's queries (`console.queries`), shapes them with
`views.data` and renders a template. Every list is bounded: pages of `PAGE_ROWS` rows
(`?offset=`), at most `MAX_PARTITIONS_SHOWN` partitions of a topic and `MAX_OFFSETS_SHOWN`
committed offsets of a group, `MAX_CANDIDATES` compaction candidates, `MAX_GC_ROWS` files
of the GC queue. The routes are blocking functions (FastAPI runs them in its thread pool),
as the service is. The login page, the stylesheet and the admin actions are in
`console.login` and `console.actions`.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from skiff.metadata import configs
from skiff.metadata.db import read_tx
from skiff.metadata.errors import UNKNOWN_TOPIC_OR_PARTITION, MetadataError
from skiff.metadata.server.auth import allow
from skiff.metadata.server.console import browser, queries
from skiff.metadata.server.console.context import ConsoleContext
from skiff.metadata.server.console.views import cost, data, formats
from skiff.metadata.server.cost_queries import topic_costs
from skiff.metadata.types import GroupOffset, PartitionKey, PartitionState, StoredGroup, Topic
from skiff.metadata.wire.roles import READER

PAGE_ROWS = 100
MAX_PARTITIONS_SHOWN = 1000
MAX_OFFSETS_SHOWN = 1000
MAX_CANDIDATES = 200
MAX_GC_ROWS = 100
MAX_LEASE_ROWS = 200
OVERVIEW_WINDOW_MS = 3_600_000
OVERVIEW_BUCKET_MS = 60_000
LAG_CHART_WINDOW_MS = 3_600_000  # the group page charts its lag over the last hour


def _int_arg(request: Request, name: str, default: int, lo: int = 0, hi: int = 1 << 62) -> int:
    try:
        return max(lo, min(int(request.query_params.get(name, default)), hi))
    except ValueError:
        return default


def refresh_seconds(request: Request) -> int | None:
    """`?refresh=N`: the page reloads itself every N seconds (5 to 300; a meta refresh, no script)."""
    n = _int_arg(request, "refresh", 0, 0, 300)
    return max(n, 5) if n else None


def topic_states(ctx: ConsoleContext, topics: Sequence[Topic], cap: int) -> dict[str, list[PartitionState]]:
    """Each topic's partition states, its first `cap` partitions, in one call."""
    keys = [PartitionKey(t.topic_id, p) for t in topics for p in range(min(t.partition_count, cap))]
    states = ctx.service.partition_states(keys) if keys else []
    out: dict[str, list[PartitionState]] = {t.name: [] for t in topics}
    names = {t.topic_id: t.name for t in topics}
    for k, s in zip(keys, states, strict=True):
        out[names[k.topic_id]].append(s)
    return out


def pages_router(ctx: ConsoleContext) -> APIRouter:
    router = APIRouter(dependencies=[allow(READER)], include_in_schema=False)

    @router.get("/console", response_class=HTMLResponse)
    def overview(request: Request) -> HTMLResponse:
        return ctx.page(request, lambda: _overview(ctx, request))

    @router.get("/console/topics", response_class=HTMLResponse)
    def topics(request: Request) -> HTMLResponse:
        return ctx.page(request, lambda: _topics(ctx, request))

    @router.get("/console/topics/{name}", response_class=HTMLResponse)
    def topic(request: Request, name: str) -> HTMLResponse:
        return ctx.page(request, lambda: _topic(ctx, request, name), back="/console/topics")

    @router.get("/console/topics/{name}/messages", response_class=HTMLResponse)
    def messages(request: Request, name: str) -> HTMLResponse:
        return ctx.page(request, lambda: _messages(ctx, request, name), back="/console/topics")

    @router.get("/console/groups", response_class=HTMLResponse)
    def groups(request: Request) -> HTMLResponse:
        return ctx.page(request, lambda: _groups(ctx, request))

    @router.get("/console/group", response_class=HTMLResponse)
    def group(request: Request) -> HTMLResponse:
        return ctx.page(request, lambda: _group(ctx, request), back="/console/groups")

    @router.get("/console/compaction", response_class=HTMLResponse)
    def compaction(request: Request) -> HTMLResponse:
        return ctx.page(request, lambda: _compaction(ctx, request))

    return router


def _overview(ctx: ConsoleContext, request: Request) -> HTMLResponse:
    ctx.sample_lag()
    now = ctx.now_ms()
    engine = ctx.service.engine
    series = queries.committed_files_series(engine, now, OVERVIEW_WINDOW_MS, OVERVIEW_BUCKET_MS)
    t = data.throughput(series, OVERVIEW_BUCKET_MS)
    totals = queries.file_totals(engine)
    usage_since = now - OVERVIEW_WINDOW_MS
    bill = cost.bill_view(
        ctx.service.usage.usage_totals(usage_since),
        ctx.service.usage.usage_series(now, OVERVIEW_WINDOW_MS, OVERVIEW_BUCKET_MS),
        OVERVIEW_BUCKET_MS,
        OVERVIEW_WINDOW_MS,
        totals.live_bytes,
        ctx.prices,
    )
    return ctx.render(
        request,
        "overview.html",
        title="Overview",
        nav="Overview",
        agents=data.agent_rows(ctx.service.live_agents(), now),
        t=t,
        totals=totals,
        bill=bill,
        refresh_s=refresh_seconds(request),
    )


def _topics(ctx: ConsoleContext, request: Request) -> HTMLResponse:
    listed = sorted(ctx.service.list_topics(), key=lambda t: t.name)
    shown, paging = data.page_of(listed, _int_arg(request, "offset", 0), PAGE_ROWS)
    rows = data.topic_rows(
        shown, queries.topic_sizes(ctx.service.engine), topic_states(ctx, shown, MAX_PARTITIONS_SHOWN)
    )
    with read_tx(ctx.service.engine) as conn:
        costs = {c.topic: c for c in topic_costs(conn, ctx.now_ms(), ctx.prices)}
    return ctx.render(
        request, "topics.html", title="Topics", nav="Topics", rows=rows, paging=paging, costs=costs
    )


def lookup_topic(ctx: ConsoleContext, name: str) -> Topic:
    found = ctx.service.describe_topics([name]).get(name)
    if found is None:
        raise MetadataError(UNKNOWN_TOPIC_OR_PARTITION, f"no topic named {name!r}")
    return found


def _topic(ctx: ConsoleContext, request: Request, name: str) -> HTMLResponse:
    topic = lookup_topic(ctx, name)
    now = ctx.now_ms()
    engine = ctx.service.engine
    states = topic_states(ctx, [topic], MAX_PARTITIONS_SHOWN)[topic.name]
    compaction = queries.compaction_rows(engine, topic_id=topic.topic_id, limit=MAX_PARTITIONS_SHOWN)
    partitions = data.partition_rows(states, queries.partition_sizes(engine, topic.topic_id), compaction, now)
    offset = _int_arg(request, "offset", 0)
    files, total = queries.topic_files(engine, topic.topic_id, limit=PAGE_ROWS, offset=offset)
    table = ctx.tables.state(topic, now) if configs.table_enabled(topic.configs) else None
    return ctx.render(
        request,
        "topic.html",
        title=f"Topic {topic.name}",
        table=table,
        nav="Topics",
        topic=topic,
        compacted=data.topic_is_compacted(topic),
        partitions=partitions,
        partitions_capped=topic.partition_count > len(partitions),
        files=files,
        files_paging=data.Paging(offset, PAGE_ROWS, total),
        configs=data.config_rows(topic),
    )


def _browse_query(request: Request, topic: Topic) -> dict[str, object]:
    mode = request.query_params.get("mode", "last")
    form = request.query_params.get("format", "text")
    return {
        "partition": _int_arg(request, "partition", 0, 0, max(topic.partition_count - 1, 0)),
        "mode": mode if mode in ("last", "offset", "timestamp") else "last",
        "at": request.query_params.get("at", "")[:64],
        "limit": _int_arg(request, "limit", 20, 1, browser.MAX_RECORDS),
        "format": form if form in formats.RECORD_FORMATS else "text",
    }


def _start(q: dict[str, object]) -> browser.Start:
    """Where to read from; ValueError for an offset or a time that does not parse."""
    at, limit = str(q["at"]).strip(), int(str(q["limit"]))
    if q["mode"] == "offset":
        return browser.Start("offset", int(at or "0"))
    if q["mode"] == "timestamp":
        return browser.Start("timestamp", formats.parse_time_ms(at))
    return browser.Start("last", limit)


def _messages(ctx: ConsoleContext, request: Request, name: str) -> HTMLResponse:
    topic = lookup_topic(ctx, name)
    q = _browse_query(request, topic)
    page, rows, error = None, [], ""
    try:
        start = _start(q)
    except ValueError as e:
        error = f"cannot read from {q['at']!r}: {e}"
    else:
        page = browser.read_records(
            ctx.service, ctx.store(), topic, int(str(q["partition"])), start, limit=int(str(q["limit"]))
        )
        rows = [_record_row(r, str(q["format"])) for r in page.records]
    return ctx.render(
        request,
        "messages.html",
        title=f"Messages of {topic.name}",
        nav="Topics",
        topic=topic,
        q=q,
        page=page,
        records=rows,
        error=error,
        formats=formats.RECORD_FORMATS,
        max_records=browser.MAX_RECORDS,
    )


def _record_row(r: browser.BrowsedRecord, form: str) -> dict[str, object]:
    key, key_note = formats.show_bytes(r.key, form)
    value, value_note = formats.show_bytes(r.value, form)
    headers = [(k, formats.show_bytes(v, "text")[0]) for k, v in r.headers[:32]]
    return {
        "offset": r.offset,
        "time": formats.fmt_time(r.timestamp_ms),
        "key": key,
        "key_note": key_note,
        "value": value,
        "value_note": value_note,
        "headers": headers,
    }


def group_detail(
    ctx: ConsoleContext, stored: StoredGroup
) -> tuple[data.GroupState, list[data.OffsetRow], bool]:
    """A group's state, its committed offsets with lag (the first MAX_OFFSETS_SHOWN), and
    whether there were more."""
    g = data.group_state(stored)
    offsets: list[GroupOffset] = ctx.service.fetch_offsets(stored.group_id, None)
    capped = len(offsets) > MAX_OFFSETS_SHOWN
    offsets = sorted(offsets, key=lambda o: (o.topic, o.partition))[:MAX_OFFSETS_SHOWN]
    topics = ctx.service.describe_topics(sorted({o.topic for o in offsets}))
    keys = [(o.topic, o.partition) for o in offsets if o.topic in topics]
    pkeys = [PartitionKey(topics[t].topic_id, p) for t, p in keys]
    states = ctx.service.partition_states(pkeys) if pkeys else []
    ends = {
        k: (s.log_start_offset, s.high_watermark)
        for k, s in zip(keys, states, strict=True)
        if not s.error_code
    }
    return g, data.offset_rows(offsets, ends, g.members), capped


def _groups(ctx: ConsoleContext, request: Request) -> HTMLResponse:
    ctx.sample_lag()
    stored = ctx.service.stored_groups(None)
    shown, paging = data.page_of(stored, _int_arg(request, "offset", 0), PAGE_ROWS)
    rows = []
    for s in shown:
        g, offsets, _ = group_detail(ctx, s)
        rows.append(data.group_row(g, offsets))
    return ctx.render(
        request, "groups.html", title="Consumer groups", nav="Consumer groups", rows=rows, paging=paging
    )


def _group(ctx: ConsoleContext, request: Request) -> HTMLResponse:
    group_id = request.query_params.get("id", "")
    found = ctx.service.stored_groups([group_id]) if group_id else []
    if not found:
        return ctx.error(request, f"no consumer group {group_id!r}", 404, "/console/groups")
    ctx.sample_lag()
    g, offsets, capped = group_detail(ctx, found[0])
    return ctx.render(
        request,
        "group.html",
        title=f"Consumer group {g.group_id}",
        nav="Consumer groups",
        group=g,
        offsets=offsets,
        offsets_capped=capped,
        total_lag=sum(o.lag for o in offsets),
        lag_chart=data.lag_chart(
            ctx.service.usage.lag_series(g.group_id, ctx.now_ms() - LAG_CHART_WINDOW_MS)
        ),
        refresh_s=refresh_seconds(request),
        topics=sorted({o.topic for o in offsets}),
    )


def _compaction(ctx: ConsoleContext, request: Request) -> HTMLResponse:
    now = ctx.now_ms()
    engine = ctx.service.engine
    candidates = ctx.service.compaction_candidates(None, None, MAX_CANDIDATES + 1)
    rows = queries.compaction_rows(engine, limit=MAX_LEASE_ROWS)
    names = {
        t.topic_id: t.name
        for t in ctx.service.topics_by_id(sorted({r.topic_id for r in rows}, key=str)).values()
    }
    return ctx.render(
        request,
        "compaction.html",
        title="Compaction and retention",
        nav="Compaction",
        candidates=data.candidate_rows(candidates[:MAX_CANDIDATES]),
        candidates_capped=len(candidates) > MAX_CANDIDATES,
        leases=data.lease_rows(rows, names, now),
        totals=queries.file_totals(engine),
        gc=queries.gc_queue(engine, limit=MAX_GC_ROWS),
        maintenance=sorted(ctx.service.last_successes().items()),
    )
