"""`skiff groups`: list, describe, reset the offsets of and delete consumer groups through
the metadata service, as `kafka-consumer-groups.sh` does through a broker.

    skiff groups list
    skiff groups describe G                per partition: GROUP TOPIC PARTITION CURRENT-OFFSET
                                           LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID; members
    skiff groups reset-offsets G (--topic T[:P,P...] ... | --all-topics)
        (--to-earliest | --to-latest | --to-datetime ISO | --to-offset N) [--dry-run | --execute]
    skiff groups delete G

Members and assignments are the group's stored generation (`agent.groups.persistence`
writes it; `metadata.groups.admin` reads it): the members with their client id and host,
and each member's assignment decoded as a ConsumerProtocolAssignment (`version: int16,
[topic: string, [partition: int32]], user_data: bytes`; every version starts so). State:
`Stable` (members, assignment given), `CompletingRebalance` (members, assignment not yet
given), `Empty` (no members under a live coordinator lease).

Reset, as Kafka's rule: only while the group has no active members (else exit 1 with
Kafka's message); the dry run (the default, as Kafka's) prints the plan and changes
nothing. Targets: `--to-earliest` the log start offset, `--to-latest` the log end offset,
`--to-datetime` the first offset whose timestamp is at or after it (the log end if none;
an ISO 8601 time without a zone is taken as UTC), asked of an agent as Kafka's tool does
(ListOffsets by timestamp: exact to the record, `offsets_at_time`), `--to-offset` clamped into
[log start, log end] as Kafka does.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import struct
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from skiff.cli.admin_common import (
    CommandError,
    add_connection_arguments,
    agents_bootstrap,
    print_json,
    print_table,
    run_command,
)
from skiff.cli.bootstrap import offsets_for_times
from skiff.cli.profile import DEFAULT_TIMEOUT_MS, Connection
from skiff.metadata.errors import NON_EMPTY_GROUP, MetadataError
from skiff.metadata.types import GroupOffset, PartitionKey, StoredGroup, Topic
from skiff.metadata.wire.operations import MetadataClient


def add_parser(sub: Any) -> None:
    gp = sub.add_parser("groups", help="list, describe, reset offsets of and delete consumer groups")
    gsub = gp.add_subparsers(dest="groups_command", required=True)
    ls = gsub.add_parser("list", help="the groups with their state")
    add_connection_arguments(ls)
    de = gsub.add_parser("describe", help="members, assignments, offsets and lag")
    de.add_argument("group", help="group id")
    add_connection_arguments(de)
    rs = gsub.add_parser("reset-offsets", help="move committed offsets (group without active members)")
    rs.add_argument("group", help="group id")
    which = rs.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--topic",
        action="append",
        metavar="T[:P,P...]",
        help="a topic, or some of its partitions (repeatable)",
    )
    which.add_argument("--all-topics", action="store_true", help="every topic the group has offsets for")
    to = rs.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="to each partition's log start offset")
    to.add_argument("--to-latest", action="store_true", help="to each partition's end offset")
    to.add_argument(
        "--to-datetime",
        metavar="ISO",
        help="to the first offset at or after this time, e.g. 2026-11-24T10:00:00Z",
    )
    to.add_argument("--to-offset", type=int, metavar="N", help="to this offset (clamped to the log)")
    mode = rs.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the plan only (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    add_connection_arguments(rs)
    dl = gsub.add_parser("delete", help="delete a group's offsets and stored state (no active members)")
    dl.add_argument("group", help="group id")
    add_connection_arguments(dl)


def run_groups(args: argparse.Namespace) -> int:
    command = {
        "list": _list,
        "describe": _describe,
        "reset-offsets": _reset,
        "delete": _delete,
    }[args.groups_command]

    async def body(md: MetadataClient) -> int:
        return await command(md, args)

    return run_command("groups", args, body)


# ---------------------------------------------------------------- the stored group


@dataclass
class MemberView:
    consumer_id: str
    instance_id: str | None
    client_id: str
    host: str
    assignment: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class GroupView:
    group_id: str
    state: str
    coordinator: str | None
    protocol_type: str | None = None
    protocol: str | None = None
    generation: int | None = None
    members: list[MemberView] = field(default_factory=list)


def assignment_partitions(data: bytes) -> list[tuple[str, int]]:
    """The (topic, partition)s of a ConsumerProtocolAssignment; [] if it does not parse
    (a group of another protocol type, or an empty assignment)."""
    try:
        (version, count) = struct.unpack_from(">hi", data, 0)
        if version < 0:
            return []
        pos, out = 6, []
        for _ in range(max(count, 0)):
            (size,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topic = data[pos : pos + size].decode()
            pos += size
            (n,) = struct.unpack_from(">i", data, pos)
            pos += 4
            for p in struct.unpack_from(f">{max(n, 0)}i", data, pos):
                out.append((topic, int(p)))
            pos += 4 * max(n, 0)
        return sorted(out)
    except (struct.error, UnicodeDecodeError, ValueError):
        return []


def group_view(stored: StoredGroup) -> GroupView:
    """What the stored generation says (agent.groups.persistence's JSON), for display."""
    state: dict[str, Any] = {}
    if stored.group_state:
        try:
            state = json.loads(stored.group_state)
        except ValueError:
            state = {}
    members = []
    if stored.active:
        for m in state.get("members") or []:
            raw = m.get("assignment") or ""
            members.append(
                MemberView(
                    consumer_id=m.get("id", ""),
                    instance_id=m.get("instance"),
                    client_id=m.get("client_id", ""),
                    host=m.get("client_host", ""),
                    assignment=assignment_partitions(base64.b64decode(raw)) if raw else [],
                )
            )
    if not members:
        name = "Empty"
    else:
        name = "Stable" if state.get("assigned") else "CompletingRebalance"
    return GroupView(
        group_id=stored.group_id,
        state=name,
        coordinator=stored.coordinator,
        protocol_type=state.get("protocol_type"),
        protocol=state.get("protocol"),
        generation=state.get("generation"),
        members=members,
    )


async def _stored(md: MetadataClient, group_id: str) -> StoredGroup:
    found = await md.stored_groups([group_id])
    if not found:
        raise CommandError(f"Consumer group '{group_id}' does not exist.")
    return found[0]


async def _topics(md: MetadataClient, names: set[str]) -> dict[str, Topic]:
    return await md.describe_topics(sorted(names)) if names else {}


async def _log_ends(
    md: MetadataClient, keys: list[tuple[Topic, int]]
) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (log start, log end)."""
    if not keys:
        return {}
    states = await md.partition_states([PartitionKey(t.topic_id, p) for t, p in keys])
    return {
        (t.name, p): (s.log_start_offset, s.high_watermark) for (t, p), s in zip(keys, states, strict=True)
    }


# ---------------------------------------------------------------- list / describe


async def _list(md: MetadataClient, args: argparse.Namespace) -> int:
    views = [group_view(g) for g in await md.stored_groups(None)]
    if args.json:
        print_json(
            [
                {
                    "group": v.group_id,
                    "state": v.state,
                    "members": len(v.members),
                    "coordinator": v.coordinator,
                }
                for v in views
            ]
        )
    else:
        print_table(
            ["GROUP", "STATE", "MEMBERS", "COORDINATOR"],
            [(v.group_id, v.state, len(v.members), v.coordinator) for v in views],
        )
    return 0


async def describe_group(md: MetadataClient, group_id: str) -> dict[str, Any]:
    view = group_view(await _stored(md, group_id))
    committed = {(o.topic, o.partition): o.offset for o in await md.fetch_offsets(group_id, None)}
    owner: dict[tuple[str, int], MemberView] = {}
    for m in view.members:
        for tp in m.assignment:
            owner[tp] = m
    partitions = sorted(set(committed) | set(owner))
    topics = await _topics(md, {t for t, _ in partitions})
    ends = await _log_ends(md, [(topics[t], p) for t, p in partitions if t in topics])
    rows = []
    for tp in partitions:
        current = committed.get(tp)
        end = ends.get(tp, (None, None))[1]
        lag = None if current is None or current < 0 or end is None or end < 0 else max(end - current, 0)
        who = owner.get(tp)
        rows.append(
            {
                "group": group_id,
                "topic": tp[0],
                "partition": tp[1],
                "current_offset": current,
                "log_end_offset": end,
                "lag": lag,
                "consumer_id": who.consumer_id if who else None,
                "host": who.host if who else None,
                "client_id": who.client_id if who else None,
            }
        )
    return {
        "group": group_id,
        "state": view.state,
        "coordinator": view.coordinator,
        "protocol_type": view.protocol_type,
        "protocol": view.protocol,
        "generation": view.generation,
        "members": [
            {
                "consumer_id": m.consumer_id,
                "group_instance_id": m.instance_id,
                "host": m.host,
                "client_id": m.client_id,
                "assignment": [{"topic": t, "partition": p} for t, p in m.assignment],
            }
            for m in view.members
        ],
        "partitions": rows,
    }


_OFFSET_COLUMNS = [
    "GROUP",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
]
_OFFSET_KEYS = [
    "group",
    "topic",
    "partition",
    "current_offset",
    "log_end_offset",
    "lag",
    "consumer_id",
    "host",
    "client_id",
]


async def _describe(md: MetadataClient, args: argparse.Namespace) -> int:
    d = await describe_group(md, args.group)
    if args.json:
        print_json(d)
        return 0
    if not d["members"]:
        print(f"Consumer group '{args.group}' has no active members.")
    print_table(_OFFSET_COLUMNS, [[r[k] for k in _OFFSET_KEYS] for r in d["partitions"]])
    if d["members"]:
        print_table(
            ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"],
            [
                (
                    args.group,
                    m["consumer_id"],
                    m["host"],
                    m["client_id"],
                    len(m["assignment"]),
                    ",".join(f"{a['topic']}:{a['partition']}" for a in m["assignment"]),
                )
                for m in d["members"]
            ],
            title=f"state {d['state']}, generation {d['generation']}, coordinator {d['coordinator']}",
        )
    return 0


# ---------------------------------------------------------------- reset / delete


def parse_topic_arg(arg: str) -> tuple[str, list[int] | None]:
    """`T` (every partition) or `T:0,2`."""
    name, sep, parts = arg.rpartition(":") if ":" in arg else (arg, "", "")
    if not sep:
        return arg, None
    try:
        return name, sorted({int(p) for p in parts.split(",") if p.strip()})
    except ValueError:
        raise CommandError(f"--topic wants T or T:P,P..., got {arg!r}") from None


def parse_datetime_ms(text: str) -> int:
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CommandError(f"--to-datetime wants an ISO 8601 time, got {text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


async def plan_reset(md: MetadataClient, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The new offset of every partition the reset covers, without changing anything."""
    if args.all_topics:
        names = sorted({o.topic for o in await md.fetch_offsets(args.group, None)})
        wanted: dict[str, list[int] | None] = dict.fromkeys(names)
    else:
        wanted = dict(parse_topic_arg(a) for a in args.topic)
    topics = await _topics(md, set(wanted))
    missing = [t for t in wanted if t not in topics]
    if missing:
        raise CommandError(f"topic(s) not found: {', '.join(missing)}")
    keys: list[tuple[Topic, int]] = []
    for name, parts in wanted.items():
        t = topics[name]
        chosen = list(range(t.partition_count)) if parts is None else parts
        bad = [p for p in chosen if not 0 <= p < t.partition_count]
        if bad:
            raise CommandError(f"topic {name!r} has no partition(s) {bad}")
        keys.extend((t, p) for p in chosen)
    ends = await _log_ends(md, keys)
    committed = {(o.topic, o.partition): o.offset for o in await md.fetch_offsets(args.group, list(wanted))}
    at_time: dict[tuple[str, int], int] = {}
    if args.to_datetime is not None:
        at_time = await offsets_at_time(md, args, keys, parse_datetime_ms(args.to_datetime))
    plan = []
    for t, p in keys:
        start, end = ends[(t.name, p)]
        if args.to_earliest:
            new = start
        elif args.to_latest:
            new = end
        elif args.to_datetime is not None:
            found = at_time.get((t.name, p), -1)
            new = found if found >= 0 else end
        else:
            new = min(max(args.to_offset, start), end)
        plan.append(
            {
                "group": args.group,
                "topic": t.name,
                "partition": p,
                "current_offset": committed.get((t.name, p)),
                "new_offset": new,
            }
        )
    return plan


async def offsets_at_time(
    md: MetadataClient, args: argparse.Namespace, keys: list[tuple[Topic, int]], ts_ms: int
) -> dict[tuple[str, int], int]:
    """Kafka's lookup (ListOffsets by timestamp) through an agent: exact to the record, as
    the agent reads the chunk metadata names (metadata alone answers to the chunk). The
    agent is the `--bootstrap-server`, else the live ready agents metadata lists."""
    conn: Connection | None = getattr(args, "connection", None)
    bootstrap = conn.bootstrap_server if conn is not None else None
    if not bootstrap:
        bootstrap = await agents_bootstrap(md, "--to-datetime asks an agent (ListOffsets by timestamp)")
    queries = [(t.name, p, ts_ms) for t, p in keys]
    kafka_config = conn.kafka_config if conn is not None else {}
    timeout_ms = conn.timeout_ms if conn is not None else DEFAULT_TIMEOUT_MS
    return await asyncio.to_thread(offsets_for_times, bootstrap, kafka_config, timeout_ms, queries)


async def _reset(md: MetadataClient, args: argparse.Namespace) -> int:
    stored = await md.stored_groups([args.group])
    view = group_view(stored[0]) if stored else None
    if view is not None and view.members:
        raise CommandError(
            f"Assignments can only be reset if the group '{args.group}' is inactive, "
            f"but the current state is {view.state}."
        )
    plan = await plan_reset(md, args)
    if args.execute:
        offsets = [GroupOffset(r["topic"], r["partition"], r["new_offset"]) for r in plan]
        try:
            results = await md.reset_group_offsets(args.group, offsets)
        except MetadataError as e:
            if e.error_code == NON_EMPTY_GROUP:  # a member joined since the check above
                raise CommandError(e.message) from None
            raise
        failed = [(r, res) for r, res in zip(plan, results, strict=True) if res.error_code]
        if failed:
            r, res = failed[0]
            raise CommandError(
                f"{r['topic']}-{r['partition']}: {res.error_message} (Kafka error code {res.error_code})"
            )
    if args.json:
        print_json({"executed": bool(args.execute), "offsets": plan})
    else:
        print_table(
            ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
            [(r["group"], r["topic"], r["partition"], r["new_offset"]) for r in plan],
        )
        if not args.execute:
            print("(dry run: nothing changed; add --execute to commit these offsets)")
    return 0


async def _delete(md: MetadataClient, args: argparse.Namespace) -> int:
    try:
        await md.delete_group(args.group)
    except MetadataError as e:
        if e.error_code == NON_EMPTY_GROUP:
            raise CommandError(
                f"Deletion of some consumer groups failed:\n* Group '{args.group}' could not be deleted "
                f"due to: NonEmptyGroupException ({e.message})"
            ) from None
        raise
    if args.json:
        print_json({"deleted": args.group})
    else:
        print(f"Deletion of requested consumer groups ('{args.group}') was successful.")
    return 0
