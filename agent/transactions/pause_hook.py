"""A test hook: stop a transaction coordinator between the durable PREPARE_* and its markers.

NOT A SETTING FOR PRODUCTION. It is read only from the environment variable
`SKIFF_TXN_PAUSE_BEFORE_MARKERS` (not an `AgentConfig` field, so no flag, config file or
`skiff` option can turn it on), and an agent that has it logs a warning at start. Tests use
it to SIGKILL an agent inside its real EndTxn handling (tests/e2e/test_txn_coordinator_kill.py).

Value: a transactional id, or `*` for every one. With it, `TxnCoordinator.finish` (EndTxn,
a fencing InitProducerId, the timeout and re-drive scans: every caller has already made the
PREPARE_COMMIT / PREPARE_ABORT state durable in metadata) writes, for the first matching
transaction of the process,

    skiff txn test hook: paused before markers, transactional id ID, producer P epoch E, STATE

to stderr and then waits, without writing any marker, until `resume()` is called or the
process dies. The wait is an `asyncio.Event`: it blocks only that request (the EndTxn's
connection gets no answer), not the event loop, so the agent goes on heartbeating and
serving other requests and stays the transaction's coordinator until it is killed, as an
agent that crashes inside the handler would. It stops one transaction per process (the
first that matches): every later `finish` of that same transaction (the coordinator's own
re-drive scan after `transaction_redrive_after_ms`) waits too, so the paused agent never
writes its markers; other transactions go through.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Mapping

from skiff.metadata.transactions.state import TxnRecord

ENV = "SKIFF_TXN_PAUSE_BEFORE_MARKERS"
MARKER = "skiff txn test hook: paused before markers"
ANY = "*"

log = logging.getLogger(__name__)


class TxnPauseHook:
    def __init__(self, transactional_id: str) -> None:
        if not transactional_id:
            raise ValueError(f"{ENV} must name a transactional id or {ANY!r}")
        self.transactional_id = transactional_id
        self._resume = asyncio.Event()
        self.paused = asyncio.Event()  # set once the marker line is written (in-process tests)
        self._held: tuple[str, int, int] | None = None  # (id, producer id, epoch) stopped

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> TxnPauseHook | None:
        raw = env.get(ENV, "")
        if not raw.strip():
            return None
        log.warning(
            "%s=%s is set: a TEST HOOK that stops a transaction before its markers; never use it in production",
            ENV,
            raw.strip(),
        )
        return cls(raw.strip())

    def matches(self, record: TxnRecord) -> bool:
        if self._resume.is_set():
            return False
        if self._held is not None:
            return self._held == (record.transactional_id, record.producer_id, record.producer_epoch)
        return self.transactional_id in (ANY, record.transactional_id)

    async def before_markers(self, record: TxnRecord) -> None:
        """Called by `TxnCoordinator.finish` before it writes anything."""
        if not self.matches(record):
            return
        if self._held is None:
            self._held = (record.transactional_id, record.producer_id, record.producer_epoch)
            sys.stderr.write(
                f"{MARKER}, transactional id {record.transactional_id}, producer {record.producer_id}"
                f" epoch {record.producer_epoch}, {record.state.value}\n"
            )
            sys.stderr.flush()
            self.paused.set()
        await self._resume.wait()

    def resume(self) -> None:
        self._resume.set()
