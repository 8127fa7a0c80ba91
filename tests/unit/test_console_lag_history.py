"""console.lag_history: samples at most once per interval, drops what is older than the
window, keeps at most max_groups (those with the most lag)."""

from __future__ import annotations

from skiff.metadata.server.console.lag_history import LagHistory


def test_due_once_per_interval_and_window_drops_old_samples() -> None:
    h = LagHistory(interval_ms=10, window_ms=30, max_groups=10)
    assert h.due(0)
    h.record(0, {"g": 5})
    assert not h.due(9) and h.due(10)
    for t, lag in ((10, 4), (20, 3), (30, 2), (40, 1)):
        h.record(t, {"g": lag})
    assert h.series("g") == [(10, 4), (20, 3), (30, 2), (40, 1)]  # 0 fell out of the 30 ms window
    assert h.series("other") == []


def test_keeps_the_groups_with_the_most_lag() -> None:
    h = LagHistory(interval_ms=1, window_ms=100, max_groups=2)
    h.record(0, {"a": 1, "b": 50, "c": 7})
    assert h.series("a") == [] and h.series("b") == [(0, 50)] and h.series("c") == [(0, 7)]
    h.record(1, {"a": 99})  # b and c vanished (groups deleted): a takes a place
    assert h.series("a") == [(1, 99)]
    assert len([g for g in ("a", "b", "c") if h.series(g)]) <= 3
