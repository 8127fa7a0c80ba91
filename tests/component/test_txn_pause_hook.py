"""The transaction coordinator's test hook (`agent.transactions.pause_hook`,
`SKIFF_TXN_PAUSE_BEFORE_MARKERS`): off unless the variable is set, pauses the first matching
transaction of the process (writing its line, once) without blocking the event loop, holds
every later `finish` of that same transaction, and lets other transactions through. The agent-level use is tests/e2e/test_txn_coordinator_kill.py."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from skiff.agent.transactions.pause_hook import ENV, MARKER, TxnPauseHook
from skiff.metadata.transactions.state import TxnRecord, TxnState


def _record(txn_id: str) -> TxnRecord:
    return TxnRecord(
        txn_id, producer_id=7, producer_epoch=2, timeout_ms=60_000, state=TxnState.PREPARE_COMMIT
    )


def test_off_unless_the_variable_is_set() -> None:
    assert TxnPauseHook.from_env({}) is None
    assert TxnPauseHook.from_env({ENV: "  "}) is None
    hook = TxnPauseHook.from_env({ENV: "tx-1"})
    assert hook is not None and hook.matches(_record("tx-1")) and not hook.matches(_record("tx-2"))
    star = TxnPauseHook.from_env({ENV: "*"})
    assert star is not None and star.matches(_record("anything"))


def test_stops_the_first_matching_transaction_only(capsys: pytest.CaptureFixture[str]) -> None:
    async def scenario() -> None:
        hook = TxnPauseHook("*")
        first = asyncio.create_task(hook.before_markers(_record("tx-1")))
        await asyncio.wait_for(hook.paused.wait(), 5)  # the loop still runs other work meanwhile
        assert not first.done()
        # the same transaction again (the coordinator's own re-drive scan): held too
        again = asyncio.create_task(hook.before_markers(_record("tx-1")))
        await asyncio.wait_for(hook.before_markers(_record("tx-2")), 5)  # another one: through
        newer = replace(_record("tx-1"), producer_epoch=3)
        await asyncio.wait_for(hook.before_markers(newer), 5)  # another transaction of the id
        assert not again.done() and not first.done()
        hook.resume()
        await asyncio.wait_for(asyncio.gather(first, again), 5)
        await asyncio.wait_for(hook.before_markers(_record("tx-1")), 5)  # resumed: never again

    asyncio.run(scenario())
    err = capsys.readouterr().err
    assert err.count(MARKER) == 1
    assert f"{MARKER}, transactional id tx-1, producer 7 epoch 2, PrepareCommit" in err
