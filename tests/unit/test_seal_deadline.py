"""The seal lead: p95 of recent seal -> commit times plus the client's wait, capped."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from skiff.agent.seal_deadline import SealDeadline, waited_s


def test_no_history_and_no_wait_seals_at_the_interval() -> None:
    d = SealDeadline(flush_interval_ms=250, seal_lead_max_ms=50)
    assert d.lead_s(0.0) == 0.0
    assert d.deadline_s(10.0, 0.0) == pytest.approx(10.25)


def test_estimate_is_the_95th_percentile_of_the_window() -> None:
    d = SealDeadline(flush_interval_ms=250, seal_lead_max_ms=50, window=10)
    for ms in range(1, 11):  # 1..10 ms
        d.record_post_seal(ms / 1000)
    assert d.post_seal_estimate_s == pytest.approx(0.010)  # index 9 of 10 sorted
    for _ in range(10):  # the old values leave the window
        d.record_post_seal(0.002)
    assert d.post_seal_estimate_s == pytest.approx(0.002)


def test_one_slow_file_does_not_set_the_lead() -> None:
    d = SealDeadline(flush_interval_ms=250, seal_lead_max_ms=50, window=64)
    for _ in range(63):
        d.record_post_seal(0.004)
    d.record_post_seal(0.400)  # one PUT stalled
    assert d.post_seal_estimate_s == pytest.approx(0.004)
    for _ in range(2):
        d.record_post_seal(0.300)
    assert d.post_seal_estimate_s == pytest.approx(0.004)  # three stalls of 64 are ignored
    d.record_post_seal(0.200)
    assert d.post_seal_estimate_s == pytest.approx(0.200)  # a fourth is not


def test_lead_adds_the_client_wait_and_is_capped() -> None:
    d = SealDeadline(flush_interval_ms=250, seal_lead_max_ms=50)
    d.record_post_seal(0.006)
    assert d.lead_s(0.005) == pytest.approx(0.011)
    assert d.lead_s(-3.0) == pytest.approx(0.006)  # a client clock ahead of ours gives no credit
    assert d.lead_s(3600.0) == pytest.approx(0.050)  # replayed old timestamps: the cap
    d.record_post_seal(10.0)
    assert d.lead_s(0.0) <= 0.050


def test_lead_never_exceeds_half_the_interval() -> None:
    d = SealDeadline(flush_interval_ms=40, seal_lead_max_ms=50)
    assert d.lead_max_s == pytest.approx(0.020)
    assert d.lead_s(1.0) == pytest.approx(0.020)


def test_zero_turns_it_off() -> None:
    d = SealDeadline(flush_interval_ms=250, seal_lead_max_ms=0)
    d.record_post_seal(0.030)
    assert d.deadline_s(1.0, 0.5) == pytest.approx(1.25)


def test_bad_settings() -> None:
    with pytest.raises(ValueError):
        SealDeadline(flush_interval_ms=0, seal_lead_max_ms=0)
    with pytest.raises(ValueError):
        SealDeadline(flush_interval_ms=250, seal_lead_max_ms=-1)


def test_waited() -> None:
    assert waited_s(10_000, 9_995) == pytest.approx(0.006)  # whole ms, rounded up
    assert waited_s(10_000, 10_000) == pytest.approx(0.001)
    assert waited_s(10_000, -1) == 0.0  # no timestamp
    assert waited_s(10_000, 0) == 0.0
    assert waited_s(10_000, 10_007) == 0.0  # stamped in the future


@given(
    interval_ms=st.integers(1, 10_000),
    lead_max_ms=st.integers(0, 20_000),
    posts=st.lists(st.floats(0, 100, allow_nan=False), max_size=200),
    waited=st.floats(-1e6, 1e6, allow_nan=False),
)
def test_the_deadline_stays_between_half_the_interval_and_the_interval(
    interval_ms: int, lead_max_ms: int, posts: list[float], waited: float
) -> None:
    d = SealDeadline(flush_interval_ms=interval_ms, seal_lead_max_ms=lead_max_ms, window=16)
    for p in posts:
        d.record_post_seal(p)
    if posts:  # the estimate is one of the last 16 values, at or above their median
        last = sorted(posts[-16:])
        assert d.post_seal_estimate_s in last
        assert d.post_seal_estimate_s >= last[len(last) // 2]
    when = d.deadline_s(100.0, waited) - 100.0
    assert interval_ms / 1000 - (interval_ms // 2) / 1000 - 1e-9 <= when <= interval_ms / 1000 + 1e-9
