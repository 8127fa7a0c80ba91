"""What Kafka's authorizer checks for each API, declared once per handler.

Every `HandlerSpec` carries an `Access` (a required keyword: a handler module without one
fails at import, and `HandlerRegistry` refuses a spec without one at start-up). The
declaration is Kafka's own table, taken from `KafkaApis` (the `authHelper.authorize(...)`
calls of each `handle*` method) and the documentation's "Operations and Resources on
Protocols" table, not from memory. It is used four ways:

1. enforcement: a check declared `REQUEST` on the cluster whose response has a top-level
   error code is applied by the connection before the handler runs (`refusal_response`):
   the handler never sees a refused request (DescribeAcls, DescribeUserScramCredentials).
   Every other check needs the request's items and is made by the handler with
   `agent.handlers.authorized(...)` and friends;
2. audit: with a registry's `audit` list set (tests), every check a handler makes is
   recorded as (api key, resource type, operation); the generated authorization matrix
   (tests/component/test_authz_matrix.py) asserts that a handler checks only what it
   declares, and that a principal holding exactly the declared ACLs is served;
3. the SASL gate: the APIs declared `PRE_AUTH` are exactly those served before
   authentication (`agent.sasl.PRE_AUTH_KEYS`; checked at registration);
4. documentation: `markdown_table()` renders the table in docs/security.md (a test keeps
   the two equal; `python -m skiff.agent.handlers.access_table` prints it).

Refusals, as Kafka answers them:

- `REQUEST`: the whole request is refused (a top-level error code, or every item's);
- `ITEM`: the item naming the resource gets the error; the others go on;
- `FILTER`: items the principal may not see are left out of the answer, no error;
- `REPORT`: never refuses; only reported (the "authorized operations" bit fields).

A `Check` needs any one of its (resource type, operation) pairs ("CREATE on the cluster
or on the topic"); `ANY_RESOURCE` as the name means "on some resource of that type"
(Kafka's `authorizeByResourceType`, InitProducerId's WRITE on any topic).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from skiff.metadata.security.acl_types import AclOperation, ResourceType

Op = AclOperation
RT = ResourceType


class Refusal(enum.StrEnum):
    REQUEST = "request"
    ITEM = "item"
    FILTER = "filter"
    REPORT = "report"


@dataclass(frozen=True)
class Need:
    resource: ResourceType
    operation: AclOperation
    any_resource: bool = False  # on some resource of the type (authorizeByResourceType)

    def text(self) -> str:
        where = f"some {self.resource.name.lower()}" if self.any_resource else self.resource.name.lower()
        return f"{self.operation.name} {where}"


@dataclass(frozen=True)
class Check:
    needs: tuple[Need, ...]  # any one suffices
    refusal: Refusal
    error: ErrorCode | None = None  # what a refusal answers (None: FILTER and REPORT)
    when: str = ""  # the condition under which the check applies ("" always)

    def __post_init__(self) -> None:
        if not self.needs:
            raise ValueError("a check needs at least one (resource, operation)")
        if (self.error is None) != (self.refusal in (Refusal.FILTER, Refusal.REPORT)):
            raise ValueError(f"{self.refusal} check: error {self.error} does not fit")

    def pairs(self) -> frozenset[tuple[ResourceType, AclOperation]]:
        return frozenset((n.resource, n.operation) for n in self.needs)


@dataclass(frozen=True)
class Access:
    """One API's authorization: its checks, or why it has none."""

    checks: tuple[Check, ...] = ()
    pre_auth: bool = False  # served before SASL authentication completes
    why_none: str = ""  # required when there is no check
    # The cluster gate's answer as Kafka shapes it (its request's `getErrorResponse`), when a
    # top-level error code alone is not what Kafka answers: (request body, code) -> response.
    refuse: Callable[[Any, ErrorCode], Any] | None = None

    def __post_init__(self) -> None:
        if not self.checks and not self.why_none:
            raise ValueError("an API without authorization checks must say why (why_none)")

    def pairs(self) -> frozenset[tuple[ResourceType, AclOperation]]:
        """Every (resource type, operation) this API may check."""
        out: set[tuple[ResourceType, AclOperation]] = set()
        for c in self.checks:
            out |= c.pairs()
        return frozenset(out)

    def cluster_gate(self) -> Check | None:
        """The unconditional REQUEST check on the cluster alone, if any (enforced centrally)."""
        for c in self.checks:
            if (
                c.refusal is Refusal.REQUEST
                and not c.when
                and len(c.needs) == 1
                and c.needs[0].resource is RT.CLUSTER
                and not c.needs[0].any_resource
            ):
                return c
        return None


def on(resource: ResourceType, operation: AclOperation) -> Need:
    return Need(resource, operation)


def on_any(resource: ResourceType, operation: AclOperation) -> Need:
    return Need(resource, operation, any_resource=True)


def _check(refusal: Refusal, what: Need | tuple[Need, ...], error: ErrorCode | None, when: str) -> Check:
    return Check(what if isinstance(what, tuple) else (what,), refusal, error, when)


def request(what: Need | tuple[Need, ...], error: ErrorCode, when: str = "") -> Check:
    return _check(Refusal.REQUEST, what, error, when)


def item(what: Need | tuple[Need, ...], error: ErrorCode, when: str = "") -> Check:
    return _check(Refusal.ITEM, what, error, when)


def filtered(what: Need | tuple[Need, ...], when: str = "") -> Check:
    return _check(Refusal.FILTER, what, None, when)


def reported(what: Need | tuple[Need, ...], when: str = "") -> Check:
    return _check(Refusal.REPORT, what, None, when)


def requires(*checks: Check, refuse: Callable[[Any, ErrorCode], Any] | None = None) -> Access:
    return Access(checks=checks, refuse=refuse)


def no_check(why: str) -> Access:
    return Access(why_none=why)


PRE_AUTH = Access(
    pre_auth=True, why_none="served before authentication (the SASL exchange and its discovery)"
)

# The error codes, named as handlers read them.
TOPIC_DENIED = ErrorCode.topic_authorization_failed
GROUP_DENIED = ErrorCode.group_authorization_failed
CLUSTER_DENIED = ErrorCode.cluster_authorization_failed
TXN_ID_DENIED = ErrorCode.transactional_id_authorization_failed


def _error_name(code: ErrorCode | None) -> str:
    return "" if code is None else code.name.upper()


def markdown_table(rows: list[tuple[str, int, Access]]) -> str:
    """The authorization table of docs/security.md: one row per (API name, api key, access)."""
    lines = ["| API (key) | checks | refused with |", "|---|---|---|"]
    for snake, key, access in rows:
        name = "".join(part.title() for part in snake.split("_"))
        if not access.checks:
            lines.append(f"| {name} ({key}) | none: {access.why_none} | |")
            continue
        needs = []
        errors = []
        for c in access.checks:
            text = " or ".join(n.text() for n in c.needs)
            if c.when:
                text += f" ({c.when})"
            needs.append(f"{text}: {c.refusal.value}")
            if c.error is not None and _error_name(c.error) not in errors:
                errors.append(_error_name(c.error))
        lines.append(f"| {name} ({key}) | {'; '.join(needs)} | {', '.join(errors)} |")
    return "\n".join(lines) + "\n"
