"""`skiff topics`: list, describe, create, alter and delete topics through the metadata
service, as `kafka-topics.sh` (and `kafka-configs.sh --entity-type topics`) do through a
broker.

    skiff topics list
    skiff topics describe [T ...]          partitions: leader, log start and end offsets; configs set
    skiff topics create T --partitions N [--config k=v ...]
    skiff topics alter T [--config k=v ...] [--delete-config k ...] [--partitions N]
    skiff topics delete T

Leaders are computed as agents compute them (rendezvous hashing of the partition over the
live agents, `agent.routing`) and shown by the agent's name (its `agent_id`, as groups show
their coordinator), with the node id Kafka clients are told beside it; configs are the ones set on the topic (defaults are not
listed, as Kafka's `Configs:` shows only overrides). Every subcommand takes `--json`.
"""

from __future__ import annotations

import argparse
from typing import Any

from skiff.agent import routing
from skiff.cli.admin_common import (
    CommandError,
    add_connection_arguments,
    print_json,
    print_table,
    run_command,
)
from skiff.metadata.types import PartitionKey, Topic
from skiff.metadata.wire.operations import MetadataClient


def add_parser(sub: Any) -> None:
    tp = sub.add_parser("topics", help="list, describe, create, alter and delete topics")
    tsub = tp.add_subparsers(dest="topics_command", required=True)
    ls = tsub.add_parser("list", help="the topics, with partition counts")
    add_connection_arguments(ls)
    de = tsub.add_parser("describe", help="partitions (leader, offsets) and configs")
    de.add_argument("topics", nargs="*", help="topic names (default: all)")
    add_connection_arguments(de)
    cr = tsub.add_parser("create", help="create a topic")
    cr.add_argument("topic", help="topic name")
    cr.add_argument("--partitions", type=int, required=True, help="partition count (required)")
    cr.add_argument(
        "--config", action="append", default=[], metavar="K=V", help="a topic config (repeatable)"
    )
    add_connection_arguments(cr)
    al = tsub.add_parser("alter", help="set or delete configs, add partitions")
    al.add_argument("topic", help="topic name")
    al.add_argument("--config", action="append", default=[], metavar="K=V", help="set (repeatable)")
    al.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="K",
        help="reset a config to its default (repeatable)",
    )
    al.add_argument("--partitions", type=int, default=None, help="new partition count (only more)")
    add_connection_arguments(al)
    dl = tsub.add_parser("delete", help="delete a topic and its data")
    dl.add_argument("topic", help="topic name")
    add_connection_arguments(dl)


def parse_configs(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CommandError(f"--config wants key=value, got {pair!r}")
        out[key.strip()] = value
    return out


def run_topics(args: argparse.Namespace) -> int:
    command = {
        "list": _list,
        "describe": _describe,
        "create": _create,
        "alter": _alter,
        "delete": _delete,
    }[args.topics_command]

    async def body(md: MetadataClient) -> int:
        return await command(md, args)

    return run_command("topics", args, body)


async def _list(md: MetadataClient, args: argparse.Namespace) -> int:
    topics = sorted(await md.list_topics(), key=lambda t: t.name)
    if args.json:
        print_json([_topic_json(t) for t in topics])
    else:
        print_table(
            ["TOPIC", "PARTITIONS", "TOPIC-ID"], [(t.name, t.partition_count, t.topic_id) for t in topics]
        )
    return 0


async def describe_topics(md: MetadataClient, names: list[str]) -> list[dict[str, Any]]:
    """Each topic with its partitions' leader (the agent's name, and the node id Kafka
    clients see), log start and log end offsets."""
    if names:
        found = await md.describe_topics(names)
        missing = [n for n in names if n not in found]
        if missing:
            raise CommandError(f"topic(s) not found: {', '.join(missing)}")
        topics = [found[n] for n in names]
    else:
        topics = sorted(await md.list_topics(), key=lambda t: t.name)
    live = await md.live_agents()
    node_ids = routing.assign_node_ids([a.agent_id for a in live])
    agent_ids = [a.agent_id for a in live if a.ready]  # only ready agents lead (agent.agent_registry)
    keys = [PartitionKey(t.topic_id, p) for t in topics for p in range(t.partition_count)]
    states = iter(await md.partition_states(keys)) if keys else iter(())
    out = []
    for t in topics:
        partitions = []
        for p in range(t.partition_count):
            st = next(states)
            leader = routing.partition_owner(t.topic_id, p, agent_ids)
            partitions.append(
                {
                    "partition": p,
                    "leader": leader,  # the agent's name, as groups show their coordinator
                    "leader_node_id": None if leader is None else node_ids[leader],
                    "log_start_offset": st.log_start_offset,
                    "log_end_offset": st.high_watermark,
                }
            )
        out.append({**_topic_json(t), "partitions": partitions})
    return out


async def _describe(md: MetadataClient, args: argparse.Namespace) -> int:
    described = await describe_topics(md, list(args.topics))
    if args.json:
        print_json(described)
        return 0
    for t in described:
        configs = ",".join(f"{k}={v}" for k, v in sorted(t["configs"].items()))
        print(
            f"Topic: {t['topic']}\tTopicId: {t['topic_id']}\tPartitionCount: {t['partition_count']}"
            f"\tConfigs: {configs}"
        )
        print_table(
            ["PARTITION", "LEADER", "NODE-ID", "LOG-START-OFFSET", "LOG-END-OFFSET"],
            [
                (p["partition"], p["leader"], p["leader_node_id"], p["log_start_offset"], p["log_end_offset"])
                for p in t["partitions"]
            ],
        )
    return 0


async def _create(md: MetadataClient, args: argparse.Namespace) -> int:
    if args.partitions < 1:
        raise CommandError("--partitions must be at least 1")
    topic = await md.create_topic(args.topic, args.partitions, parse_configs(args.config))
    if args.json:
        print_json(_topic_json(topic))
    else:
        print(f"Created topic {topic.name}.")
    return 0


async def _alter(md: MetadataClient, args: argparse.Namespace) -> int:
    set_configs = parse_configs(args.config)
    if not set_configs and not args.delete_config and args.partitions is None:
        raise CommandError("nothing to alter: give --config, --delete-config or --partitions")
    found = await md.describe_topics([args.topic])
    if args.topic not in found:
        raise CommandError(f"topic {args.topic!r} not found")
    topic = found[args.topic]
    if set_configs or args.delete_config:
        topic = await md.alter_topic_configs(args.topic, set_configs, list(args.delete_config), False)
    if args.partitions is not None and args.partitions != topic.partition_count:
        topic = await md.add_partitions(args.topic, args.partitions)
    if args.json:
        print_json(_topic_json(topic))
    else:
        print(f"Altered topic {topic.name}.")
    return 0


async def _delete(md: MetadataClient, args: argparse.Namespace) -> int:
    await md.delete_topic(args.topic)
    if args.json:
        print_json({"deleted": args.topic})
    else:
        print(f"Deleted topic {args.topic}.")
    return 0


def _topic_json(t: Topic) -> dict[str, Any]:
    return {
        "topic": t.name,
        "topic_id": str(t.topic_id),
        "partition_count": t.partition_count,
        "configs": dict(sorted(t.configs.items())),
    }
