"""kafka-python's own integration suite against a broker: every test in
tests/kafka_python_suite/passing.txt must pass.

The suite runs in a subprocess (tests/kafka_python_suite/run.py); its JSON report (passed /
failed / skipped ids, failure reasons) is written next to the test's tmp dir and its pytest log
beside it. `bootstrap` is a `skiff playground` process; passing.txt is what passes against it (regenerate
with `run.py --bootstrap HOST:PORT --write-passing`; the list may only grow).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.kafka_python_suite import run as suite

pytestmark = pytest.mark.slow


@pytest.fixture
def bootstrap(playground: str) -> str:
    return playground


def test_excluded_tests_give_reasons() -> None:
    excluded = suite.read_excluded()
    assert excluded and all(e.reason for e in excluded)
    assert not set(suite.read_ids(suite.PASSING_FILE)) & {e.test_id for e in excluded}


@pytest.mark.timeout(1800)
def test_passing_tests_pass(bootstrap: str, tmp_path: Path) -> None:
    report_path = tmp_path / "kafka-python-suite.json"
    report = suite.run_suite(bootstrap, only_passing=True, report_path=report_path, timeout_s=1700)
    assert not report["timed_out"], f"suite timed out; log: {report['log']}"
    assert report["pytest_exit_code"] in (0, 1), f"pytest did not run the suite; log: {report['log']}"
    reasons = {t: report["failure_reasons"].get(t) or report["skipped"].get(t) for t in report["regressions"]}
    assert not report["regressions"], (
        f"{len(report['regressions'])} kafka-python test(s) from passing.txt did not pass "
        f"(report {report_path}, log {report['log']}):\n" + json.dumps(reasons, indent=1)[:20000]
    )


def test_every_test_not_passing_has_a_reason() -> None:
    not_passing = (Path(suite.__file__).parent / "not-passing.txt").read_text().splitlines()
    entries = [line for line in not_passing if line.strip() and not line.startswith("#")]
    assert entries and all(" # " in line and line.split(" # ", 1)[1].strip() for line in entries)
    listed = {line.split(" # ", 1)[0].strip() for line in entries}
    assert not listed & set(suite.read_ids(suite.PASSING_FILE))
