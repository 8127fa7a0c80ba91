"""Range and consistency checks of `AgentConfig` (run by its `__post_init__`).

One place for every rule a setting must satisfy, so that an invalid setting fails at
start-up with the field's name in the message, never later on the hot path. Listener,
TLS and SASL settings are checked by building what they describe (`agent.listeners`,
`agent.sasl`), so those modules stay the one owner of their formats.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from skiff.agent.zones import MAX_ZONE_CHARS, valid_zone

if TYPE_CHECKING:
    from skiff.agent.config import AgentConfig


def check_config(config: AgentConfig) -> None:
    """Raise ValueError naming the first setting that is out of range.

    The sections run in this order, so "first" is the first failing rule of the first
    failing section."""
    _check_identity(config)
    _check_sizes_and_timeouts(config)
    _check_groups(config)
    _check_connections(config)
    _check_leases_and_transactions(config)


def _positive(config: AgentConfig, name: str) -> None:
    if getattr(config, name) <= 0:
        raise ValueError(f"{name} must be positive, got {getattr(config, name)}")


def _non_negative(config: AgentConfig, name: str) -> None:
    if getattr(config, name) < 0:
        raise ValueError(f"{name} must be >= 0, got {getattr(config, name)}")


def _check_identity(config: AgentConfig) -> None:
    """Who the agent is, how it reaches the metadata service, where it listens."""
    if not config.agent_id:
        raise ValueError("agent_id must not be empty")
    if config.metadata_token and config.metadata_token_file:
        raise ValueError("set one of metadata_token and metadata_token_file, not both")
    if not 1 <= config.workers <= 256:
        raise ValueError(f"workers must be between 1 and 256, got {config.workers}")
    for name in ("port",):
        _non_negative(config, name)
        if getattr(config, name) > 65535:
            raise ValueError(f"{name} must be a TCP port, got {getattr(config, name)}")
    if config.advertised_port is not None and not 0 <= config.advertised_port <= 65535:
        raise ValueError(f"advertised_port must be a TCP port, got {config.advertised_port}")
    if config.zone is not None and valid_zone(config.zone) is None:
        raise ValueError(
            f"zone must be 1-{MAX_ZONE_CHARS} characters of A-Z a-z 0-9 . _ : -, got {config.zone!r}"
        )


def _check_sizes_and_timeouts(config: AgentConfig) -> None:
    """The buffers, flushes, caches, fetches and timeouts, and how they relate."""
    for name in (
        "max_request_bytes",
        "max_inflight_requests",
        "default_partitions",
        "flush_interval_ms",
        "flush_max_bytes",
        "flush_max_batches",
        "max_inflight_flushes",
        "max_buffered_bytes",
        "heartbeat_interval_ms",
        "agent_ttl_ms",
        "fetch_poll_interval_ms",
        "chunk_cache_ttl_ms",
        "s3_connect_timeout_ms",
        "s3_read_timeout_ms",
        "s3_max_attempts",
        "metadata_timeout_ms",
        "readiness_timeout_ms",
        "readiness_probe_interval_ms",
        "readiness_failure_threshold",
        "shutdown_timeout_ms",
        "fetch_max_bytes",
        "max_partition_fetch_bytes",
        "fetch_read_inflight_bytes",
    ):
        _positive(config, name)
    if not 0 <= config.metrics_port <= 65535:
        raise ValueError(f"metrics_port must be a TCP port or 0, got {config.metrics_port}")
    for name in (
        "connections_max_idle_ms",
        "flush_seal_lead_max_ms",
        "topic_cache_ttl_ms",
        "fetch_cache_bytes",
        "fetch_max_wait_ms_cap",
        "fetch_coalesce_gap_bytes",
        "fetch_readahead_bytes",
        "fetch_first_read_object_bytes",
    ):
        _non_negative(config, name)
    for name in ("fetch_max_bytes", "max_partition_fetch_bytes"):
        if getattr(config, name) > 2**31 - 1:
            raise ValueError(f"{name} must fit in a signed 32-bit size (a Kafka int32)")
    if config.max_request_bytes > 2**31 - 1:
        raise ValueError("max_request_bytes must fit in a signed 32-bit size")
    if config.max_buffered_bytes < config.flush_max_bytes:
        raise ValueError("max_buffered_bytes must be at least flush_max_bytes")
    if config.agent_ttl_ms <= config.heartbeat_interval_ms:
        raise ValueError("agent_ttl_ms must be longer than heartbeat_interval_ms")


def _check_groups(config: AgentConfig) -> None:
    """The consumer-group coordinator's delays and session-timeout bounds."""
    _non_negative(config, "group_initial_rebalance_delay_ms")
    _positive(config, "group_min_session_timeout_ms")
    if config.group_max_session_timeout_ms < config.group_min_session_timeout_ms:
        raise ValueError("group_max_session_timeout_ms must be at least group_min_session_timeout_ms")
    if config.group_max_session_timeout_ms > 2**31 - 1:
        raise ValueError("group_max_session_timeout_ms must fit in a signed 32-bit int (a Kafka int32)")
    _positive(config, "group_consumer_heartbeat_interval_ms")
    if config.group_consumer_session_timeout_ms <= config.group_consumer_heartbeat_interval_ms:
        raise ValueError(
            "group_consumer_session_timeout_ms must be longer than group_consumer_heartbeat_interval_ms"
        )


def _check_connections(config: AgentConfig) -> None:
    """Per-connection limits, sockets, listeners with their TLS, and SASL."""
    for name in ("connection_max_inflight_bytes", "queued_max_request_bytes", "request_read_timeout_ms"):
        _positive(config, name)
    for name in ("socket_receive_buffer_bytes", "socket_send_buffer_bytes"):
        if getattr(config, name) != -1:
            _positive(config, name)
    for name in ("max_connections", "max_connections_per_ip"):
        if getattr(config, name) is not None:
            _positive(config, name)
    _non_negative(config, "scram_credential_cache_ms")
    _non_negative(config, "connections_max_reauth_ms")
    _positive(config, "ssl_handshake_timeout_ms")
    listeners = config.resolved_listeners()  # ValueError names the bad setting
    if any(li.tls for li in listeners):
        from skiff.agent.network.listeners import server_ssl_context

        server_ssl_context(config.ssl_certfile, config.ssl_keyfile, config.ssl_cafile, config.ssl_client_auth)
    from skiff.agent.network.sasl import parse_mechanisms

    parse_mechanisms(config.sasl_enabled_mechanisms)


def _check_leases_and_transactions(config: AgentConfig) -> None:
    """Group leases, the ACL refresh, and the transaction coordinator's limits and timers."""
    if not 100 <= config.group_lease_ttl_ms <= 600_000:
        raise ValueError(f"group_lease_ttl_ms must be in [100, 600000], got {config.group_lease_ttl_ms}")
    _positive(config, "group_lease_renew_interval_ms")
    _positive(config, "acl_refresh_interval_ms")
    _positive(config, "quota_refresh_interval_ms")
    if not 2 <= config.quota_window_num <= 1_000 or not 1 <= config.quota_window_size_seconds <= 3_600:
        raise ValueError("quota_window_num must be in [2, 1000] and quota_window_size_seconds in [1, 3600]")
    for name, most in (
        ("transaction_max_partitions", 1_000_000),
        ("transaction_max_offsets", 1_000_000),
        ("transaction_scan_interval_ms", 600_000),
        ("transaction_redrive_after_ms", 3_600_000),
        ("transaction_redrive_max_backoff_ms", 3_600_000),
    ):
        if not 1 <= getattr(config, name) <= most:
            raise ValueError(f"{name} must be in [1, {most}], got {getattr(config, name)}")
    if config.transaction_redrive_max_backoff_ms < config.transaction_redrive_after_ms:
        raise ValueError("transaction_redrive_max_backoff_ms must be at least transaction_redrive_after_ms")
    if config.group_lease_renew_interval_ms * 2 > config.group_lease_ttl_ms * 3 // 4:
        raise ValueError(
            "group_lease_renew_interval_ms must be at most 3/8 of group_lease_ttl_ms (two renewals "
            "within the time the agent trusts a lease)"
        )
