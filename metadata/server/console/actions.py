"""The console's admin actions (POST, `admin` role): create, alter and delete topics, and
reset a consumer group's offsets.

Each action is two steps through one route. The form on a page posts the request: the
route checks it and answers a confirmation page saying exactly what will change (for an
offset reset, the plan: the dry run, every partition with its current and new offset)
with a button that posts the same fields again with `confirm=yes`; only that second post
acts, through the same `MetadataService` methods the API serves, and answers what was
done. Both posts carry the form's CSRF token (console.session), checked before anything
else: a missing or wrong one is refused with 400 and changes nothing.

An offset reset follows `skiff groups reset-offsets` (Kafka's kafka-consumer-groups.sh):
every partition of the chosen topic, or every partition the group has offsets for;
`earliest` (the log start), `latest` (the log end), an offset (clamped into the log), or
a time (the first offset at or after it, else the log end). The service refuses it while
the group has active members (NON_EMPTY_GROUP), shown as the answer.

A compaction pass cannot be started here: passes run in the compactor (metadata may not
import it), and the compaction page says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse
from skiff.metadata.configs import ConfigError, topic_name_error, validate_config_names, validate_configs
from skiff.metadata.errors import MetadataError
from skiff.metadata.server.auth import allow
from skiff.metadata.server.console.context import ConsoleContext
from skiff.metadata.server.console.login import parse_form
from skiff.metadata.server.console.routes import lookup_topic
from skiff.metadata.server.console.session import check_csrf, safe_next
from skiff.metadata.server.console.views.formats import parse_time_ms
from skiff.metadata.types import GroupOffset, OffsetQuery, PartitionKey
from skiff.metadata.wire.roles import ADMIN

MAX_CONFIG_LINES = 64
MAX_PLAN_ROWS = 1000
MAX_NEW_PARTITIONS = 10_000
Form = dict[str, str]


@dataclass
class Confirmation:
    """What the confirmation page shows, and the fields its button posts again."""

    summary: str
    fields: list[tuple[str, str]]
    button: str
    back: str
    danger: bool = False
    plan_header: list[str] = field(default_factory=list)
    plan: list[list[object]] = field(default_factory=list)
    error: str = ""


def parse_config_lines(text: str) -> dict[str, str]:
    """`name=value` lines (blank lines ignored) -> {name: value}; ValueError otherwise."""
    out: dict[str, str] = {}
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) > MAX_CONFIG_LINES:
        raise ValueError(f"at most {MAX_CONFIG_LINES} configs at a time")
    for line in lines:
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"expected name=value, got {line[:80]!r}")
        out[name.strip()] = value.strip()
    return out


def actions_router(ctx: ConsoleContext) -> APIRouter:
    router = APIRouter(dependencies=[allow(ADMIN)], include_in_schema=False)
    steps: dict[
        str, tuple[Callable[[ConsoleContext, Form], Confirmation], Callable[[ConsoleContext, Form], str]]
    ] = {
        "create-topic": (_create_preview, _create),
        "delete-topic": (_delete_preview, _delete),
        "alter-configs": (_alter_preview, _alter),
        "reset-offsets": (_reset_preview, _reset),
    }
    for name, (preview, act) in steps.items():
        router.add_api_route(
            f"/console/actions/{name}",
            _endpoint(ctx, f"/console/actions/{name}", preview, act),
            methods=["POST"],
            response_class=HTMLResponse,
            name=f"console_{name.replace('-', '_')}",
        )
    return router


def _endpoint(
    ctx: ConsoleContext,
    path: str,
    preview: Callable[[ConsoleContext, Form], Confirmation],
    act: Callable[[ConsoleContext, Form], str],
) -> Callable[[Request], object]:
    async def endpoint(request: Request) -> HTMLResponse:
        form = await parse_form(request)
        if not check_csrf(request, form.get("csrf_token")):
            return ctx.error(
                request,
                "This form did not come from this console session (CSRF check failed): reload the page and try again.",
                400,
            )
        return await run_in_threadpool(_step, ctx, request, form, path, preview, act)

    return endpoint


def _step(
    ctx: ConsoleContext,
    request: Request,
    form: Form,
    path: str,
    preview: Callable[[ConsoleContext, Form], Confirmation],
    act: Callable[[ConsoleContext, Form], str],
) -> HTMLResponse:
    if form.get("confirm") != "yes":
        try:
            c = preview(ctx, form)
        except (MetadataError, ValueError) as e:
            return ctx.error(request, getattr(e, "message", None) or str(e), 400, safe_next(form.get("back")))
        return ctx.render(request, "confirm.html", title="Confirm", action=path, **c.__dict__)
    back = safe_next(form.get("back"))
    try:
        message = act(ctx, form)
    except (MetadataError, ValueError) as e:
        return ctx.render(
            request,
            "done.html",
            title="Not done",
            status_code=400,
            error=True,
            message=getattr(e, "message", None) or str(e),
            back=back,
        )
    return ctx.render(request, "done.html", title="Done", error=False, message=message, back=back)


# ------------------------------------------------------------------------------ topics


def _new_topic(form: Form) -> tuple[str, int, dict[str, str]]:
    name = form.get("name", "").strip()
    problem = topic_name_error(name)
    if problem:
        raise ValueError(problem)
    try:
        partitions = int(form.get("partitions", ""))
    except ValueError:
        raise ValueError("the partition count must be a whole number") from None
    if not 1 <= partitions <= MAX_NEW_PARTITIONS:
        raise ValueError(f"the partition count must be between 1 and {MAX_NEW_PARTITIONS}")
    try:
        configs = validate_configs(parse_config_lines(form.get("configs", "")))
    except ConfigError as e:
        raise ValueError(str(e)) from None
    return name, partitions, configs


def _create_preview(ctx: ConsoleContext, form: Form) -> Confirmation:
    name, partitions, configs = _new_topic(form)
    if ctx.service.describe_topics([name]):
        raise ValueError(f"topic {name!r} already exists")
    settings = ", ".join(f"{k}={v}" for k, v in configs.items()) or "the default configs"
    return Confirmation(
        summary=f"Create topic {name} with {partitions} partitions and {settings}.",
        fields=[
            ("name", name),
            ("partitions", str(partitions)),
            ("configs", form.get("configs", "")),
            ("back", f"/console/topics/{name}"),
        ],
        button="Create topic",
        back="/console/topics",
    )


def _create(ctx: ConsoleContext, form: Form) -> str:
    name, partitions, configs = _new_topic(form)
    topic = ctx.service.create_topic(name, partitions, configs)
    return f"Created topic {topic.name} ({topic.partition_count} partitions, id {topic.topic_id})."


def _delete_preview(ctx: ConsoleContext, form: Form) -> Confirmation:
    topic = lookup_topic(ctx, form.get("name", ""))
    keys = [PartitionKey(topic.topic_id, p) for p in range(min(topic.partition_count, MAX_PLAN_ROWS))]
    records = sum(max(s.high_watermark - s.log_start_offset, 0) for s in ctx.service.partition_states(keys))
    return Confirmation(
        summary=f"Delete topic {topic.name}: its {topic.partition_count} partitions and {records:,} records"
        " go, and its files are collected. This cannot be undone.",
        fields=[("name", topic.name), ("back", "/console/topics")],
        button=f"Delete {topic.name}",
        back=f"/console/topics/{topic.name}",
        danger=True,
    )


def _delete(ctx: ConsoleContext, form: Form) -> str:
    name = form.get("name", "")
    ctx.service.delete_topic(name)
    return f"Deleted topic {name}."


def _config_change(form: Form) -> tuple[dict[str, str], list[str]]:
    deletes = [n.strip() for n in form.get("delete", "").splitlines() if n.strip()][:MAX_CONFIG_LINES]
    try:
        sets = validate_configs(parse_config_lines(form.get("set", "")))
        validate_config_names(deletes)
    except ConfigError as e:
        raise ValueError(str(e)) from None
    if not sets and not deletes:
        raise ValueError("nothing to change: give configs to set or to reset")
    return sets, deletes


def _alter_preview(ctx: ConsoleContext, form: Form) -> Confirmation:
    topic = lookup_topic(ctx, form.get("name", ""))
    sets, deletes = _config_change(form)
    plan: list[list[object]] = [[n, topic.configs.get(n, "(default)"), v] for n, v in sets.items()]
    plan += [[n, topic.configs.get(n, "(default)"), "(default)"] for n in deletes]
    return Confirmation(
        summary=f"Change {len(plan)} config(s) of topic {topic.name}.",
        fields=[
            ("name", topic.name),
            ("set", form.get("set", "")),
            ("delete", form.get("delete", "")),
            ("back", f"/console/topics/{topic.name}"),
        ],
        button="Apply",
        back=f"/console/topics/{topic.name}",
        plan_header=["config", "now", "after"],
        plan=plan,
    )


def _alter(ctx: ConsoleContext, form: Form) -> str:
    sets, deletes = _config_change(form)
    topic = ctx.service.alter_topic_configs(form.get("name", ""), sets, deletes, False)
    return f"Changed the configs of topic {topic.name}."


# ------------------------------------------------------------------------------ offsets


def reset_plan(ctx: ConsoleContext, form: Form) -> list[tuple[str, int, int | None, int]]:
    """(topic, partition, committed now or None, new offset) of every partition covered."""
    group = form.get("group", "")
    to, at, only = form.get("to", ""), form.get("at", "").strip(), form.get("topic", "").strip()
    if to not in ("earliest", "latest", "offset", "datetime"):
        raise ValueError("choose where to reset to: earliest, latest, an offset or a time")
    committed = {(o.topic, o.partition): o.offset for o in ctx.service.fetch_offsets(group, None)}
    names = [only] if only else sorted({t for t, _ in committed})
    if not names:
        raise ValueError(f"group {group!r} has no committed offsets: name a topic")
    topics = ctx.service.describe_topics(names)
    missing = [n for n in names if n not in topics]
    if missing:
        raise ValueError(f"no topic named {', '.join(missing)}")
    keys = [(topics[n], p) for n in names for p in range(topics[n].partition_count)][:MAX_PLAN_ROWS]
    states = ctx.service.partition_states([PartitionKey(t.topic_id, p) for t, p in keys])
    at_time: list[int] = []
    if to == "datetime":
        ts = parse_time_ms(at)
        answers = ctx.service.list_offsets([OffsetQuery(t.topic_id, p, ts) for t, p in keys])
        at_time = [a.offset if not a.error_code else -1 for a in answers]
    plan = []
    for i, ((t, p), s) in enumerate(zip(keys, states, strict=True)):
        if to == "earliest":
            new = s.log_start_offset
        elif to == "latest":
            new = s.high_watermark
        elif to == "datetime":
            new = at_time[i] if at_time[i] >= 0 else s.high_watermark
        else:
            new = min(max(int(at), s.log_start_offset), s.high_watermark)
        plan.append((t.name, p, committed.get((t.name, p)), new))
    return plan


def group_path(group_id: str) -> str:
    return f"/console/group?id={quote(group_id, safe='')}"


def _reset_fields(form: Form) -> list[tuple[str, str]]:
    group = form.get("group", "")
    keep = [(k, form.get(k, "")) for k in ("group", "topic", "to", "at")]
    return [*keep, ("back", group_path(group))]


def _reset_preview(ctx: ConsoleContext, form: Form) -> Confirmation:
    group = form.get("group", "")
    plan = reset_plan(ctx, form)
    stored = ctx.service.stored_groups([group])
    active = bool(stored) and stored[0].active
    return Confirmation(
        summary=f"Dry run: reset the offsets of group {group} on {len(plan)} partition(s). Nothing has changed yet.",
        fields=_reset_fields(form),
        button="Reset offsets",
        back=group_path(group),
        danger=True,
        plan_header=["topic", "partition", "committed now", "new offset"],
        plan=[[t, p, "-" if c is None else c, n] for t, p, c, n in plan],
        error=f"Group {group} has active members: stop its consumers first (Kafka's rule)." if active else "",
    )


def _reset(ctx: ConsoleContext, form: Form) -> str:
    group = form.get("group", "")
    plan = reset_plan(ctx, form)
    results = ctx.service.reset_group_offsets(group, [GroupOffset(t, p, n) for t, p, _, n in plan])
    failed = [
        f"{t}-{p}: {r.error_message or r.error_code}"
        for (t, p, _, _), r in zip(plan, results, strict=True)
        if r.error_code
    ]
    if failed:
        raise ValueError(f"{len(failed)} partition(s) not reset: {'; '.join(failed[:10])}")
    return f"Reset the offsets of group {group} on {len(plan)} partition(s)."
