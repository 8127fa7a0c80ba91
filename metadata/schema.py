"""The metadata tables (SQLAlchemy Core), for SQLite and PostgreSQL.

The migrations in `metadata/migrations/versions/` create exactly these; a test compares
the two (Alembic's autogenerate diff must be empty).

Times are milliseconds since the epoch (BIGINT) from the service's injected clock.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    Uuid,
    true,
)

# Explicit constraint names, so that migrations are reproducible on every backend.
metadata_obj = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

# SQLite only auto-increments an INTEGER PRIMARY KEY (the rowid); BIGINT elsewhere.
BigId = BigInteger().with_variant(Integer(), "sqlite")

FILE_LIVE = "live"
FILE_DELETING = "deleting"

topics = Table(
    "topics",
    metadata_obj,
    Column("topic_id", Uuid(), primary_key=True),
    Column("name", String(255), nullable=False, unique=True),
    Column("partition_count", Integer, nullable=False),
    # Only the explicitly set configs, normalized (metadata.configs knows the defaults).
    Column("configs", JSON, nullable=False),
    Column("created_ms", BigInteger, nullable=False),
)

partitions = Table(
    "partitions",
    metadata_obj,
    Column("topic_id", Uuid(), ForeignKey("topics.topic_id"), primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("log_start_offset", BigInteger, nullable=False),
    Column("high_watermark", BigInteger, nullable=False),
)

files = Table(
    "files",
    metadata_obj,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("object_key", String(1024), nullable=False, unique=True),
    Column("size_bytes", BigInteger, nullable=False),
    Column("level", Integer, nullable=False),
    Column("state", String(16), nullable=False),
    Column("writer", String(255), nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    Column("committed_ms", BigInteger, nullable=False),
    # When the file became `deleting` (its last chunk went away): GC waits a grace period
    # after this before deleting the object, as readers may still hold its location.
    Column("deleting_since_ms", BigInteger, nullable=True),
    # The garbage collector's claim on a `deleting` file (metadata.maintenance.gc): who claimed it and
    # until when; an expired claim (a crashed collector) may be taken by another one.
    Column("gc_claim_token", String(64), nullable=True),
    Column("gc_claimed_until_ms", BigInteger, nullable=True),
    CheckConstraint("state IN ('live', 'deleting')", name="state"),
    Index(None, "state", "deleting_since_ms"),
)

chunks = Table(
    "chunks",
    metadata_obj,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("file_id", BigId, ForeignKey("files.id"), nullable=False),
    Column("topic_id", Uuid(), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("byte_position", BigInteger, nullable=False),
    Column("byte_length", BigInteger, nullable=False),
    Column("base_offset", BigInteger, nullable=False),
    Column("last_offset", BigInteger, nullable=False),
    Column("record_count", BigInteger, nullable=False),
    Column("batch_count", Integer, nullable=False),
    Column("max_timestamp", BigInteger, nullable=False),
    Column("offsets_absolute", Boolean, nullable=False),
    # Serialized pyroaring BitMap of (offset - base_offset) present; NULL: all present.
    Column("present_offsets", LargeBinary, nullable=True),
    # ms, a lower bound of the chunk's record timestamps (Spark prunes upper time bounds with
    # it); NULL: unknown (rows from before migration 0014), never pruned.
    Column("min_timestamp", BigInteger, nullable=True),
    CheckConstraint("last_offset >= base_offset", name="offsets"),
    # find_chunks: the first chunk with last_offset >= x, then onwards, LIMIT-ed. Chunks of
    # a partition never overlap, so last_offset is unique within a partition.
    Index(None, "topic_id", "partition", "last_offset", unique=True),
    Index(None, "file_id"),
)

producer_state = Table(
    "producer_state",
    metadata_obj,
    Column("topic_id", Uuid(), primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("producer_id", BigInteger, primary_key=True),
    Column("producer_epoch", Integer, nullable=False),
    # The last (up to 5) batches: [[first_seq, last_seq, base_offset, last_offset], ...], oldest first.
    Column("batches", JSON, nullable=False),
    Column("last_update_ms", BigInteger, nullable=False),
)

# A counter row per named sequence (portable; PostgreSQL row lock, SQLite write lock).
sequences = Table(
    "sequences",
    metadata_obj,
    Column("name", String(64), primary_key=True),
    Column("next_value", BigInteger, nullable=False),
)
PRODUCER_ID_SEQUENCE = "producer_id"

group_offsets = Table(
    "group_offsets",
    metadata_obj,
    Column("group_id", Text, primary_key=True),
    Column("topic", String(255), primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("committed_offset", BigInteger, nullable=False),
    Column("metadata", Text, nullable=True),
    Column("leader_epoch", Integer, nullable=False),
    Column("commit_time_ms", BigInteger, nullable=False),
    # Where this commit sits in `__consumer_offsets` (metadata.groups.offsets_log): the
    # partition of its group (Kafka's rule) and its offset there, from a per-partition counter
    # row `consumer_offsets-<partition>` of `sequences`, taken in the commit's transaction.
    Column("log_partition", Integer, nullable=True),
    Column("log_offset", BigInteger, nullable=True),
    Index(None, "log_partition", "log_offset"),
)

agents = Table(
    "agents",
    metadata_obj,
    Column("agent_id", String(255), primary_key=True),
    Column("host", String(255), nullable=False),
    Column("port", Integer, nullable=False),
    Column("zone", String(255), nullable=True),
    Column("last_heartbeat_ms", BigInteger, nullable=False),
    # JSON [[listener name, host, port], ...]: every advertised listener (NULL in rows
    # written before listeners: then host/port is the one address).
    Column("listeners", Text, nullable=True),
    # The agent's own readiness (agent.health) at its last heartbeat: a live agent that is
    # not ready is routed no partitions and no coordinators.
    Column("ready", Boolean, nullable=False, server_default=true()),
    # The Skiff version the agent runs (metadata.build_info); NULL from agents before versions.
    Column("version", String(64), nullable=True),
)

# Per partition, what the compactor keeps (rows are created on first use, no foreign key:
# a deleted topic's rows are removed with it by topic_admin; its topic id is never reused):
# - the cleaner checkpoint (Kafka's cleaner-offset-checkpoint): the first dirty offset,
#   moved only in the swap transaction that wrote the cleaned data; NULL: never cleaned;
# - the job lease: which compactor job holds the partition (and so its input chunks)
#   until when. A claim takes rows whose lease is absent or expired (PostgreSQL:
#   FOR UPDATE SKIP LOCKED), so two compactors never take the same partition.
compaction_state = Table(
    "compaction_state",
    metadata_obj,
    Column("topic_id", Uuid(), primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("first_dirty_offset", BigInteger, nullable=True),
    Column("lease_token", String(64), nullable=True),
    Column("lease_holder", String(255), nullable=True),
    Column("lease_expires_ms", BigInteger, nullable=True),
    Index(None, "lease_token"),
)


# Consumer groups seen with members: an agent coordinating a non-empty group reports it
# (metadata.maintenance.retention.touch_groups) at least every offsets.retention.check.interval.ms,
# so `last_active_ms` is (within that interval) when the group was last non-empty. A
# group with no row never had members here: a standalone consumer's offsets expire by
# their commit time; a group with a row expires whole `offsets.retention.minutes` after it.
group_activity = Table(
    "group_activity",
    metadata_obj,
    Column("group_id", Text, primary_key=True),
    Column("last_active_ms", BigInteger, nullable=False),
)

# One row per periodic maintenance task ("gc", "orphans"): when it last finished
# successfully; metadata's /metrics reports the age (metadata.maintenance.gc).
maintenance_runs = Table(
    "maintenance_runs",
    metadata_obj,
    Column("task", String(64), primary_key=True),
    Column("last_success_ms", BigInteger, nullable=False),
)


# Who coordinates each consumer group (metadata.groups.leases): the holder agent, the
# epoch of its grant (bumped by every acquisition, never reused) and when the lease
# lapses unless renewed; group_state is the last generation its coordinators confirmed
# (JSON: generation, protocol, member ids and timeouts), read by the next holder.
group_leases = Table(
    "group_leases",
    metadata_obj,
    Column("group_id", Text, primary_key=True),
    Column("holder", String(255), nullable=False),
    Column("epoch", BigInteger, nullable=False),
    Column("expires_ms", BigInteger, nullable=False),
    Column("group_state", Text, nullable=True),
)


# SCRAM credentials (RFC 5802, KIP-554), one row per user and mechanism ("SCRAM-SHA-256",
# "SCRAM-SHA-512"): the salt, the iteration count and the two keys derived from the
# salted password; the password itself is never stored (metadata.security.scram_users).
scram_credentials = Table(
    "scram_credentials",
    metadata_obj,
    Column("user_name", String(255), primary_key=True),
    Column("mechanism", String(32), primary_key=True),
    Column("salt", LargeBinary, nullable=False),
    Column("iterations", Integer, nullable=False),
    Column("stored_key", LargeBinary, nullable=False),
    Column("server_key", LargeBinary, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
)

# Kafka ACL bindings (metadata.security.acls; the enum columns hold Kafka's wire codes, see
# metadata.security.acl_types). A binding is a set member: creating it again changes nothing. Every
# change also increments the `acl_version` row of `sequences` in its own transaction, so
# agents poll that one value and reload the bindings only when it moved.
acls = Table(
    "acls",
    metadata_obj,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("resource_type", Integer, nullable=False),
    Column("resource_name", String(1024), nullable=False),
    Column("pattern_type", Integer, nullable=False),
    Column("principal", String(1024), nullable=False),
    Column("host", String(1024), nullable=False),
    Column("operation", Integer, nullable=False),
    Column("permission", Integer, nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    Index(None, "resource_type", "resource_name"),
)
ACL_VERSION_SEQUENCE = "acl_version"

# Kafka client quotas (KIP-55, KIP-546; metadata.security.quotas, rules in
# metadata.security.quota_types): one row per entity and quota key. An entity's user and
# client-id parts are each "" (not part of the entity), "*" (the default, Kafka's <default>)
# or "=" followed by the name. Every change increments the `client_quota_version` row of
# `sequences` in its own transaction; agents poll that one value.
client_quotas = Table(
    "client_quotas",
    metadata_obj,
    Column("entity_user", String(1025), primary_key=True),
    Column("entity_client_id", String(1025), primary_key=True),
    Column("quota_key", String(64), primary_key=True),
    Column("value", Double, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
)
CLIENT_QUOTA_VERSION_SEQUENCE = "client_quota_version"
# Transactional producers (metadata.transactions.store, rules in metadata.transactions.state): one row per
# transactional id, changed only inside a write transaction that locks it. `partitions` is
# JSON [[topic id, partition], ...]; `groups` JSON [group id, ...] with offsets pending.
transactions = Table(
    "transactions",
    metadata_obj,
    Column("transactional_id", Text, primary_key=True),
    Column("producer_id", BigInteger, nullable=False),
    Column("producer_epoch", Integer, nullable=False),
    Column("last_producer_id", BigInteger, nullable=False),
    Column("last_epoch", Integer, nullable=False),
    Column("timeout_ms", BigInteger, nullable=False),
    Column("state", String(32), nullable=False),
    Column("partitions", JSON, nullable=False),
    Column("groups", JSON, nullable=False),
    Column("start_ms", BigInteger, nullable=False),
    Column("last_update_ms", BigInteger, nullable=False),
    Index(None, "producer_id"),
)


# Per partition, the producers with a transaction open in it: the offset of the
# transaction's first batch there. Inserted by the commit of that batch, deleted by the
# commit of the transaction's marker. The last stable offset (LSO) is the smallest
# first_offset of a partition, or its high watermark when it has none.
txn_open = Table(
    "txn_open",
    metadata_obj,
    Column("topic_id", Uuid(), primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("producer_id", BigInteger, primary_key=True),
    Column("first_offset", BigInteger, nullable=False),
)

# Aborted transactions per partition, as Kafka's AbortedTxn index: read_committed fetches
# get the entries overlapping what they return, so clients drop aborted records.
txn_aborted = Table(
    "txn_aborted",
    metadata_obj,
    Column("topic_id", Uuid(), primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("producer_id", BigInteger, primary_key=True),
    Column("first_offset", BigInteger, primary_key=True),
    Column("last_offset", BigInteger, nullable=False),  # the ABORT marker's offset
    Index(None, "topic_id", "partition", "last_offset"),
)

# Offsets staged by TxnOffsetCommit until their transaction completes (metadata.transactions.offsets).
txn_offsets = Table(
    "txn_offsets",
    metadata_obj,
    Column("transactional_id", Text, primary_key=True),
    Column("group_id", Text, primary_key=True),
    Column("topic", String(255), primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("committed_offset", BigInteger, nullable=False),
    Column("metadata", Text, nullable=True),
    Column("leader_epoch", Integer, nullable=False),
    Column("commit_time_ms", BigInteger, nullable=False),
    Index(None, "group_id"),
)

# The schema registry (metadata.schemas.store; Confluent's model, see metadata.schemas.types).
# A schema row is unique by `fingerprint` (SHA-256 of type, canonical text and references), so
# the same schema registered under several subjects keeps one global id. Ids are allocated as
# max + 1 under the registry's write lock (IMPORT mode brings its own), never reused.
registry_schemas = Table(
    "registry_schemas",
    metadata_obj,
    Column("schema_id", Integer, primary_key=True, autoincrement=False),
    Column("schema_type", String(16), nullable=False),
    Column("schema_text", Text, nullable=False),
    Column("references", JSON, nullable=False),  # [[name, subject, version], ...]
    Column("fingerprint", String(64), nullable=False, unique=True),
    Column("created_ms", BigInteger, nullable=False),
)

# A subject's versions; `deleted` marks a soft delete (hidden from reads unless asked for).
registry_versions = Table(
    "registry_versions",
    metadata_obj,
    Column("subject", String(1024), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("schema_id", Integer, ForeignKey("registry_schemas.schema_id"), nullable=False),
    Column("deleted", Boolean, nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    Index(None, "schema_id"),
)

# Compatibility level and mode, globally (subject "") or per subject; NULL = not set here.
registry_settings = Table(
    "registry_settings",
    metadata_obj,
    Column("subject", String(1024), primary_key=True),
    Column("compatibility", String(32), nullable=True),
    Column("normalize", Boolean, nullable=True),
    Column("mode", String(16), nullable=True),
    Column("updated_ms", BigInteger, nullable=False),
)

# What the object store is asked, as reported by the processes that ask it
# (metadata.usage): request counts and bytes per role ("agent", "compactor", "reader") and
# minute, the reports of every process summed into one row. Rows older than
# metadata.usage.KEEP_MS are deleted as reports arrive, so the table holds at most
# 3 roles x KEEP_MS / 60 s rows.
object_store_usage = Table(
    "object_store_usage",
    metadata_obj,
    Column("role", String(16), primary_key=True),
    Column("minute_ms", BigInteger, primary_key=True),
    Column("puts", BigInteger, nullable=False),
    Column("gets", BigInteger, nullable=False),
    Column("heads", BigInteger, nullable=False),
    Column("lists", BigInteger, nullable=False),
    Column("deletes", BigInteger, nullable=False),
    Column("errors", BigInteger, nullable=False),
    Column("bytes_in", BigInteger, nullable=False),
    Column("bytes_out", BigInteger, nullable=False),
    Index(None, "minute_ms"),
)

# Each consumer group's total lag, sampled every metadata.usage.LAG_SAMPLE_INTERVAL_MS by
# the metadata service (for the console's lag-over-time charts): one row per group and
# sample time (aligned, so replicas sampling at once write the same row once). Capped at
# metadata.usage.MAX_LAG_GROUPS groups per sample; rows older than KEEP_LAG_MS deleted.
lag_samples = Table(
    "lag_samples",
    metadata_obj,
    Column("group_id", String(1024), primary_key=True),
    Column("at_ms", BigInteger, primary_key=True),
    Column("lag", BigInteger, nullable=False),
    Index(None, "at_ms"),
)
