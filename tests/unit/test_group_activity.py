"""Agents report their non-empty consumer groups to metadata (offset expiry needs it)."""

from __future__ import annotations

from collections.abc import Sequence

from skiff.agent.groups.activity import (
    DEFAULT_REPORT_INTERVAL_MS,
    OFFSETS_RETENTION_CHECK_INTERVAL_MS,
    GroupActivityReporter,
)


class Recorder:
    def __init__(self) -> None:
        self.touched: list[list[str]] = []

    async def touch_groups(self, group_ids: Sequence[str]) -> None:
        self.touched.append(list(group_ids))


async def test_reports_non_empty_groups_and_skips_empty_reports() -> None:
    md = Recorder()
    groups = ["b", "a"]
    reporter = GroupActivityReporter(md, lambda: list(groups))  # type: ignore[arg-type]
    await reporter.report_once()
    groups.clear()
    await reporter.report_once()  # no group has members: nothing to say
    assert md.touched == [["a", "b"]]
    assert reporter.reports == 2


async def test_close_sends_a_last_report_and_default_interval_fits_kafkas_check() -> None:
    md = Recorder()
    reporter = GroupActivityReporter(md, lambda: ["g"])  # type: ignore[arg-type]
    reporter.start()
    await reporter.close()
    assert md.touched == [["g"]]
    assert DEFAULT_REPORT_INTERVAL_MS <= OFFSETS_RETENTION_CHECK_INTERVAL_MS
