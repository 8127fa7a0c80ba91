"""Client zones: which availability zone a client says it is in, and the bytes served across zones.

Cross-zone traffic is what zone-aware routing saves (docs/operations.md, "Zones"): an agent
answers a client of zone Z with partition leaders among the ready agents of Z
(agent.agent_registry). This module holds the pure rules around it.

Where a client's zone comes from, per connection (`ClientZone`), strongest first:

1. the `rack_id` of a Fetch request (v11+; Kafka clients send their `client.rack` there);
   a non-empty one sets the connection's zone for good, and later Metadata requests on the
   connection are answered for it;
2. the `client.id` of any request header (`zone_from_client_id`), looked at again only
   when it changes. A Metadata request comes before any Fetch, so this is what routes a
   client's first Metadata answer (and the only way a producer states a zone).

The `client.id` rule: the id is split on commas; each part, with surrounding blanks
stripped, of the form `key=value` whose key is `az`, `zone` or `ws_az` (WarpStream's name;
keys compared case-insensitively) names the zone `value` (blanks stripped). The first such
part with a valid value wins. A valid zone is 1 to `MAX_ZONE_CHARS` characters of
`A-Z a-z 0-9 . _ : -` (cloud zone names and ids: `us-east-1a`, `use1-az1`,
`europe-west1-b`); anything else is ignored, as if absent. Examples: `myapp,ws_az=us-east-1a`
and `az=eu-west-1b` state a zone; `myapp`, `zone=` and `myapp,az=a b` do not.

Bytes served (`ZoneTraffic`): Produce request bytes received (`in`) and Fetch response
bytes sent (`out`), as the wire carries them (what a cloud bills), counted per connection by
`classify`: `same` (the client's zone is the agent's), `other` (both known, different) or
`unknown` (the client states no zone, or the agent has none).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, Metric

MAX_ZONE_CHARS = 64
ZONE_KEYS = frozenset({"az", "zone", "ws_az"})
_VALID_ZONE = re.compile(rf"[A-Za-z0-9._:\-]{{1,{MAX_ZONE_CHARS}}}")
# A client.id longer than this is not searched for a zone (Kafka bounds it to 32 KiB anyway).
MAX_CLIENT_ID_CHARS = 1024

SAME, OTHER, UNKNOWN = "same", "other", "unknown"
CLASSES = (SAME, OTHER, UNKNOWN)
IN, OUT = "in", "out"


def valid_zone(value: str | None) -> str | None:
    """`value` if it is a valid zone name, else None."""
    if value is None or _VALID_ZONE.fullmatch(value) is None:
        return None
    return value


def zone_from_client_id(client_id: str | None) -> str | None:
    """The zone a client.id states (see the module docstring), or None."""
    if not client_id or len(client_id) > MAX_CLIENT_ID_CHARS or "=" not in client_id:
        return None
    for part in client_id.split(","):
        key, eq, value = part.strip().partition("=")
        if eq and key.strip().lower() in ZONE_KEYS:
            zone = valid_zone(value.strip())
            if zone is not None:
                return zone
    return None


@dataclass
class ClientZone:
    """One connection's client zone: from a Fetch's rack_id once one came, else its client.id."""

    zone: str | None = None
    from_rack: bool = False
    _client_id: str | None = None  # the client.id `zone` was last derived from

    def saw_client_id(self, client_id: str | None) -> None:
        """A request header's client.id (cheap when it did not change, the common case)."""
        if self.from_rack or client_id == self._client_id:
            return
        self._client_id = client_id
        self.zone = zone_from_client_id(client_id)

    def saw_rack_id(self, rack_id: str | None) -> None:
        """A Fetch request's rack_id (v11+): a valid one is the connection's zone from now on."""
        zone = valid_zone(rack_id.strip()) if rack_id else None
        if zone is not None:
            self.zone, self.from_rack = zone, True


def classify(agent_zone: str | None, client_zone: str | None) -> str:
    """`same`, `other` or `unknown`: the client's zone as seen from the agent's."""
    if agent_zone is None or client_zone is None:
        return UNKNOWN
    return SAME if agent_zone == client_zone else OTHER


class ZoneTraffic:
    """Bytes served to clients by direction (`in`: Produce requests, `out`: Fetch responses)
    and by `classify` class. Plain integers: read at scrape time."""

    def __init__(self, agent_zone: str | None) -> None:
        self.agent_zone = agent_zone
        self.bytes: dict[tuple[str, str], int] = {(d, c): 0 for d in (IN, OUT) for c in CLASSES}

    def count(self, direction: str, client_zone: str | None, n_bytes: int) -> None:
        self.bytes[(direction, classify(self.agent_zone, client_zone))] += n_bytes


def zone_traffic_families(traffic: Iterable[ZoneTraffic]) -> Iterator[Metric]:
    """`skiff_client_zone_bytes_total{direction,client_zone}`, summed over `traffic` (one per
    listener of the agent)."""
    family = CounterMetricFamily(
        "skiff_client_zone_bytes",
        "Produce bytes received (in) and fetch bytes sent (out), by the client's zone against the "
        "agent's: same, other, unknown",
        labels=["direction", "client_zone"],
    )
    totals = {(d, c): 0 for d in (IN, OUT) for c in CLASSES}
    for t in traffic:
        for key, n in t.bytes.items():
            totals[key] += n
    for (direction, cls), n in totals.items():
        family.add_metric([direction, cls], n)
    yield family
