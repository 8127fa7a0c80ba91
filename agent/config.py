"""The agent's configuration: one typed, frozen object built from flags and `SKIFF_*` variables.

Every field `some_name` can be set three ways, strongest first:

1. the command-line flag `--some-name VALUE` (see `add_arguments` / `from_args`);
2. the environment variable `SKIFF_SOME_NAME`;
3. the default written below.

Values are parsed by the field's type (`agent.config_values`: integers accept `_`
separators and the binary suffixes `KiB`, `MiB`, `GiB`; booleans `1/0, true/false,
yes/no, on/off`; an empty string sets an optional field to None).
`AgentConfig.__post_init__` checks ranges (`agent.config_checks`), so an invalid setting
fails at start-up with the name of the field, never later on the hot path.

Identity: `agent_id` is the agent's name in metadata (a pod name works well; unset, the
hostname and process id). Metadata refuses a live agent id heartbeated from another
address, and the agent then fails at start-up. Kafka
clients need integer broker ids, derived from agent ids by `agent.routing.node_id_for_agent`
(a decimal `agent_id` is used as is, anything else is hashed to 31 bits).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import socket
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skiff.agent.network.listeners import Listener

from skiff.agent.config_checks import check_config
from skiff.agent.config_values import ENV_PREFIX, GiB, KiB, MiB, env_var, flag, parse_value

__all__ = [
    "ENV_PREFIX",
    "GiB",
    "KiB",
    "MiB",
    "AgentConfig",
    "add_arguments",
    "describe_fields",
    "env_var",
    "flag",
]

_WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")

# File descriptors kept for the agent's own use when `max_connections` is derived.
RESERVED_FILE_DESCRIPTORS = 256


def _default_agent_id() -> str:
    """`<hostname>-<pid>`: unique among the processes of one host (two agents started on one
    machine must not share an identity), and stable across restarts of a container, whose
    hostname (the pod name) stays and whose agent is pid 1 again."""
    return f"{socket.gethostname() or 'skiff-agent'}-{os.getpid()}"


@dataclass(frozen=True)
class AgentConfig:
    # --- identity and listener ------------------------------------------------------
    agent_id: str = field(default_factory=_default_agent_id, metadata={"help": "agent name in metadata"})
    host: str = field(default="0.0.0.0", metadata={"help": "address the Kafka listener binds"})
    port: int = field(default=9092, metadata={"help": "port the Kafka listener binds (0: any free port)"})
    advertised_host: str | None = field(
        default=None,
        metadata={
            "help": "host clients are told to connect to (default: host, or the hostname if host "
            "is a wildcard)"
        },
    )
    advertised_port: int | None = field(
        default=None, metadata={"help": "port clients are told to connect to (default: the bound port)"}
    )
    zone: str | None = field(
        default=None,
        metadata={
            "help": "availability zone: reported as the broker rack; clients of this zone are "
            "routed to agents of it (docs/operations.md, Zones)"
        },
    )
    zone_from_node: str | None = field(
        default=None,
        metadata={
            "help": "Kubernetes node name (spec.nodeName): with no zone set, the zone is read at "
            "start-up from this node's topology.kubernetes.io/zone label (needs get on nodes)"
        },
    )
    cluster_id: str = field(default="skiff", metadata={"help": "cluster id reported to clients"})

    # --- listeners and security (agent.listeners, agent.sasl) --------------------------
    listeners: str | None = field(
        default=None,
        metadata={
            "help": "Kafka listeners, NAME://host:port,... (e.g. PLAINTEXT://0.0.0.0:9092,"
            "SASL_SSL://0.0.0.0:9094); unset: one PLAINTEXT listener on host:port"
        },
    )
    advertised_listeners: str | None = field(
        default=None,
        metadata={
            "help": "address clients are told per listener, NAME://host:port,... (default per listener: "
            "advertised_host or its bind host, and its bound port)"
        },
    )
    listener_security_protocol_map: str | None = field(
        default=None,
        metadata={
            "help": "NAME:PROTOCOL,... (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL); a listener named "
            "after a protocol needs no entry"
        },
    )
    ssl_certfile: str | None = field(
        default=None, metadata={"help": "PEM certificate (chain) of TLS listeners"}
    )
    ssl_keyfile: str | None = field(
        default=None,
        metadata={"help": "PEM private key of TLS listeners, unencrypted (default: in ssl_certfile)"},
    )
    ssl_cafile: str | None = field(
        default=None, metadata={"help": "PEM CA certificates that client certificates are verified against"}
    )
    ssl_client_auth: str = field(
        default="none",
        metadata={
            "help": "client certificates on TLS listeners: none, requested (verified if sent) or required; "
            "a verified certificate's subject is the principal User:CN=..."
        },
    )
    ssl_handshake_timeout_ms: int = field(
        default=10_000,
        metadata={"help": "a TLS handshake not done within this time closes the connection"},
    )
    sasl_enabled_mechanisms: str = field(
        default="PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        metadata={"help": "SASL mechanisms offered on SASL_PLAINTEXT/SASL_SSL listeners"},
    )
    connections_max_reauth_ms: int = field(
        default=0,
        metadata={
            "help": "SASL session lifetime (KIP-368, Kafka's connections.max.reauth.ms): clients must "
            "re-authenticate on the connection within it, else the connection is closed (0: never)"
        },
    )
    scram_credential_cache_ms: int = field(
        default=5_000,
        metadata={
            "help": "how long SCRAM credentials read from metadata are reused: a changed or deleted "
            "password takes effect for new logins within this time (0: read at every login)"
        },
    )

    # --- where state lives ----------------------------------------------------------
    bucket_url: str = field(
        default="file://./skiff-data/bucket",
        metadata={"help": "s3://bucket/prefix, file:///path or memory://"},
    )
    metadata_url: str = field(
        default="sqlite:///./skiff-data/metadata.db",
        metadata={"help": "http(s)://host:port of `skiff metadata`, or a database URL to embed metadata"},
    )
    advertised_metadata_url: str | None = field(
        default=None,
        metadata={
            "help": "metadata URL told to admin tools that name this agent (--bootstrap-server; broker "
            "config skiff.metadata.url); default: metadata_url if http(s)"
        },
    )

    # --- Kafka protocol server ------------------------------------------------------
    max_request_bytes: int = field(
        default=100 * MiB, metadata={"help": "largest request accepted (Kafka's socket.request.max.bytes)"}
    )
    max_inflight_requests: int = field(
        default=4_096,
        metadata={
            "help": "requests read and not yet answered per connection before the agent stops reading "
            "it: a count cap beside the byte bounds, high enough that a flush interval's worth of small "
            "produce requests never waits"
        },
    )
    connections_max_idle_ms: int = field(
        default=600_000, metadata={"help": "close connections idle this long (0: never)"}
    )

    # --- topics ---------------------------------------------------------------------
    auto_create_topics: bool = field(
        default=True, metadata={"help": "create unknown topics on Metadata requests that allow it"}
    )
    default_partitions: int = field(
        default=1, metadata={"help": "partitions of auto-created topics and of CreateTopics with -1"}
    )
    topic_cache_ttl_ms: int = field(
        default=5_000, metadata={"help": "how long topic name/id lookups are cached"}
    )

    # --- produce path ---------------------------------------------------------------
    flush_interval_ms: int = field(
        default=250,
        metadata={
            "help": "the produce ack target: a file is sealed so that its oldest record is acked "
            "about this long after its client produced it (see flush_seal_lead_max_ms)"
        },
    )
    flush_seal_lead_max_ms: int = field(
        default=50,
        metadata={
            "help": "the most by which a file is sealed before flush_interval_ms after its first "
            "batch: the recent seal-to-commit time (p95 of the last 64 files) plus the time the "
            "batch spent in its client (its CreateTime, trusted only up to this cap), never sooner "
            "than flush_interval_ms after the previous seal (the lead adds no PUTs); 0 seals "
            "exactly flush_interval_ms after the first batch; half of "
            "flush_interval_ms at most, whatever is set"
        },
    )
    flush_max_bytes: int = field(default=8 * MiB, metadata={"help": "file size that triggers a flush"})
    flush_max_batches: int = field(
        default=8_192,
        metadata={
            "help": "record batches (one per partition of a produce request) that trigger a flush: "
            "bounds one file's commit (a row per partition, a few microseconds of planning per "
            "batch) and the acks it releases at once; above what 16 MiB/s of keyed 1 KiB records "
            "puts in a flush interval, so it does not add PUTs there"
        },
    )
    max_inflight_flushes: int = field(default=4, metadata={"help": "concurrent file uploads"})
    max_buffered_bytes: int = field(
        default=64 * MiB, metadata={"help": "produce bytes held before producers are slowed down"}
    )
    commit_retry_ms: int = field(
        default=30_000,
        metadata={
            "help": "how long a file commit whose outcome is unknown (metadata unreachable) is retried, "
            "holding later commits, before its producers get REQUEST_TIMED_OUT"
        },
    )

    # --- fetch path -----------------------------------------------------------------
    fetch_cache_bytes: int = field(default=256 * MiB, metadata={"help": "memory for cached object ranges"})
    chunk_cache_ttl_ms: int = field(
        default=30_000,
        metadata={
            "help": "how long chunk locations learnt from metadata are reused (keep below the GC grace)"
        },
    )
    fetch_poll_interval_ms: int = field(
        default=100,
        metadata={
            "help": "retry interval of the metadata long poll for other agents' commits when it fails; "
            "how long a consumer's tail position is trusted without asking metadata"
        },
    )
    fetch_max_wait_ms_cap: int = field(
        default=30_000, metadata={"help": "upper bound applied to a fetch's max.wait.ms"}
    )
    fetch_max_bytes: int = field(
        default=55 * MiB,
        metadata={
            "help": "upper bound applied to a fetch's max_bytes, the response's size apart from one "
            "oversized first batch (Kafka's fetch.max.bytes)"
        },
    )
    max_partition_fetch_bytes: int = field(
        default=8 * MiB,
        metadata={
            "help": "upper bound applied to each partition's partition_max_bytes in a fetch (also bounds "
            "the chunk locations asked of metadata per partition)"
        },
    )
    fetch_coalesce_gap_bytes: int = field(
        default=1 * MiB,
        metadata={
            "help": "chunks of one object needed by one fetch are read with one ranged GET when at most "
            "this many bytes apart (0: only touching chunks)"
        },
    )
    fetch_verify_crc: bool = field(
        default=True,
        metadata={
            "help": "check the CRC-32C of every batch a fetch returns; a corrupt one makes its partition "
            "KAFKA_STORAGE_ERROR (logged with object and position) instead of serving it"
        },
    )
    fetch_readahead_bytes: int = field(
        default=64 * MiB,
        metadata={
            "help": "per fetch, bytes of the requested partitions' further chunks read along with needed "
            "ones (same GET, only when fetch_read_inflight_bytes has room) and kept in the cache for the "
            "next fetch (0: off; at most fetch_cache_bytes/2)"
        },
    )
    fetch_first_read_object_bytes: int = field(
        default=9 * MiB,
        metadata={
            "help": "a connection's first fetch reads each file it touches that nothing of is cached or "
            "being read from its first needed byte to the file's end, up to this many bytes, in one GET "
            "(a client's first fetch may name only some partitions; the next would GET the rest of each "
            "file again); only when fetch_read_inflight_bytes has room; default flush_max_bytes + 1 MiB "
            "(0: off)"
        },
    )
    fetch_read_inflight_bytes: int = field(
        default=128 * MiB,
        metadata={
            "help": "agent-wide bound on the bytes of ranged GETs in flight for fetches (needed, gap and "
            "read-ahead bytes); cold fetches beyond it wait their turn"
        },
    )

    # --- clients of the bucket and of metadata -----------------------------------------
    s3_connect_timeout_ms: int = field(default=2_000, metadata={"help": "S3 connect timeout"})
    s3_read_timeout_ms: int = field(default=10_000, metadata={"help": "S3 read timeout per attempt"})
    s3_max_attempts: int = field(
        default=3, metadata={"help": "S3 attempts per request (botocore standard retries)"}
    )
    metadata_timeout_ms: int = field(
        default=10_000, metadata={"help": "timeout of one call to the metadata HTTP service"}
    )
    # The credentials of `metadata.wire.credentials` (same variable names as every other client).
    metadata_token: str | None = field(
        default=None,
        repr=False,
        metadata={"help": "bearer token for the metadata service (prefer the token file: flags show in ps)"},
    )
    metadata_token_file: str | None = field(
        default=None, metadata={"help": "file holding the metadata bearer token (a mounted Secret)"}
    )
    metadata_ca_file: str | None = field(
        default=None, metadata={"help": "PEM CA bundle verifying an https:// metadata service"}
    )
    metadata_client_cert: str | None = field(
        default=None, metadata={"help": "client certificate (PEM) when the metadata service requires mTLS"}
    )
    metadata_client_key: str | None = field(
        default=None, metadata={"help": "private key (PEM) of metadata_client_cert"}
    )

    # --- processes ------------------------------------------------------------------
    workers: int = field(
        default=1,
        metadata={
            "help": "worker processes of this agent (one per core): each serves Kafka as its own "
            "broker on every listener's port + its index (metrics on metrics_port + 1 + index), "
            "and one writer process seals, PUTs and commits one file per flush for all of them"
        },
    )
    pod_writer_socket: str = field(
        default="",
        metadata={"help": "set by `skiff agent --workers N` for its workers: the writer's Unix socket"},
    )

    # --- operations -----------------------------------------------------------------
    metrics_port: int = field(
        default=9100,
        metadata={"help": "HTTP port of /metrics, /healthz and /readyz (0: off)"},
    )
    readiness_timeout_ms: int = field(
        default=1_000,
        metadata={"help": "how long metadata and the bucket may take to answer the readiness probe"},
    )
    readiness_probe_interval_ms: int = field(
        default=5_000,
        metadata={
            "help": "how often the agent probes its readiness (a PUT and a GET of a small object in "
            "the bucket, a metadata read); not ready, it leads no partitions and coordinates nothing"
        },
    )
    readiness_failure_threshold: int = field(
        default=3,
        metadata={
            "help": "failed readiness probes in a row that turn a ready agent not ready (one slow "
            "PUT does not move its partitions); while failing, it probes every fifth of the interval"
        },
    )
    shutdown_timeout_ms: int = field(
        default=25_000,
        metadata={
            "help": "on SIGTERM: time to answer in-flight requests, commit buffered produce and "
            "deregister before exiting non-zero (below Kubernetes' 30 s grace period)"
        },
    )

    # --- membership -----------------------------------------------------------------
    heartbeat_interval_ms: int = field(
        default=3_000, metadata={"help": "how often this agent heartbeats and refreshes the agent list"}
    )
    agent_ttl_ms: int = field(
        default=15_000,
        metadata={"help": "an agent silent this long is dropped from the routing view"},
    )

    # --- consumer groups --------------------------------------------------------------
    group_initial_rebalance_delay_ms: int = field(
        default=3_000,
        metadata={
            "help": "how long an empty group's first rebalance waits for more members, re-armed while "
            "new ones arrive, up to the rebalance timeout (Kafka's group.initial.rebalance.delay.ms; "
            "0: no wait)"
        },
    )
    group_min_session_timeout_ms: int = field(
        default=6_000,
        metadata={
            "help": "shortest session.timeout.ms a group member may ask for, else INVALID_SESSION_TIMEOUT "
            "(Kafka's group.min.session.timeout.ms)"
        },
    )
    group_max_session_timeout_ms: int = field(
        default=1_800_000,
        metadata={
            "help": "longest session.timeout.ms a group member may ask for, else INVALID_SESSION_TIMEOUT "
            "(Kafka's group.max.session.timeout.ms)"
        },
    )
    group_consumer_session_timeout_ms: int = field(
        default=45_000,
        metadata={
            "help": "a consumer-protocol (KIP-848) member that does not heartbeat for this long is removed "
            "from its group (Kafka's group.consumer.session.timeout.ms)"
        },
    )
    group_consumer_heartbeat_interval_ms: int = field(
        default=5_000,
        metadata={
            "help": "how often consumer-protocol (KIP-848) members are told to heartbeat (Kafka's "
            "group.consumer.heartbeat.interval.ms)"
        },
    )
    group_lease_ttl_ms: int = field(
        default=10_000,
        metadata={
            "help": "how long a group coordinator's lease in metadata lasts unless renewed: after an "
            "agent dies, its groups move once this has run out (keep it at most agent_ttl_ms; the "
            "agent itself trusts a lease for three quarters of it)"
        },
    )
    group_lease_renew_interval_ms: int = field(
        default=2_000,
        metadata={"help": "how often an agent renews all its group coordinator leases (one request)"},
    )

    # --- authorization (Kafka ACLs; agent.authorizer, agent.acl_cache) --------------------
    authorizer_enabled: bool = field(
        default=False,
        metadata={
            "help": "enforce Kafka ACLs (stored in metadata) on every request (Kafka's "
            "authorizer.class.name); off: every client may do everything and Create/Describe/"
            "DeleteAcls answer SECURITY_DISABLED"
        },
    )
    super_users: str = field(
        default="",
        metadata={
            "help": "principals allowed everything whatever the ACLs say, separated by ';' "
            "(Kafka's super.users, e.g. User:admin;User:ops)"
        },
    )
    allow_everyone_if_no_acl_found: bool = field(
        default=False,
        metadata={
            "help": "allow every principal on a resource no ACL applies to (Kafka's "
            "allow.everyone.if.no.acl.found); off: such resources are super users' only"
        },
    )
    acl_refresh_interval_ms: int = field(
        default=1_000,
        metadata={
            "help": "how often the agent checks metadata's ACL version (one cheap read) and reloads "
            "the ACLs when it moved: another agent's ACL change applies here within this plus two "
            "metadata round trips"
        },
    )

    # --- client quotas (agent.quotas, agent.quota_cache; stored in metadata) ------------------
    quota_refresh_interval_ms: int = field(
        default=1_000,
        metadata={
            "help": "how often the agent reads metadata's client quota version (one cheap read) and "
            "reloads the quotas when it moved: a quota change made through another agent applies "
            "here within this plus two metadata round trips"
        },
    )
    quota_window_num: int = field(
        default=11,
        metadata={"help": "samples in a client's quota rate window (Kafka's quota.window.num)"},
    )
    quota_window_size_seconds: int = field(
        default=1,
        metadata={"help": "seconds per quota sample (Kafka's quota.window.size.seconds)"},
    )

    # --- transactions (agent.transactions.coordinator, metadata.transactions.store) -------------------
    transaction_max_partitions: int = field(
        default=10_000,
        metadata={
            "help": "partitions one transaction may hold, across its AddPartitionsToTxn requests, each "
            "consumer group added by AddOffsetsToTxn counting as one (Kafka adds the group's "
            "__consumer_offsets partition); beyond, the request answers POLICY_VIOLATION and changes "
            "nothing (the Java producer makes it an abortable error in AddPartitionsToTxn). Kafka "
            "has no such limit"
        },
    )
    transaction_max_offsets: int = field(
        default=10_000,
        metadata={
            "help": "offsets (distinct group, topic, partition) one transaction may stage with "
            "TxnOffsetCommit until it completes; beyond, the request answers POLICY_VIOLATION and "
            "stages nothing. Kafka has no such limit"
        },
    )
    transaction_scan_interval_ms: int = field(
        default=1_000,
        metadata={
            "help": "how often the agent aborts transactions past their transaction.timeout.ms and "
            "re-drives stalled commits (Kafka's transaction.abort.timed.out.transaction."
            "cleanup.interval.ms, 10 s there): a timed-out transaction ends within this much"
        },
    )
    transaction_redrive_after_ms: int = field(
        default=5_000,
        metadata={
            "help": "a transaction this agent coordinates that stays PrepareCommit/PrepareAbort this "
            "long (its coordinator died, or writing its markers failed) has its markers written again "
            "by the background scan"
        },
    )
    transaction_redrive_max_backoff_ms: int = field(
        default=60_000,
        metadata={
            "help": "longest delay between re-drives of one transaction whose markers keep failing "
            "(the delay starts at transaction_redrive_after_ms and doubles): bounds the files a "
            "transaction that cannot complete costs"
        },
    )

    # --- connections and their bounds -------------------------------------------------
    connection_max_inflight_bytes: int = field(
        default=100 * MiB,
        metadata={
            "help": "bytes one connection may hold (requests being handled, with the response size a "
            "Fetch asks for, plus responses not yet sent) before the agent stops reading its requests"
        },
    )
    queued_max_request_bytes: int = field(
        default=256 * MiB,
        metadata={
            "help": "request bytes being handled across all connections before the agent stops reading "
            "requests (Kafka's queued.max.request.bytes)"
        },
    )
    request_read_timeout_ms: int = field(
        default=30_000,
        metadata={
            "help": "once a request's size has arrived, the rest must arrive within this time or the "
            "connection is closed (Kafka clients' request.timeout.ms default)"
        },
    )
    max_connections: int | None = field(
        default=None,
        metadata={
            "help": "open connections accepted; more are closed at once (Kafka's max.connections; "
            "default: the open-file limit less 256)"
        },
    )
    max_connections_per_ip: int | None = field(
        default=None,
        metadata={
            "help": "open connections accepted from one client address (Kafka's "
            "max.connections.per.ip; default: no cap)"
        },
    )

    socket_receive_buffer_bytes: int = field(
        default=100 * KiB,
        metadata={
            "help": "SO_RCVBUF of client connections (Kafka's socket.receive.buffer.bytes; -1: the OS "
            "default). Small, as Kafka's, so that requests a busy agent has not read yet wait in the "
            "client, where they batch, not in kernel buffers"
        },
    )
    socket_send_buffer_bytes: int = field(
        default=100 * KiB,
        metadata={
            "help": "SO_SNDBUF of client connections (Kafka's socket.send.buffer.bytes; -1: the OS default)"
        },
    )

    def __post_init__(self) -> None:
        check_config(self)  # ranges and combinations: agent.config_checks

    # --- derived values -------------------------------------------------------------

    def resolved_max_connections(self) -> int:
        """`max_connections`, else the open-file limit less what the agent itself needs
        (bucket and metadata connections, the metrics endpoint, logs): so that clients can
        never take the descriptors the agent needs to work."""
        if self.max_connections is not None:
            return self.max_connections
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY or soft >= 2**31:
            return 2**31 - 1  # Kafka's default: no cap
        return max(soft - RESERVED_FILE_DESCRIPTORS, soft // 2, 1)

    def resolved_listeners(self) -> list[Listener]:
        """The listeners to open (`listeners`, else PLAINTEXT on host:port); see agent.listeners."""
        from skiff.agent.network.listeners import build_listeners

        return build_listeners(
            self.listeners,
            self.advertised_listeners,
            self.listener_security_protocol_map,
            host=self.host,
            port=self.port,
            advertised_host=self.advertised_host,
            advertised_port=self.advertised_port,
        )

    def public_metadata_url(self) -> str:
        """What admin tools are told (`advertised_metadata_url`, else an http(s) metadata_url
        without its user:password part); "" for an embedded database, which is never told."""
        from urllib.parse import urlsplit, urlunsplit

        url = self.advertised_metadata_url or self.metadata_url
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            return ""
        host = parts.hostname or ""
        netloc = f"[{host}]" if ":" in host else host
        return urlunsplit(parts._replace(netloc=netloc + (f":{parts.port}" if parts.port else "")))

    def resolved_advertised_host(self) -> str:
        if self.advertised_host:
            return self.advertised_host
        if self.host in _WILDCARD_HOSTS:
            return socket.gethostname() or "localhost"
        return self.host

    def resolved_advertised_port(self, bound_port: int | None = None) -> int:
        """The port to advertise: explicit, else the port actually bound (matters for port 0)."""
        if self.advertised_port:
            return self.advertised_port
        if bound_port:
            return bound_port
        return self.port

    def replace(self, **changes: Any) -> AgentConfig:
        return dataclasses.replace(self, **changes)

    # --- construction -----------------------------------------------------------------

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> AgentConfig:
        """Defaults, then `SKIFF_*` variables from `env` (default `os.environ`), then `overrides`."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            raw = env.get(env_var(f.name))
            if raw is not None:
                values[f.name] = parse_value(f.name, _field_type(f.name), raw)
        values.update({k: v for k, v in overrides.items()})
        return cls(**values)

    @classmethod
    def from_args(
        cls, args: argparse.Namespace | Sequence[str], env: Mapping[str, str] | None = None
    ) -> AgentConfig:
        """Flags (a parsed namespace from a parser given `add_arguments`, or raw argv) over env."""
        if not isinstance(args, argparse.Namespace):
            parser = argparse.ArgumentParser()
            add_arguments(parser)
            args = parser.parse_args(list(args))
        flags: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            raw = getattr(args, f.name, None)
            if raw is not None:
                flags[f.name] = parse_value(f.name, _field_type(f.name), raw) if isinstance(raw, str) else raw
        return cls.from_env(env, **flags)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one optional string flag per config field (parsed later, so env can fill gaps)."""
    for f in dataclasses.fields(AgentConfig):
        default = f.default if f.default is not dataclasses.MISSING else "(derived)"
        parser.add_argument(
            flag(f.name),
            dest=f.name,
            default=None,
            metavar=f.name.upper(),
            help=f"{f.metadata.get('help', '')} [env {env_var(f.name)}; default {default}]",
        )


def describe_fields() -> list[tuple[str, str, str, str]]:
    """(flag, env var, default, help) for each field, for docs and `--help`."""
    out = []
    for f in dataclasses.fields(AgentConfig):
        default = repr(f.default) if f.default is not dataclasses.MISSING else "(derived)"
        out.append((flag(f.name), env_var(f.name), default, str(f.metadata.get("help", ""))))
    return out


@typing.no_type_check
def _field_type(name: str) -> tuple[type, bool]:
    """(base type, optional) of a field, from its annotation."""
    hints = typing.get_type_hints(AgentConfig)
    tp = hints[name]
    optional = False
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        optional = len(args) < len(typing.get_args(tp))
        tp = args[0]
    return tp, optional
