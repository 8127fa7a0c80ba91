"""The transaction coordinator's test hook (`agent.txn_pause_hook`,
`SKIFF_TXN_PAUSE_BEFORE_MARKERS`): off unless the variable is set, pauses the first matching
transaction of the process (writing its line) without blocking the event loop, and lets
every later one through. The agent-level use is tests/e2e/test_txn_coordinator_kill.py."""

from __future__ import annotations

import asyncio

import pytest

from agent.txn_pause_hook import ENV, MARKER, TxnPauseHook
from metadata.txn_state import TxnRecord, TxnState


def _record(txn_id: str) -> TxnRecord:
    return TxnRecord(
        txn_id, producer_id=7, producer_epoch=2, timeout_ms=60_000, state=TxnState.PREPARE_COMMIT
    )


def test_off_unless_the_variable_is_set() -> None:
    assert TxnPauseHook.from_env({}) is None
    assert TxnPauseHook.from_env({ENV: "  "}) is None
    hook = TxnPauseHook.from_env({ENV: "tx-1"})
    assert hook is not None and hook.matches("tx-1") and not hook.matches("tx-2")
    star = TxnPauseHook.from_env({ENV: "*"})
    assert star is not None and star.matches("anything")


def test_pauses_the_first_matching_transaction_once(capsys: pytest.CaptureFixture[str]) -> None:
    async def scenario() -> None:
        hook = TxnPauseHook("tx-1")
        await asyncio.wait_for(hook.before_markers(_record("tx-other")), 5)  # not matching: through
        paused = asyncio.create_task(hook.before_markers(_record("tx-1")))
        await asyncio.wait_for(hook.paused.wait(), 5)  # the loop still runs other work meanwhile
        assert not paused.done()
        await asyncio.wait_for(hook.before_markers(_record("tx-1")), 5)  # once per process
        hook.resume()
        await asyncio.wait_for(paused, 5)

    asyncio.run(scenario())
    err = capsys.readouterr().err
    assert err.count(MARKER) == 1
    assert f"{MARKER}, transactional id tx-1, producer 7 epoch 2, PrepareCommit" in err
