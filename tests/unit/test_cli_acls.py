"""skiff.cli.acls: kafka-acls.sh's flags turned into confluent-kafka bindings and filters,
and bindings printed with Kafka's names."""

from __future__ import annotations

import argparse

import pytest
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)
from skiff.cli import acls
from skiff.cli.errors import CommandError


def _args(command: str, *flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    acls.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["acls", command, *flags])


def test_each_principal_host_resource_and_operation_is_one_binding() -> None:
    args = _args(
        "add", "--allow-principal", "User:a", "--allow-principal", "User:b", "--allow-host", "127.0.0.1",
        "--operation", "read", "--operation", "IDEMPOTENT_WRITE", "--topic", "t", "--cluster",
    )  # fmt: skip
    bindings = acls._bindings(args, filter_=False)
    assert len(bindings) == 2 * 2 * 2  # principals x resources x operations
    assert AclBinding(
        ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:b", "127.0.0.1",
        AclOperation.IDEMPOTENT_WRITE, AclPermissionType.ALLOW,
    ) in bindings  # fmt: skip
    row = acls.binding_row(bindings[-1])
    assert row["resource_type"] == "CLUSTER" and row["operation"] == "IdempotentWrite"


def test_a_filter_without_principal_or_operation_matches_every_acl_of_the_resource() -> None:
    (f,) = acls._bindings(_args("remove", "--group", "g"), filter_=True)
    assert (f.principal, f.host, f.operation, f.permission_type) == (
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    (named,) = acls._bindings(_args("remove", "--deny-principal", "User:x", "--group", "g"), filter_=True)
    assert (named.principal, named.host, named.operation) == (
        "User:x",
        "*",
        AclOperation.ALL,
    )  # as Kafka's tool


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--topic", "t"], "name a principal"),
        (["--allow-principal", "User:a"], "name a resource"),
        (["--allow-principal", "User:a", "--topic", "t", "--operation", "fly"], "unknown --operation 'fly'"),
        (["--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type", "any"], "only filters"),
    ],
)
def test_usage_errors(flags: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        acls._bindings(_args("add", *flags), filter_=False)
