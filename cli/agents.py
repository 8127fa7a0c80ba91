"""`skiff agents list`: the live agents as the metadata service knows them, as
`kafka-broker-api-versions.sh` and `kafka-metadata-quorum.sh` show brokers.

    skiff agents list [--json]

One row per agent that heartbeated within the service's agent TTL: its id (`--agent-id`),
the node id Kafka clients are told (`agent.routing.assign_node_ids`, as every agent
computes it), whether it is ready (its own probe of the bucket and metadata: an agent that
is not ready leads no partitions and coordinates nothing), its zone, the Skiff version it
runs (sent with each heartbeat: `metadata.build_info`; `-` for an agent from before
versions), its Kafka address and listeners, and the seconds since its last heartbeat (by
the service's clock against this machine's). During a rolling upgrade the VERSION column
shows which agents run which version. `--json` gives the same fields, with the heartbeat
as epoch milliseconds.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from skiff.agent import routing
from skiff.cli.admin_common import add_connection_arguments, print_json, print_table, run_command
from skiff.metadata.types import AgentInfo
from skiff.metadata.wire.operations import MetadataClient


def add_parser(sub: Any) -> None:
    ap = sub.add_parser("agents", help="the live agents: readiness, zone, version, addresses")
    ap.set_defaults(run=run_agents)
    asub = ap.add_subparsers(dest="agents_command", required=True)
    ls = asub.add_parser(
        "list", help="every live agent: node id, ready, zone, version, address, last heartbeat"
    )
    add_connection_arguments(ls)


def agent_rows(live: list[AgentInfo], now_ms: int) -> list[dict[str, Any]]:
    """The agents as `list` prints them (and `--json` gives them), by agent id."""
    node_ids = routing.assign_node_ids([a.agent_id for a in live])
    return [
        {
            "agent_id": a.agent_id,
            "node_id": node_ids[a.agent_id],
            "ready": a.ready,
            "zone": a.zone,
            "version": a.version or None,
            "host": a.host,
            "port": a.port,
            "listeners": [{"name": n, "host": h, "port": p} for n, h, p in a.listeners],
            "last_heartbeat_ms": a.last_heartbeat_ms,
            "heartbeat_age_s": round(max(0, now_ms - a.last_heartbeat_ms) / 1000, 1),
        }
        for a in sorted(live, key=lambda a: a.agent_id)
    ]


def run_agents(args: argparse.Namespace) -> int:
    async def body(md: MetadataClient) -> int:
        rows = agent_rows(await md.live_agents(), int(time.time() * 1000))
        if args.json:
            print_json(rows)
            return 0
        print_table(
            ["AGENT", "NODE-ID", "READY", "ZONE", "VERSION", "ADDRESS", "LISTENERS", "HEARTBEAT-AGE-S"],
            [
                (
                    r["agent_id"],
                    r["node_id"],
                    "yes" if r["ready"] else "no",
                    r["zone"] or "-",
                    r["version"] or "-",
                    f"{r['host']}:{r['port']}",
                    ",".join(f"{x['name']}://{x['host']}:{x['port']}" for x in r["listeners"]) or "-",
                    r["heartbeat_age_s"],
                )
                for r in rows
            ],
        )
        return 0

    return run_command("agents", args, body)
