"""`skiff compact`'s summary table (skiff.cli.compact_output.print_summary) shows the transaction
counts its `--json` summary has: aborted transactions' batches and markers dropped, added
up over jobs and passes, the same numbers in both forms."""

from __future__ import annotations

import io
import json

from rich.console import Console
from skiff.cli.compact_output import print_summary
from skiff.compactor.pass_summary import PassSummary
from skiff.compactor.plan import JobPlan, JobStats

ROW = "aborted txn batches / markers dropped"


def _render(summary: PassSummary) -> list[str]:
    console = Console(file=io.StringIO(), width=200, color_system=None, highlight=False)
    print_summary(summary, console)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    return [line for line in out.splitlines() if ROW in line]


def test_the_table_shows_the_transaction_counts_of_the_json_summary() -> None:
    plan = JobPlan(job_id="j", files=(), partitions=(), now_ms=0)
    first = PassSummary()
    first.add_job(plan, JobStats(tombstones_dropped=1, aborted_batches_dropped=3, markers_dropped=2))
    second = PassSummary()
    second.add_job(plan, JobStats(aborted_batches_dropped=4, markers_dropped=1))
    first.merge(second)
    as_json = json.loads(json.dumps(first.as_dict()))
    assert (as_json["aborted_batches_dropped"], as_json["markers_dropped"]) == (7, 3)
    (line,) = _render(first)
    cells = [c.strip() for c in line.split("│") if c.strip()]
    assert cells == [ROW, f"{as_json['aborted_batches_dropped']} / {as_json['markers_dropped']}"]


def test_an_empty_pass_shows_zeros() -> None:
    (line,) = _render(PassSummary())
    assert line.split("│")[-2].strip() == "0 / 0"
