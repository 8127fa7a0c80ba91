"""What the admin commands ask an agent over the Kafka protocol (confluent-kafka's AdminClient).

`--bootstrap-server HOST:PORT` (the flag every Kafka operator types) names an agent rather
than the metadata service. Skiff's admin commands work on metadata, so they ask the agent
where its metadata service is: every agent describes a read-only broker config
`skiff.metadata.url` (DescribeConfigs on its BROKER resource, as `kafka-configs.sh
--bootstrap-server B --entity-type brokers --entity-name N --describe --all` shows it),
the agent's `advertised_metadata_url`, else its metadata URL when that is http(s) (without
any user:password part). An agent that embeds metadata in a database (a database URL, not
a service) advertises nothing, and the command says to pass `--metadata`.

Timestamp lookups (`skiff groups reset-offsets --to-datetime`) go through an agent too:
ListOffsets by timestamp, which the agent answers exact to the record (it refines the
chunk metadata names by reading the chunk), as Kafka's own tool does.

The client settings (`security.protocol`, SASL, TLS) come from the profile's `[kafka]`
table or `--command-config` (skiff.cli.profile). Every call is bounded by the command's
timeout.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from skiff.cli.errors import CommandError

METADATA_URL_CONFIG = "skiff.metadata.url"


def kafka_admin(bootstrap: str, kafka_config: dict[str, str], timeout_ms: int) -> Any:
    from confluent_kafka.admin import AdminClient

    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "socket.timeout.ms": max(timeout_ms, 10),
        "log_level": 0,  # librdkafka's own lines (one per reconnect); the failure is our one line
    }
    conf.update(kafka_config)
    return AdminClient(conf)


def unreachable(bootstrap: str, exc: BaseException) -> CommandError:
    error = exc.args[0] if exc.args else exc
    text = error.str() if hasattr(error, "str") else str(error)  # a KafkaError's own message
    return CommandError(f"cannot reach an agent at {bootstrap}: {text}")


def metadata_url_from_agent(bootstrap: str, kafka_config: dict[str, str], timeout_ms: int) -> str:
    """The metadata URL the agent at `bootstrap` advertises (module docstring)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource, ResourceType  # type: ignore[attr-defined]  # re-exported without __all__

    admin = kafka_admin(bootstrap, kafka_config, timeout_ms)
    timeout_s = timeout_ms / 1000
    try:
        brokers = admin.list_topics(timeout=timeout_s).brokers
        if not brokers:
            raise CommandError(f"the agent at {bootstrap} names no agents")
        node_id = min(brokers)
        resource = ConfigResource(ResourceType.BROKER, str(node_id))
        future = admin.describe_configs([resource], request_timeout=timeout_s)[resource]
        entries = future.result(timeout=timeout_s)
    except KafkaException as e:
        raise unreachable(bootstrap, e) from None
    entry = entries.get(METADATA_URL_CONFIG)
    if entry is None:
        raise CommandError(f"the agent at {bootstrap} does not say where metadata is ({METADATA_URL_CONFIG})")
    if not entry.value:
        raise CommandError(
            f"the agent at {bootstrap} advertises no metadata URL (it embeds its metadata database,"
            " or set its advertised_metadata_url): pass --metadata URL"
        )
    return str(entry.value)


def offsets_for_times(
    bootstrap: str,
    kafka_config: dict[str, str],
    timeout_ms: int,
    queries: Sequence[tuple[str, int, int]],
) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the first offset whose timestamp is at or after the query's
    (ms), -1 where there is none: Kafka's ListOffsets by timestamp, through an agent."""
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]  # re-exported without __all__

    if not queries:
        return {}
    admin = kafka_admin(bootstrap, kafka_config, timeout_ms)
    wanted = {TopicPartition(t, p): OffsetSpec.for_timestamp(ts) for t, p, ts in queries}
    try:
        futures = admin.list_offsets(wanted, request_timeout=timeout_ms / 1000)
        return {(tp.topic, tp.partition): int(f.result().offset) for tp, f in futures.items()}
    except KafkaException as e:
        raise unreachable(bootstrap, e) from None
