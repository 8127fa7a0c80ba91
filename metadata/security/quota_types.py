"""Kafka client quotas as values: entities, alterations, describe filters, and Kafka's rules.

An entity (Kafka's `ClientQuotaEntity`) maps entity types to names: `user`, `client-id`, or
both; a name of None is the type's default (`<default>` in Kafka's tools). Skiff stores and
enforces quotas on `user` and `client-id` entities (KIP-55, KIP-546); `ip` entities (Kafka's
connection-rate quotas) are refused as an unhandled entity type on alteration, and match
nothing on description.

The keys a user or client-id entity accepts are Kafka's (`QuotaConfigs`):
`producer_byte_rate` and `consumer_byte_rate` (LONG, bytes per second), `request_percentage`
(DOUBLE, percent of one request handler's time per second) and `controller_mutation_rate`
(DOUBLE; stored and described, not enforced: see docs/operations.md).

Validation is Kafka's `ClientQuotaControlManager` (alterations) and `ClientQuotasImage`
(describe filters), check for check and message for message, so clients see Kafka's errors.
Pure: the metadata service stores what this module accepts, the agent's handlers answer with
its messages and the agent's quota math resolves entities with `entity_of`; it imports
nothing of the project.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from annotated_types import Interval, MaxLen

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"

# Kafka's types of the keys: LONG keys take whole values only.
LONG_KEYS = frozenset({PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE})
QUOTA_KEYS = frozenset({PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE})

# Describe match types (DescribeClientQuotasRequest's match_type).
MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2  # "any": the entity has the type, named or default

# Bounds of what is stored (Kafka's names are int16-length strings; nothing real comes close).
MAX_NAME_CHARS = 1024
MAX_ALTERATIONS = 10_000
MAX_OPS = 1_000

Text = Annotated[str, MaxLen(MAX_NAME_CHARS)]
Finite = Annotated[float, Interval(ge=-1e300, le=1e300)]


@dataclass(frozen=True)
class QuotaEntity:
    """(entity type, name or None for the default) pairs, sorted by type, each type once
    (a request's duplicates are refused before an entity is built: `entity_from`)."""

    parts: Annotated[tuple[tuple[Text, Text | None], ...], MaxLen(4)]

    def name_of(self, entity_type: str) -> tuple[bool, str | None]:
        """(whether the entity has the type, its name or None for the default)."""
        for t, name in self.parts:
            if t == entity_type:
                return True, name
        return False, None

    def text(self) -> str:
        """As Kafka prints an entity in its messages."""
        inner = ", ".join(f"{t}={name}" for t, name in self.parts)
        return f"ClientQuotaEntity(entries={{{inner}}})"


@dataclass(frozen=True)
class QuotaOp:
    key: Text
    value: Finite | None  # None: remove the key


@dataclass(frozen=True)
class QuotaAlteration:
    entity: QuotaEntity
    ops: Annotated[tuple[QuotaOp, ...], MaxLen(MAX_OPS)]


@dataclass(frozen=True)
class QuotaFilterComponent:
    entity_type: Text
    match_type: int
    match: Text | None


@dataclass(frozen=True)
class ClientQuotaEntry:
    entity: QuotaEntity
    values: tuple[tuple[Text, float], ...]  # (key, value), sorted by key


def entity_from(pairs: list[tuple[str, str | None]]) -> tuple[QuotaEntity | None, str | None]:
    """(the entity, None), or (None, why Kafka refuses it): Kafka's `validateEntity`."""
    if not pairs:
        return None, "Invalid empty client quota entity"
    seen: dict[str, str | None] = {}
    for entity_type, name in pairs:
        if entity_type in seen:
            return None, f"Invalid client quota entity, duplicate entity entry {entity_type}"
        if entity_type not in (USER, CLIENT_ID, IP):
            return None, f"Unhandled client quota entity type: {entity_type}"
        seen[entity_type] = name
        if name is not None and not name:
            return None, f"Empty {entity_type} not supported"
    return QuotaEntity(tuple(sorted(seen.items()))), None


def _key_error(op: QuotaOp) -> str | None:
    """Kafka's `configKeysForEntityType` + `validateQuotaKeyValue` for one set operation."""
    if op.value is None:
        return None
    if op.key not in QUOTA_KEYS:
        return f"Invalid configuration key {op.key}"
    if op.value <= 0.0:
        return f"Quota {op.key} must be greater than 0"
    if op.key in LONG_KEYS:
        epsilon = 1e-6
        if abs(float(int(op.value + epsilon)) - op.value) > epsilon:
            return f"Configuration {op.key} must be a Long value"
    return None


def alteration_errors(alterations: list[QuotaAlteration]) -> list[str | None]:
    """Per alteration, why Kafka refuses it (INVALID_REQUEST) or None; an entity altered twice
    in one request has its second alteration refused (Kafka's "Ignoring duplicate entity")."""
    out: list[str | None] = []
    seen: set[QuotaEntity] = set()
    for alt in alterations:
        error: str | None = None
        keys: set[str] = set()
        for op in alt.ops:
            if op.key in keys:
                error = f"Duplicate quota key {op.key} not updating quota for this entity {alt.entity.text()}"
                break
            keys.add(op.key)
        if error is None and alt.entity in seen:
            error = f"Ignoring duplicate entity {alt.entity.text()}"
        seen.add(alt.entity)
        if error is None:
            _, error = entity_from(list(alt.entity.parts))
        if error is None and alt.entity.name_of(IP)[0]:
            # Kafka serves IP connection-rate quotas; Skiff does not (module doc).
            error = f"Unhandled client quota entity type: {IP}"
        for op in alt.ops if error is None else ():
            error = _key_error(op)
            if error is not None:
                break
        out.append(error)
    return out


def _component_error(c: QuotaFilterComponent) -> tuple[str, str] | None:
    """One component's match type against its match string (Kafka's checks)."""
    if c.match_type == MATCH_EXACT:
        if c.match is None:
            return "invalid_request", "Request specified MATCH_TYPE_EXACT, but set match string to null."
    elif c.match_type == MATCH_DEFAULT:
        if c.match is not None:
            return (
                "invalid_request",
                "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.",
            )
    elif c.match_type == MATCH_SPECIFIED:
        if c.match is not None:
            return (
                "invalid_request",
                "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.",
            )
    else:
        return "unsupported_version", f"Unknown match type {c.match_type}"
    return None


def filter_error(components: list[QuotaFilterComponent]) -> tuple[str, str] | None:
    """Why Kafka refuses a describe filter: ("invalid_request" | "unsupported_version",
    message), or None. Kafka's `ClientQuotasImage.describe` checks, in its order."""
    named: set[str] = set()
    for c in components:
        if not c.entity_type:
            return "invalid_request", "Invalid empty entity type."
        if c.entity_type in named:
            return (
                "invalid_request",
                f"Entity type {c.entity_type} cannot appear more than once in the filter.",
            )
        if c.entity_type not in (USER, CLIENT_ID, IP):
            return "unsupported_version", f"Unsupported entity type {c.entity_type}"
        problem = _component_error(c)
        if problem is not None:
            return problem
        named.add(c.entity_type)
    if IP in named and (USER in named or CLIENT_ID in named):
        return (
            "invalid_request",
            "Invalid entity filter component combination. IP filter component should not be used with "
            "user or clientId filter component.",
        )
    return None


def filter_matches(components: list[QuotaFilterComponent], strict: bool, entity: QuotaEntity) -> bool:
    """Kafka's `ClientQuotasImage.matches` (the filter already passed `filter_error`)."""
    if strict and len(entity.parts) != len(components):
        return False
    for c in components:
        present, name = entity.name_of(c.entity_type)
        if not present:
            return False
        if c.match_type == MATCH_EXACT and name != c.match:
            return False
        if c.match_type == MATCH_DEFAULT and name is not None:
            return False
    return True
