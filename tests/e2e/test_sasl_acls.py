"""SASL principals meet ACLs: a `skiff playground` with a PLAINTEXT and a SASL_SSL listener
and the authorizer on. SCRAM users made with `skiff users`; ACLs created by a super user
through confluent-kafka's admin API. The principal an ACL names is the SASL user's, so:
alice (allowed) produces and consumes, bob (no ACL) is refused with Kafka's authorization
errors until an ACL for him is created, after which his very next request succeeds, and
anonymous PLAINTEXT clients are refused."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.support.agents import _spawn, skiff_command
from tests.support.s3servers import free_port
from tests.support.tls import Pki, make_pki

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
TOPIC = "orders"


@dataclass
class Cluster:
    plain: int
    sasl: int
    pki: Pki

    def conf(self, user: str | None) -> dict[str, Any]:
        if user is None:
            return {"bootstrap.servers": f"127.0.0.1:{self.plain}"}
        return {
            "bootstrap.servers": f"127.0.0.1:{self.sasl}",
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": USERS[user],
            "ssl.ca.location": str(self.pki.ca),
        }


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("sasl-acls")
    pki = make_pki(tmp / "pki")
    plain, sasl, mport = free_port(), free_port(), free_port()
    env = {
        "SKIFF_LISTENERS": f"PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{sasl}",
        "SKIFF_SSL_CERTFILE": str(pki.server_cert),
        "SKIFF_SSL_KEYFILE": str(pki.server_key),
        "SKIFF_AUTHORIZER_ENABLED": "true",
        "SKIFF_SUPER_USERS": "User:admin",
        "SKIFF_DEFAULT_PARTITIONS": "2",
        "SKIFF_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
    }
    args = ["playground", "--data-dir", str(tmp / "data"), "--port", str(plain)]
    args += ["--metadata-port", str(mport), "--compaction-interval-ms", "0"]
    proc = _spawn(args, plain, tmp / "playground.log", env)
    try:
        for user, password in USERS.items():
            done = subprocess.run(
                skiff_command()
                + [
                    "users",
                    "create",
                    user,
                    "--metadata",
                    f"http://127.0.0.1:{mport}",
                    "--password",
                    password,
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0, done.stderr
        c = Cluster(plain, sasl, pki)
        admin = AdminClient(c.conf("admin"))  # held: a collected client cancels its futures
        admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(timeout=30)
        yield c
    finally:
        proc.kill(signal.SIGTERM)


def _allow(c: Cluster, principal: str, resource: ResourceType, name: str, *ops: AclOperation) -> None:
    admin = AdminClient(c.conf("admin"))
    bindings = [
        AclBinding(resource, name, ResourcePatternType.LITERAL, principal, "*", op, AclPermissionType.ALLOW)
        for op in ops
    ]
    for future in admin.create_acls(bindings).values():
        future.result(timeout=30)


def _produce_error(conf: dict[str, Any]) -> KafkaError | None:
    """The delivery error of one record (None: acked)."""
    errors: list[KafkaError | None] = []
    p = Producer({**conf, "message.timeout.ms": 10_000, "retries": 0})
    p.produce(TOPIC, b"v", partition=0, on_delivery=lambda err, _msg: errors.append(err))
    p.flush(30)
    assert len(errors) == 1
    return errors[0]


def _consume(conf: dict[str, Any], group: str, count: int) -> list[bytes]:
    cons = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    cons.assign([TopicPartition(TOPIC, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < count and time.monotonic() < deadline:
            m = cons.poll(0.5)
            if m is None:
                continue
            if m.error():
                raise KafkaException(m.error())
            got.append(m.value() or b"")
        cons.commit(asynchronous=False)
    finally:
        cons.close()
    return got


def test_sasl_principals_are_what_acls_name(cluster: Cluster) -> None:
    _allow(cluster, "User:alice", ResourceType.TOPIC, TOPIC, AclOperation.WRITE, AclOperation.READ)
    _allow(cluster, "User:alice", ResourceType.GROUP, "alice-group", AclOperation.READ)

    assert _produce_error(cluster.conf("alice")) is None
    assert _consume(cluster.conf("alice"), "alice-group", 1) == [b"v"]

    refused = _produce_error(cluster.conf("bob"))
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    anonymous = _produce_error(cluster.conf(None))
    assert anonymous is not None and anonymous.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    # bob's own ACL takes effect on his next request, without a restart
    _allow(cluster, "User:bob", ResourceType.TOPIC, TOPIC, AclOperation.WRITE)
    assert _produce_error(cluster.conf("bob")) is None
    # ... and only for what it grants: reading still needs READ on the topic and the group
    with pytest.raises(KafkaException) as e:
        _consume(cluster.conf("bob"), f"bob-{uuid.uuid4()}", 1)
    assert e.value.args[0].code() in (
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
    )

    # the super user passes without any ACL, and sees every binding
    admin = AdminClient(cluster.conf("admin"))
    from confluent_kafka.admin import AclBindingFilter

    everything = AclBindingFilter(  # None: any name, principal, host (librdkafka's filter)
        ResourceType.ANY,
        None,  # type: ignore[arg-type]
        ResourcePatternType.ANY,
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    principals = {b.principal for b in admin.describe_acls(everything).result(timeout=30)}
    assert principals == {"User:alice", "User:bob"}


def _acls(cluster: Cluster, user: str, tmp: Any, *args: str) -> subprocess.CompletedProcess[str]:
    """`skiff acls ...` through the SASL_SSL listener as `user` (a kafka-acls.sh style
    --command-config file)."""
    props = tmp / f"{user}.properties"
    props.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        f"sasl.username={user}\nsasl.password={USERS[user]}\nssl.ca.location={cluster.pki.ca}\n"
    )
    bootstrap = ["--bootstrap-server", f"127.0.0.1:{cluster.sasl}", "--command-config", str(props)]
    return subprocess.run(
        [*skiff_command(), "acls", *args, *bootstrap], capture_output=True, text=True, timeout=60, check=False
    )


def test_skiff_acls_adds_lists_and_removes_as_kafka_acls_does(cluster: Cluster, tmp_path: Any) -> None:
    """`skiff acls` (CreateAcls, DescribeAcls, DeleteAcls through an agent): what it adds is
    what confluent-kafka's admin API then describes, the filters are Kafka's (match finds a
    prefixed binding that applies), a user without Alter on the cluster is refused with
    Kafka's code, and usage errors are one line."""
    topic = f"cli-{uuid.uuid4().hex[:6]}"
    added = _acls(
        cluster, "admin", tmp_path, "add", "--allow-principal", "User:carol",
        "--operation", "Read", "--operation", "describe", "--topic", topic,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert added.stdout.startswith("Added 2 ACL(s).\n")
    listed = _acls(cluster, "admin", tmp_path, "list", "--topic", topic, "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    literal = {"host": "*", "permission": "ALLOW", "resource_type": "TOPIC", "resource": topic}
    assert rows == [
        {"principal": "User:carol", **literal, "operation": op, "pattern_type": "LITERAL"}
        for op in ("Describe", "Read")
    ]
    admin = AdminClient(cluster.conf("admin"))
    from confluent_kafka.admin import AclBindingFilter

    on_topic = AclBindingFilter(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
        None, None, AclOperation.ANY, AclPermissionType.ANY,  # type: ignore[arg-type]
    )  # fmt: skip
    described = admin.describe_acls(on_topic).result(timeout=30)
    assert sorted((b.principal, b.operation.name) for b in described) == [
        ("User:carol", "DESCRIBE"),
        ("User:carol", "READ"),
    ]

    prefix = topic[:5]
    denied = _acls(
        cluster, "admin", tmp_path, "add", "--deny-principal", "User:carol", "--deny-host", "127.0.0.9",
        "--operation", "Write", "--topic", prefix, "--resource-pattern-type", "prefixed",
    )  # fmt: skip
    assert denied.returncode == 0, denied.stderr
    matching = _acls(
        cluster, "admin", tmp_path, "list", "--topic", topic, "--resource-pattern-type", "match", "--json"
    )
    assert {(r["operation"], r["permission"], r["pattern_type"]) for r in json.loads(matching.stdout)} == {
        ("Read", "ALLOW", "LITERAL"),
        ("Describe", "ALLOW", "LITERAL"),
        ("Write", "DENY", "PREFIXED"),
    }
    table = _acls(
        cluster, "admin", tmp_path, "list", "--topic", prefix, "--resource-pattern-type", "prefixed"
    ).stdout
    assert ["User:carol", "127.0.0.9", "Write", "DENY", "TOPIC", prefix, "PREFIXED"] in [
        line.split() for line in table.splitlines()
    ]

    refused = _acls(cluster, "alice", tmp_path, "add", "--allow-principal", "User:alice", "--cluster")
    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr, (
        refused.stderr
    )

    removed = _acls(
        cluster,
        "admin",
        tmp_path,
        "remove",
        "--allow-principal",
        "User:carol",
        "--operation",
        "Read",
        "--topic",
        topic,
    )
    assert removed.returncode == 0 and removed.stdout.startswith("Removed 1 ACL(s).\n"), removed.stdout
    left = json.loads(_acls(cluster, "admin", tmp_path, "list", "--topic", topic, "--json").stdout)
    assert [r["operation"] for r in left] == ["Describe"]
    # no principal: every ACL of the resource, as kafka-acls.sh --remove does
    for args in (["--topic", topic], ["--topic", prefix, "--resource-pattern-type", "prefixed"]):
        assert _acls(cluster, "admin", tmp_path, "remove", *args).returncode == 0
    assert json.loads(_acls(cluster, "admin", tmp_path, "list", "--topic", topic, "--json").stdout) == []

    for args, message in (
        (["add", "--topic", topic], "name a principal"),
        (["remove", "--allow-principal", "User:x"], "name a resource"),
        (
            ["add", "--allow-principal", "User:x", "--operation", "Fly", "--topic", topic],
            "unknown --operation 'Fly'",
        ),
        (
            ["add", "--allow-principal", "User:x", "--topic", topic, "--resource-pattern-type", "match"],
            "only filters",
        ),
    ):
        bad = _acls(cluster, "admin", tmp_path, *args)
        assert bad.returncode in (1, 2) and bad.stderr.count("\n") == 1 and message in bad.stderr, (
            args,
            bad.stderr,
        )


def test_skiff_acls_without_an_agent_is_one_line() -> None:
    closed = free_port()  # nothing listens there
    done = subprocess.run(
        [
            *skiff_command(),
            "acls",
            "list",
            "--bootstrap-server",
            f"127.0.0.1:{closed}",
            "--timeout-ms",
            "2000",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done
    # librdkafka's own timeout or the command's, whichever ends first: one line either way
    assert done.stderr.startswith(f"skiff acls: cannot reach an agent at 127.0.0.1:{closed}: "), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
