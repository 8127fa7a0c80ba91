"""`run_until_exit` ends the process within its exit timeout (agent.process).

`asyncio.run` and the interpreter wait without limit for a task that swallows its
cancellation and for every worker thread still running: a playground that had logged
"stopped cleanly" then lived on until SIGKILL (issue 25). Each case runs in a subprocess
(the bounded exit is `os._exit`) with an exit timeout of 300 ms, and must be gone well
within the subprocess deadline, saying what it abandoned."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import asyncio, logging, sys, threading
    from skiff.agent.process import run_until_exit

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    mode = sys.argv[1]
    forever = threading.Event()

    async def stubborn() -> None:
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                pass  # swallowed: asyncio.run would wait for this task for good

    async def main() -> bool:
        if mode == "thread":
            asyncio.ensure_future(asyncio.to_thread(forever.wait))
        if mode == "task":
            asyncio.ensure_future(stubborn(), loop=asyncio.get_running_loop())
        await asyncio.sleep(0.05)  # the thread or the task is under way
        return mode != "unclean"

    ok = run_until_exit(main(), exit_timeout_ms=300)
    print("returned", ok, flush=True)
    sys.exit(0 if ok else 1)
    """
)
DEADLINE_S = 30  # a stuck process is killed here: the test fails instead of hanging


def _run(mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=DEADLINE_S, check=False
    )


@pytest.mark.parametrize(("mode", "code"), [("clean", 0), ("unclean", 1)])
def test_nothing_left_returns_the_outcome(mode: str, code: int) -> None:
    done = _run(mode)
    assert done.returncode == code, done.stderr
    assert "returned" in done.stdout
    assert "exit:" not in done.stderr


def test_a_worker_thread_that_never_returns_is_abandoned() -> None:
    done = _run("thread")
    assert done.returncode == 0, done.stderr
    assert "returned" not in done.stdout  # exited at once, at the deadline
    assert "exit: thread skiff-to-thread" in done.stderr
    assert "in wait" in done.stderr  # its stack: threading.Event.wait


def test_a_task_that_swallows_its_cancellation_is_abandoned() -> None:
    done = _run("task")
    assert done.returncode == 0, done.stderr
    assert "returned" not in done.stdout
    assert "exit: task still running" in done.stderr
    assert "stubborn" in done.stderr
