"""Securing one accepted connection before the Kafka protocol starts: the TLS handshake on
SSL/SASL_SSL listeners (the TLS principal), and the SASL state on SASL listeners.

The handshake is done here, not by asyncio's server (`start_server(ssl=...)`), so that a
failure is ours to report: a client speaking plaintext (or the wrong certificate) to a TLS
listener is closed after one log line (INFO for the first failure in `_LOG_INTERVAL_S`,
DEBUG for the rest: a scanner or a misconfigured fleet cannot flood the log), never a
traceback; and a client that connects and says nothing is closed after
`ssl_handshake_timeout_ms`.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from skiff.agent.handlers import ConnectionInfo
from skiff.agent.network.listeners import Listener, tls_principal
from skiff.agent.network.sasl import CredentialCache, SaslCounts, SaslState

log = logging.getLogger(__name__)

_LOG_INTERVAL_S = 60.0


@dataclass
class ListenerSecurity:
    """What one listener's server needs to secure its connections."""

    listener: Listener
    ssl_context: ssl.SSLContext | None = None
    handshake_timeout_ms: int = 10_000
    sasl_mechanisms: tuple[str, ...] = ()
    credentials: CredentialCache | None = None
    reauth_ms: int = 0  # KIP-368 session lifetime (0: sessions never end)
    monotonic: Callable[[], float] = time.monotonic
    tls_failures: int = 0  # handshakes that failed or timed out (skiff_tls_handshake_failures_total)
    sasl_counts: SaslCounts = field(default_factory=SaslCounts)  # this listener's SASL logins
    _last_info_s: float = field(default=-_LOG_INTERVAL_S, repr=False)

    async def secure(self, writer: asyncio.StreamWriter, info: ConnectionInfo) -> bool:
        """Handshake (TLS) and set the connection's listener, principal and SASL state;
        False (logged, counted) when the connection must be closed."""
        info.listener = self.listener.name
        if self.ssl_context is not None:
            try:
                await writer.start_tls(
                    self.ssl_context, ssl_handshake_timeout=self.handshake_timeout_ms / 1000.0
                )
            except (ssl.SSLError, OSError, TimeoutError, asyncio.IncompleteReadError) as e:
                self._tls_failed(info, e)
                return False
            principal = tls_principal(writer.get_extra_info("ssl_object"))
            if principal is not None:
                info.principal = principal
        if self.listener.sasl:
            assert self.credentials is not None
            info.sasl = SaslState(
                self.sasl_mechanisms,
                self.credentials,
                reauth_ms=self.reauth_ms,
                monotonic=self.monotonic,
                counts=self.sasl_counts,
            )
        return True

    def _tls_failed(self, info: ConnectionInfo, e: BaseException) -> None:
        self.tls_failures += 1
        now = time.monotonic()
        reason = getattr(e, "reason", None) or str(e) or type(e).__name__
        if now - self._last_info_s >= _LOG_INTERVAL_S:
            self._last_info_s = now
            log.info(
                "TLS handshake with %s on listener %s failed (%s); closed. Further failures within %d s "
                "are logged at DEBUG (%d so far)",
                info.peer,
                self.listener.name,
                reason,
                int(_LOG_INTERVAL_S),
                self.tls_failures,
            )
        else:
            log.debug(
                "TLS handshake with %s on listener %s failed: %s", info.peer, self.listener.name, reason
            )
