"""The compactor's test hook (`compactor.pause_hook`, `SKIFF_COMPACT_PAUSE_AFTER_SWAPS`):
it blocks the job's thread at the N-th swap (N=0: at the first job's start) with a marker
on stderr, resumes on its event (SIGUSR1 in the CLI and agents), and pauses only once."""

from __future__ import annotations

import threading

import pytest
from skiff.compactor.pause_hook import ENV, MARKER, PauseHook


def test_from_env() -> None:
    assert PauseHook.from_env({}) is None
    assert PauseHook.from_env({ENV: " "}) is None
    hook = PauseHook.from_env({ENV: "3"})
    assert hook is not None and hook.after_swaps == 3
    with pytest.raises(ValueError):
        PauseHook.from_env({ENV: "-1"})


def _in_thread(fn: object) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)  # type: ignore[arg-type]
    t.start()
    return t


def test_pauses_at_the_nth_swap_until_resumed_then_never_again(capsys: pytest.CaptureFixture[str]) -> None:
    hook = PauseHook(2)
    hook.job_started("j1", "h")  # N=2: not at the start
    hook.swapped("j1", "h")
    assert MARKER not in capsys.readouterr().err

    t = _in_thread(lambda: hook.swapped("j1", "h"))
    assert hook.paused.wait(timeout=30)
    assert t.is_alive()  # blocked: nothing set `resume`
    assert f"{MARKER} after 2 swap(s), job j1, holder h" in capsys.readouterr().err
    hook.resume.set()
    t.join(timeout=30)
    assert not t.is_alive()

    hook.swapped("j2", "h")  # once per process
    hook.job_started("j3", "h")
    assert MARKER not in capsys.readouterr().err
    assert hook.swaps == 3


def test_zero_pauses_when_the_first_job_starts(capsys: pytest.CaptureFixture[str]) -> None:
    hook = PauseHook(0)
    hook.resume.set()  # resumed before: returns at once, after the marker
    hook.job_started("j1", "agent-a")
    assert f"{MARKER} after 0 swap(s), job j1, holder agent-a" in capsys.readouterr().err
    hook.job_started("j2", "agent-a")
    assert MARKER not in capsys.readouterr().err
