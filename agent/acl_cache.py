"""The agent's copy of the cluster's ACLs, and how it stays fresh.

Decisions are made in memory (`agent.authorizer.Authorizer`); metadata is never asked per
request. With `authorizer_enabled` off, `AclCache.authorize` answers True at once and
nothing is loaded (the playground and clusters without ACLs stay open).

Freshness. Metadata keeps a version number that every ACL change increments (in the
change's own transaction). The cache holds the bindings of one version:

- on the agent that makes a change (CreateAcls, DeleteAcls), `refresh()` runs before the
  response is sent, so its next request already sees it;
- every agent polls the version every `acl_refresh_interval_ms` (one cheap read) and
  reloads the bindings only when it moved. Another agent's change therefore applies
  within `acl_refresh_interval_ms` plus two metadata round trips (measured in
  docs/benchmarks.md).

Failure: `start()` loads once before the agent accepts connections. If metadata cannot be
reached then, the agent starts anyway (as it does without ACLs: its registry retries too)
and, until a load succeeds, refuses every principal but the super users (fail closed);
the poll keeps trying every interval. A later refresh that fails keeps the last good copy
(logged), as a Kafka broker keeps serving its last ACLs while the controller is away.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterable

from skiff.agent.authorizer import Authorizer, parse_super_users
from skiff.agent.periodic import Periodic
from skiff.metadata.errors import MetadataError, MetadataUnavailable
from skiff.metadata.security.acl_types import AclBinding, AclOperation, ResourceType
from skiff.metadata.wire.operations import AgentClient

log = logging.getLogger(__name__)


class AclCache:
    def __init__(
        self,
        metadata: AgentClient | None,
        *,
        enabled: bool,
        super_users: str = "",
        allow_everyone_if_no_acl_found: bool = False,
        refresh_interval_ms: int = 1_000,
    ) -> None:
        self.metadata = metadata
        self.enabled = enabled
        self.super_users = parse_super_users(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self.refresh_interval_ms = refresh_interval_ms
        self.version = -1  # nothing loaded yet
        # Refusals by (api key, resource type): skiff_authorization_denied_total.
        self.denied: Counter[tuple[int, ResourceType]] = Counter()
        self.authorizer = self._build(())
        self._lock = asyncio.Lock()
        self._loaded = asyncio.Event()  # set (and replaced) at every load
        self._poller = Periodic(
            "acl-refresh", lambda: self.refresh_interval_ms / 1000, self.refresh, self._refresh_failed
        )

    @classmethod
    def disabled(cls) -> AclCache:
        return cls(None, enabled=False)

    def _build(self, bindings: Iterable[AclBinding]) -> Authorizer:
        return Authorizer(
            bindings,
            super_users=self.super_users,
            # Before the first load nothing is known: refuse rather than allow.
            allow_everyone_if_no_acl_found=self.allow_everyone_if_no_acl_found and self.version >= 0,
        )

    # ------------------------------------------------------------------ decisions

    def authorize(
        self, principal: str, host: str, operation: AclOperation, rtype: ResourceType, name: str
    ) -> bool:
        if not self.enabled:
            return True
        return self.authorizer.authorize(principal, host, operation, rtype, name)

    # ------------------------------------------------------------------ loading

    async def refresh(self, *, force: bool = False) -> bool:
        """Reload if metadata's version moved (or `force`); True if the bindings changed.
        Concurrent calls share one load. Raises what the metadata client raises."""
        if not self.enabled or self.metadata is None:
            return False
        async with self._lock:
            if not force:
                version = await self.metadata.acl_version()
                if version == self.version:
                    return False
            version, bindings = await self.metadata.list_acls()
            if version == self.version and not force:
                return False
            previous = self.version
            self.version = version
            self.authorizer = self._build(bindings)
            log.info(
                "ACLs: version %d -> %d, %d binding(s)", previous, version, len(self.authorizer.bindings)
            )
            loaded, self._loaded = self._loaded, asyncio.Event()
            loaded.set()
            return True

    async def wait_for_version(self, version: int) -> None:
        """Until the bindings of `version` (or a later one) are loaded (callers bound the wait)."""
        while self.version < version:
            await self._loaded.wait()

    async def start(self) -> None:
        """Load once, then poll in the background (see the module doc for failures)."""
        if not self.enabled:
            return
        try:
            await self.refresh(force=True)
        except (MetadataError, MetadataUnavailable) as e:
            log.warning("ACLs: cannot load them yet (refusing all but super users until then): %s", e)
        self._poller.start()

    def _refresh_failed(self, e: Exception) -> None:
        # keep the last good copy; try again next interval
        log.warning("ACLs: refresh failed, keeping version %d: %s", self.version, e)

    async def close(self) -> None:
        await self._poller.close()
