"""Plain values of the group coordinator leases (see `metadata.groups.leases`).

Kept free of SQLAlchemy so that the HTTP client and the agent can import them cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass

from skiff.metadata.wire.bounds import Id, Int32

# Kafka's error codes these operations answer with (kio's ErrorCode values).


@dataclass(frozen=True, slots=True)
class LeaseToken:
    """Who holds a group's lease, and which grant of it: every state change the holder
    makes in metadata (offset commits, a new generation) carries this and is refused
    with NOT_COORDINATOR unless it is still the lease's current holder and epoch."""

    holder: Id  # agent id
    epoch: Int32


@dataclass(frozen=True, slots=True)
class LeaseGrant:
    """The answer to an acquisition. `granted` False: `holder` holds the lease (`epoch`)
    until `expires_ms`. `group_state` is the last generation the group's coordinators
    confirmed (JSON, `agent.groups.fencing` writes and reads it), None if none yet."""

    group_id: str
    granted: bool
    holder: str
    epoch: int
    expires_ms: int
    group_state: str | None = None

    @property
    def token(self) -> LeaseToken:
        return LeaseToken(self.holder, self.epoch)
