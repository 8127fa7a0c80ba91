"""Real Kafka clients over TLS and SASL against `skiff playground` (a subprocess) with four
listeners: PLAINTEXT, SASL_SSL, SSL (client certificates requested) and SASL_PLAINTEXT.
Users are made with `skiff users` over the metadata HTTP API; certificates are made at test
time (tests/support/tls.py).

Each client: right credentials produce and consume; wrong ones are refused with Kafka's
SASL_AUTHENTICATION_FAILED, surfaced as the client's authentication error. Also: plaintext
to the TLS listener fails cleanly, and a client bootstrapped on one listener is sent to
that listener's addresses.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from tests.support.agents import SkiffProcess, _spawn, skiff_command
from tests.support.java_client import JavaClient, JavaClientError
from tests.support.s3servers import free_port
from tests.support.tls import Pki, make_pki

USER, PASSWORD = "alice", "alice-secret"


@dataclass
class Cluster:
    proc: SkiffProcess
    pki: Pki
    ports: dict[str, int]
    metadata_url: str

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"


def _skiff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(skiff_command() + list(args), capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("secure")
    pki = make_pki(tmp / "pki")
    ports = {name: free_port() for name in ("PLAINTEXT", "SASL_SSL", "SSL", "SASL_PLAINTEXT")}
    mport = free_port()
    env = {
        "SKIFF_LISTENERS": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "SKIFF_SSL_CERTFILE": str(pki.server_cert),
        "SKIFF_SSL_KEYFILE": str(pki.server_key),
        "SKIFF_SSL_CAFILE": str(pki.ca),
        "SKIFF_SSL_CLIENT_AUTH": "requested",
        "SKIFF_SCRAM_CREDENTIAL_CACHE_MS": "0",  # password changes in tests apply at once
        "SKIFF_DEFAULT_PARTITIONS": "2",
        "SKIFF_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
    }
    args = ["playground", "--data-dir", str(tmp / "data"), "--port", str(ports["PLAINTEXT"])]
    args += ["--metadata-port", str(mport), "--compaction-interval-ms", "0"]
    proc = _spawn(args, ports["PLAINTEXT"], tmp / "playground.log", env)
    try:
        url = f"http://127.0.0.1:{mport}"
        done = _skiff("users", "create", USER, "--metadata", url, "--password", PASSWORD)
        assert done.returncode == 0, done.stderr
        yield Cluster(proc, pki, ports, url)
    finally:
        proc.kill(signal.SIGTERM)


def _sasl_conf(
    c: Cluster, mechanism: str, password: str = PASSWORD, listener: str = "SASL_SSL"
) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": c.bootstrap(listener),
        "security.protocol": listener,
        "sasl.mechanism": mechanism,
        "sasl.username": USER,
        "sasl.password": password,
    }
    if listener.endswith("SSL"):
        conf["ssl.ca.location"] = str(c.pki.ca)
    return conf


def _ssl_conf(c: Cluster, cert: bool = True) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": c.bootstrap("SSL"),
        "security.protocol": "SSL",
        "ssl.ca.location": str(c.pki.ca),
    }
    if cert:
        conf["ssl.certificate.location"] = str(c.pki.client_cert)
        conf["ssl.key.location"] = str(c.pki.client_key)
    return conf


def confluent_roundtrip(conf: dict[str, Any], topic: str, count: int = 20) -> list[bytes]:
    """Create the topic, produce `count` values, consume them back (partition 0 and 1)."""
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=30)
    p = Producer({**conf, "linger.ms": 5})
    for i in range(count):
        p.produce(topic, value=f"v{i}".encode(), partition=i % 2)
    assert p.flush(30) == 0
    cons = Consumer({**conf, "group.id": f"g-{uuid.uuid4()}", "enable.auto.commit": False})
    cons.assign([TopicPartition(topic, p_, 0) for p_ in range(2)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < count and time.monotonic() < deadline:
            m = cons.poll(0.5)
            if m is None or m.error():
                continue
            got.append(m.value())
    finally:
        cons.close()
    return got


def confluent_auth_error(conf: dict[str, Any], timeout_s: float = 10.0) -> KafkaError:
    """The error librdkafka reports when its login is refused (it never gets metadata).

    librdkafka logs in to the bootstrap broker as soon as the client exists and reports the
    refusal through `error_cb` (run from `poll`): the test waits for that, not for a
    metadata request to time out (it retries the login until its timeout, 10 s each)."""
    errors: list[KafkaError] = []
    admin = AdminClient({**conf, "error_cb": errors.append})

    def refused() -> list[KafkaError]:
        return [e for e in errors if e.code() == KafkaError._AUTHENTICATION]

    deadline = time.monotonic() + timeout_s
    while not refused() and time.monotonic() < deadline:
        admin.poll(0.05)
    auth = refused()
    assert auth, f"no authentication error among {errors}"
    with pytest.raises(KafkaException):  # and no metadata for a client that is not logged in
        admin.list_topics(timeout=0.5)
    return auth[0]


# --- confluent-kafka (librdkafka) ---------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_confluent_sasl_ssl_right_credentials(cluster: Cluster, mechanism: str) -> None:
    topic = f"sasl-{mechanism.lower()}-{uuid.uuid4().hex[:6]}"
    got = confluent_roundtrip(_sasl_conf(cluster, mechanism), topic)
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(20))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_confluent_sasl_ssl_wrong_password_is_an_authentication_error(
    cluster: Cluster, mechanism: str
) -> None:
    err = confluent_auth_error(_sasl_conf(cluster, mechanism, password="wrong"))
    assert "SASL authentication error" in err.str() or "Authentication failed" in err.str(), err.str()


def test_confluent_ssl_with_client_certificate(cluster: Cluster) -> None:
    got = confluent_roundtrip(_ssl_conf(cluster), f"mtls-{uuid.uuid4().hex[:6]}")
    assert len(got) == 20


def test_confluent_is_sent_to_the_listener_it_bootstrapped_on(cluster: Cluster) -> None:
    for listener, conf in (
        ("SASL_SSL", _sasl_conf(cluster, "SCRAM-SHA-512")),
        ("SASL_PLAINTEXT", _sasl_conf(cluster, "SCRAM-SHA-256", listener="SASL_PLAINTEXT")),
        ("SSL", _ssl_conf(cluster)),
        ("PLAINTEXT", {"bootstrap.servers": cluster.bootstrap("PLAINTEXT")}),
    ):
        md = AdminClient(conf).list_topics(timeout=30)
        assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", cluster.ports[listener])]


def test_confluent_admin_alters_and_describes_scram_credentials(cluster: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap("PLAINTEXT")})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    futs = admin.alter_user_scram_credentials([UserScramCredentialUpsertion("carol", info, b"carol-pw")])
    futs["carol"].result(timeout=30)
    desc = admin.describe_user_scram_credentials(["carol"])["carol"].result(timeout=30)
    assert [(c.mechanism, c.iterations) for c in desc.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 4096)
    ]
    conf = {**_sasl_conf(cluster, "SCRAM-SHA-256"), "sasl.username": "carol", "sasl.password": "carol-pw"}
    assert AdminClient(conf).list_topics(timeout=30).brokers


# --- kafka-python ---------------------------------------------------------------------------------


def _kafka_python_conf(c: Cluster, mechanism: str, password: str = PASSWORD) -> dict[str, Any]:
    return {
        "bootstrap_servers": c.bootstrap("SASL_SSL"),
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": USER,
        "sasl_plain_password": password,
        "ssl_cafile": str(c.pki.ca),
    }


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_kafka_python_sasl_ssl(cluster: Cluster, mechanism: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    topic = f"kp-{mechanism.lower()}-{uuid.uuid4().hex[:6]}"
    conf = _kafka_python_conf(cluster, mechanism)
    prod = KafkaProducer(**conf)
    for i in range(10):
        prod.send(topic, value=f"k{i}".encode(), partition=0).get(timeout=30)
    prod.close()
    cons = KafkaConsumer(**conf, consumer_timeout_ms=10_000, auto_offset_reset="earliest")
    cons.assign([KTP(topic, 0)])
    got = [m.value for _, m in zip(range(10), cons, strict=False)]
    cons.close()
    assert got == [f"k{i}".encode() for i in range(10)]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_kafka_python_wrong_password(
    cluster: Cluster, mechanism: str, caplog: pytest.LogCaptureFixture
) -> None:
    """kafka-python 3 retries bootstrap connections whatever failed them and then raises a
    timeout; what it got from the agent is in its log: the SaslAuthenticationFailedError.
    The constructor's eager bootstrap is bounded by `bootstrap_timeout_ms` (30 s by
    default), not by `max_block_ms`: both are set, or the test waits 30 s for nothing."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    caplog.set_level(logging.WARNING, logger="kafka")
    with pytest.raises(KafkaTimeoutError):
        KafkaProducer(
            **_kafka_python_conf(cluster, mechanism, password="wrong"),
            bootstrap_timeout_ms=3_000,
            max_block_ms=3_000,
        )
    seen = [r.getMessage() for r in caplog.records if "SaslAuthenticationFailedError" in r.getMessage()]
    assert seen, [r.getMessage() for r in caplog.records]
    assert all("Authentication failed" in m for m in seen)
    assert not [
        r for r in caplog.records if "socket disconnected" in r.getMessage()
    ]  # error read before the close


# --- kcat (librdkafka 2.0.2) ----------------------------------------------------------------------


def _kcat(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kcat", *args], input=stdin, capture_output=True, text=True, timeout=60)


def test_kcat_sasl_ssl_scram(cluster: Cluster) -> None:
    topic = f"kcat-{uuid.uuid4().hex[:6]}"
    x = ["-b", cluster.bootstrap("SASL_SSL"), "-X", "security.protocol=SASL_SSL"]
    x += [
        "-X",
        "sasl.mechanisms=SCRAM-SHA-512",
        "-X",
        f"sasl.username={USER}",
        "-X",
        f"sasl.password={PASSWORD}",
    ]
    x += ["-X", f"ssl.ca.location={cluster.pki.ca}"]
    admin = AdminClient(_sasl_conf(cluster, "SCRAM-SHA-512"))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    produced = _kcat(*x, "-t", topic, "-P", stdin="one\ntwo\nthree\n")
    assert produced.returncode == 0, produced.stderr
    consumed = _kcat(*x, "-t", topic, "-C", "-e", "-o", "beginning")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.split() == ["one", "two", "three"]
    bad = [a.replace(f"sasl.password={PASSWORD}", "sasl.password=nope") for a in x]
    refused = _kcat(*bad, "-L", "-m", "10")
    assert refused.returncode != 0
    assert "Authentication failed" in refused.stderr or "SASL authentication error" in refused.stderr, (
        refused.stderr
    )


def test_kcat_ssl_client_certificate(cluster: Cluster) -> None:
    x = [
        "-b",
        cluster.bootstrap("SSL"),
        "-X",
        "security.protocol=SSL",
        "-X",
        f"ssl.ca.location={cluster.pki.ca}",
    ]
    x += [
        "-X",
        f"ssl.certificate.location={cluster.pki.client_cert}",
        "-X",
        f"ssl.key.location={cluster.pki.client_key}",
    ]
    listed = _kcat(*x, "-L", "-J")
    assert listed.returncode == 0, listed.stderr
    brokers = json.loads(listed.stdout)["brokers"]
    assert [b["name"] for b in brokers] == [f"127.0.0.1:{cluster.ports['SSL']}"]  # the SSL listener's address


def test_kcat_plaintext_to_tls_listener_fails_cleanly(cluster: Cluster) -> None:
    refused = _kcat("-b", cluster.bootstrap("SSL"), "-L", "-m", "5")
    assert refused.returncode != 0
    assert cluster.proc.alive()
    log = cluster.proc.log.read_text()
    assert "Traceback" not in log
    assert "TLS handshake with" in log  # logged (once per minute at INFO)


# --- the Java client --------------------------------------------------------------------------------


def _java_props(c: Cluster, mechanism: str, password: str = PASSWORD) -> dict[str, str]:
    module = (
        "org.apache.kafka.common.security.plain.PlainLoginModule"
        if mechanism == "PLAIN"
        else "org.apache.kafka.common.security.scram.ScramLoginModule"
    )
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": mechanism,
        "sasl.jaas.config": f'{module} required username="{USER}" password="{password}";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(c.pki.ca),
    }


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_java_client_sasl_ssl(cluster: Cluster, java_client: JavaClient, mechanism: str) -> None:
    topic = f"java-{mechanism.lower()}-{uuid.uuid4().hex[:6]}"
    props = _java_props(cluster, mechanism)
    java_client.produce(cluster.bootstrap("SASL_SSL"), topic, partitions=2, count=30, props=props)
    java_client.consume(cluster.bootstrap("SASL_SSL"), topic, expect=30, partitions=2, props=props)


def test_java_client_wrong_password(cluster: Cluster, java_client: JavaClient) -> None:
    props = _java_props(cluster, "SCRAM-SHA-512", password="wrong")
    with pytest.raises(JavaClientError) as e:
        java_client.produce(
            cluster.bootstrap("SASL_SSL"), "java-denied", partitions=1, count=1, props=props, timeout_s=90
        )
    assert "SaslAuthenticationException" in str(e.value) or "Authentication failed" in str(e.value)


def test_java_client_ssl_client_certificate(
    cluster: Cluster, java_client: JavaClient, tmp_path: Path
) -> None:
    # The Java client reads a PEM key store as certificate chain + PKCS#8 key in one file.
    keystore = tmp_path / "client-keystore.pem"
    keystore.write_text(cluster.pki.client_key.read_text() + cluster.pki.client_cert.read_text())
    props = {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(cluster.pki.ca),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
    }
    topic = f"java-mtls-{uuid.uuid4().hex[:6]}"
    java_client.produce(cluster.bootstrap("SSL"), topic, partitions=1, count=5, props=props)
    java_client.consume(cluster.bootstrap("SSL"), topic, expect=5, partitions=1, props=props)


def test_java_admin_alters_and_describes_scram_credentials(cluster: Cluster, java_client: JavaClient) -> None:
    """Admin.alterUserScramCredentials / describeUserScramCredentials, then the new user logs in."""
    bootstrap = cluster.bootstrap("PLAINTEXT")
    done = java_client.admin(bootstrap, "alter-scram", "dave", "SCRAM-SHA-512", 4096, "dave-pw")
    assert done == {"type": "scram-altered", "user": "dave"}
    desc = java_client.admin(bootstrap, "describe-scram", "dave")
    assert desc["credentials"] == [{"mechanism": "SCRAM-SHA-512", "iterations": 4096}]
    conf = {**_sasl_conf(cluster, "SCRAM-SHA-512"), "sasl.username": "dave", "sasl.password": "dave-pw"}
    assert AdminClient(conf).list_topics(timeout=30).brokers


def test_skiff_users_password_change_and_delete_take_effect(cluster: Cluster) -> None:
    """The cluster caches credentials for 0 ms: a change applies to the next login."""
    url = cluster.metadata_url
    assert _skiff("users", "create", "erin", "--metadata", url, "--password", "one").returncode == 0
    listed = json.loads(_skiff("users", "list", "--metadata", url, "--json").stdout)
    assert {
        "user": "erin",
        "credentials": [
            {"mechanism": "SCRAM-SHA-256", "iterations": 8192},
            {"mechanism": "SCRAM-SHA-512", "iterations": 8192},
        ],
    } in listed

    def conf(password: str) -> dict[str, Any]:
        return {**_sasl_conf(cluster, "SCRAM-SHA-256"), "sasl.username": "erin", "sasl.password": password}

    assert AdminClient(conf("one")).list_topics(timeout=30).brokers
    assert _skiff("users", "create", "erin", "--metadata", url, "--password", "two").returncode == 0
    confluent_auth_error(conf("one"))
    assert AdminClient(conf("two")).list_topics(timeout=30).brokers
    assert _skiff("users", "delete", "erin", "--metadata", url).returncode == 0
    confluent_auth_error(conf("two"))
    gone = _skiff("users", "delete", "erin", "--metadata", url)
    assert gone.returncode == 1 and "no user 'erin'" in gone.stderr


def test_kafka_python_admin_scram_credentials_over_sasl_ssl(cluster: Cluster) -> None:
    """kafka-python's KafkaAdminClient, itself logged in over SASL_SSL: upsert, describe,
    the new user logs in, delete (and deleting again is RESOURCE_NOT_FOUND)."""
    from kafka import KafkaAdminClient
    from kafka.admin import ScramMechanism as KScram
    from kafka.admin import UserScramCredentialDeletion, UserScramCredentialUpsertion

    admin = KafkaAdminClient(**_kafka_python_conf(cluster, "SCRAM-SHA-512"))
    try:
        up = UserScramCredentialUpsertion("frank", KScram.SCRAM_SHA_512, "frank-pw", iterations=4096)
        assert admin.alter_user_scram_credentials([up]) == {"frank": None}
        desc = admin.describe_user_scram_credentials(["frank", "nobody"])
        assert desc["frank"]["error"] is None
        assert [(c["mechanism"], c["iterations"]) for c in desc["frank"]["credential_infos"]] == [
            (KScram.SCRAM_SHA_512, 4096)
        ]
        assert desc["nobody"]["error"]  # RESOURCE_NOT_FOUND, with Kafka's message
        conf = {**_sasl_conf(cluster, "SCRAM-SHA-512"), "sasl.username": "frank", "sasl.password": "frank-pw"}
        assert AdminClient(conf).list_topics(timeout=30).brokers
        gone = UserScramCredentialDeletion("frank", KScram.SCRAM_SHA_512)
        assert admin.alter_user_scram_credentials([gone]) == {"frank": None}
        again = admin.alter_user_scram_credentials([gone])
        assert again["frank"] and "does not exist" in str(again["frank"])
    finally:
        admin.close()
