"""`skiff acls`: list, add and remove Kafka ACLs through an agent, as `kafka-acls.sh` does
through a broker, with its flags.

    skiff acls list   [RESOURCE] [--principal P] [--resource-pattern-type T]
    skiff acls add    (--allow-principal P | --deny-principal P) ... [--operation OP ...]
                      [--allow-host H ... | --deny-host H ...] RESOURCE [--resource-pattern-type T]
    skiff acls remove [same as add; a filter]
    RESOURCE: --topic T | --group G | --transactional-id X | --cluster (repeatable, mixed)

The requests are Kafka's CreateAcls, DescribeAcls and DeleteAcls (confluent-kafka's
AdminClient), sent to `--bootstrap-server` (else the live ready agents metadata lists) with
the `--command-config`/profile `[kafka]` client settings, so the agent authorizes them as
any Kafka client's: the caller needs Alter (add, remove) or Describe (list) on the cluster,
or is a super user. ACLs go through an agent and not straight to metadata because the agent
is where Kafka's rule for who may change them is kept (agent.handlers).

As `kafka-acls.sh`: `--operation` defaults to All; hosts default to `*`; the pattern type
defaults to literal (`prefixed` for a name prefix; `any` and `match` only in list and remove:
`any` is every pattern type for the exact name, `match` every binding that would apply to
it, prefixed and `*` included). `remove` without a principal removes every ACL of the
resources, as Kafka's does. `remove` asks no question (Kafka's tool asks unless
`--force`); it needs a resource flag, so it never removes every ACL by accident. Output:
the bindings as a table (or `--json`), with the count added or removed.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING, Any

from skiff.cli.admin_common import (
    CommandError,
    add_connection_arguments,
    agents_bootstrap,
    print_json,
    print_table,
    run_command,
)
from skiff.cli.bootstrap import kafka_admin, unreachable
from skiff.cli.profile import resolve

if TYPE_CHECKING:
    from skiff.metadata.wire.operations import MetadataClient

# Kafka's operation names (as kafka-acls.sh takes and prints them) -> confluent-kafka's enum.
OPERATIONS = {
    "All": "ALL",
    "Read": "READ",
    "Write": "WRITE",
    "Create": "CREATE",
    "Delete": "DELETE",
    "Alter": "ALTER",
    "Describe": "DESCRIBE",
    "ClusterAction": "CLUSTER_ACTION",
    "DescribeConfigs": "DESCRIBE_CONFIGS",
    "AlterConfigs": "ALTER_CONFIGS",
    "IdempotentWrite": "IDEMPOTENT_WRITE",
}
KAFKA_OPERATION = {enum: name for name, enum in OPERATIONS.items()}
PATTERN_TYPES = ("literal", "prefixed", "any", "match")
CLUSTER_NAME = "kafka-cluster"  # Kafka's one cluster resource
COLUMNS = ["PRINCIPAL", "HOST", "OPERATION", "PERMISSION", "RESOURCE-TYPE", "RESOURCE", "PATTERN-TYPE"]


def add_parser(sub: Any) -> None:
    ap = sub.add_parser("acls", help="list, add and remove Kafka ACLs (as kafka-acls.sh), through an agent")
    ap.set_defaults(run=run_acls)
    asub = ap.add_subparsers(dest="acls_command", required=True)
    ls = asub.add_parser("list", help="the ACLs, all or those of the resources and principal given")
    _resource_arguments(ls)
    ls.add_argument("--principal", default=None, help="only this principal's ACLs, e.g. User:alice")
    add_connection_arguments(ls)
    for name, what in (("add", "add ACLs"), ("remove", "remove the ACLs matching the flags")):
        p = asub.add_parser(name, help=what)
        _resource_arguments(p)
        _entry_arguments(p)
        add_connection_arguments(p)
    for p in (ls, *(asub.choices[n] for n in ("add", "remove"))):
        # the agent the requests go to, not one asked for the metadata URL as elsewhere
        p._option_string_actions["--bootstrap-server"].help = (
            "the agent to send the ACL requests to (env SKIFF_BOOTSTRAP_SERVER, profile"
            " bootstrap_server; default: the live ready agents the metadata service lists)"
        )


def _resource_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", action="append", default=[], metavar="T", help="a topic (repeatable)")
    p.add_argument("--group", action="append", default=[], metavar="G", help="a consumer group (repeatable)")
    p.add_argument(
        "--transactional-id", action="append", default=[], metavar="X", help="a transactional id (repeatable)"
    )
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument(
        "--resource-pattern-type",
        choices=PATTERN_TYPES,
        type=str.lower,
        default="literal",
        help="literal or prefixed; list and remove also take any and match (default: %(default)s)",
    )


def _entry_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-principal", action="append", default=[], metavar="P", help="e.g. User:alice")
    p.add_argument("--deny-principal", action="append", default=[], metavar="P", help="e.g. User:mallory")
    p.add_argument("--allow-host", action="append", default=[], metavar="H", help="default: * (every host)")
    p.add_argument("--deny-host", action="append", default=[], metavar="H", help="default: * (every host)")
    p.add_argument(
        "--operation",
        action="append",
        default=[],
        metavar="OP",
        help=f"one of {', '.join(OPERATIONS)} (repeatable; default: All)",
    )


def _resources(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(resource type name, resource name) of every resource flag."""
    out = [("TOPIC", t) for t in args.topic] + [("GROUP", g) for g in args.group]
    out += [("TRANSACTIONAL_ID", x) for x in args.transactional_id]
    if args.cluster:
        out.append(("BROKER", CLUSTER_NAME))  # confluent-kafka's name for Kafka's CLUSTER resource
    return out


def _operations(args: argparse.Namespace, *, every: bool = False) -> list[str]:
    """confluent-kafka's enum names of the `--operation` flags (Kafka's names, any case);
    without any, All (or, for a filter naming no principal, every operation)."""
    if not args.operation and every:
        return ["ANY"]
    by_lower = {name.lower(): enum for name, enum in OPERATIONS.items()}
    chosen = []
    for op in args.operation or ["All"]:
        found = by_lower.get(op.replace("-", "").replace("_", "").lower())
        if found is None:
            raise CommandError(f"unknown --operation {op!r}: one of {', '.join(OPERATIONS)}")
        chosen.append(found)
    return chosen


def _entries(args: argparse.Namespace, *, filter_: bool) -> list[tuple[str | None, str | None, str]]:
    """(principal, host, permission) of the flags: each principal with each host of its kind
    (`*` when none is given); a filter without principals matches every principal."""
    allow_hosts, deny_hosts = args.allow_host or ["*"], args.deny_host or ["*"]
    out: list[tuple[str | None, str | None, str]] = [
        (p, h, "ALLOW") for p in args.allow_principal for h in allow_hosts
    ]
    out += [(p, h, "DENY") for p in args.deny_principal for h in deny_hosts]
    if not out and filter_:
        out = [(None, None, "ANY")]
    return out


def _bindings(args: argparse.Namespace, *, filter_: bool) -> list[Any]:
    from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported without __all__
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    resources = _resources(args)
    if not resources:
        raise CommandError("name a resource: --topic, --group, --transactional-id or --cluster")
    pattern = args.resource_pattern_type.upper()
    if not filter_ and pattern in ("ANY", "MATCH"):
        raise CommandError(
            f"--resource-pattern-type {args.resource_pattern_type} only filters: add takes literal or prefixed"
        )
    entries = _entries(args, filter_=filter_)
    if not entries:
        raise CommandError("name a principal: --allow-principal or --deny-principal")
    operations = _operations(args, every=entries == [(None, None, "ANY")])
    # a filter's None principal and host match any (confluent-kafka's stubs say str)
    make: Any = AclBindingFilter if filter_ else AclBinding
    return [
        make(
            ResourceType[rtype],
            name,
            ResourcePatternType[pattern],
            principal,
            host,
            AclOperation[op],
            AclPermissionType[permission],
        )
        for rtype, name in resources
        for principal, host, permission in entries
        for op in operations
    ]


def _list_filters(args: argparse.Namespace) -> list[Any]:
    from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported without __all__
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    make: Any = AclBindingFilter  # None (any name, any host) where confluent-kafka's stubs say str
    resources: list[tuple[str, str | None]] = list(_resources(args))
    pattern = ResourcePatternType[args.resource_pattern_type.upper()]
    if not resources:  # no resource named: every binding
        resources, pattern = [("ANY", None)], ResourcePatternType.ANY
    return [
        make(
            ResourceType[rtype], name, pattern, args.principal, None, AclOperation.ANY, AclPermissionType.ANY
        )
        for rtype, name in resources
    ]


def binding_row(b: Any) -> dict[str, str]:
    """One binding as `list` prints it: Kafka's names (CLUSTER, not confluent-kafka's BROKER)."""
    rtype = b.restype.name
    return {
        "principal": b.principal,
        "host": b.host,
        "operation": KAFKA_OPERATION.get(b.operation.name, b.operation.name),
        "permission": b.permission_type.name,
        "resource_type": "CLUSTER" if rtype == "BROKER" else rtype,
        "resource": b.name,
        "pattern_type": b.resource_pattern_type.name,
    }


def _print(rows: list[dict[str, str]], as_json: bool, done: str | None = None) -> None:
    rows = sorted(rows, key=lambda r: tuple(r.values()))
    if as_json:
        print_json(rows)
        return
    if done is not None:
        print(done)
    print_table(COLUMNS, [tuple(r.values()) for r in rows])


def _call(bootstrap: str, args: argparse.Namespace) -> list[dict[str, str]]:
    """The command's Kafka requests, synchronously (confluent-kafka's futures)."""
    from confluent_kafka import KafkaError, KafkaException

    conn = args.connection
    admin = kafka_admin(bootstrap, conn.kafka_config, conn.timeout_ms)
    timeout_s = conn.timeout_ms / 1000
    try:
        if args.acls_command == "add":
            bindings = _bindings(args, filter_=False)
            for future in admin.create_acls(bindings, request_timeout=timeout_s).values():
                future.result(timeout=timeout_s)
            return [binding_row(b) for b in bindings]
        if args.acls_command == "remove":
            futures = admin.delete_acls(_bindings(args, filter_=True), request_timeout=timeout_s)
            return [binding_row(b) for f in futures.values() for b in f.result(timeout=timeout_s)]
        found = []
        for acl_filter in _list_filters(args):
            found += admin.describe_acls(acl_filter, request_timeout=timeout_s).result(timeout=timeout_s)
        return [binding_row(b) for b in found]
    except TimeoutError:  # a future not done in time: nothing answered
        raise CommandError(
            f"cannot reach an agent at {bootstrap}: no answer within {conn.timeout_ms} ms"
        ) from None
    except KafkaException as e:
        error: Any = e.args[0] if e.args else e
        if isinstance(error, KafkaError) and not error.retriable() and error.code() > 0:
            raise CommandError(f"{error.name()}: {error.str()}") from None  # refused: say Kafka's code
        raise unreachable(bootstrap, e) from None


def run_acls(args: argparse.Namespace) -> int:
    if args.acls_command != "list":
        _bindings(args, filter_=args.acls_command == "remove")  # usage errors before any request
    args.connection = conn = resolve(args)
    if conn.bootstrap_server:  # the agent named: no metadata service needed
        return _show(args, _call(conn.bootstrap_server, args))

    async def body(md: MetadataClient) -> int:
        bootstrap = await agents_bootstrap(md, "ACLs are read and changed through an agent")
        return _show(args, await asyncio.to_thread(_call, bootstrap, args))

    return run_command("acls", args, body)


def _show(args: argparse.Namespace, rows: list[dict[str, str]]) -> int:
    verb = {"add": "Added", "remove": "Removed"}.get(args.acls_command)
    _print(rows, args.json, None if verb is None else f"{verb} {len(rows)} ACL(s).")
    return 0
