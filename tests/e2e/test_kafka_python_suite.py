"""kafka-python's own integration suite against a broker: every test in
tests/kafka_python_suite/passing.txt must pass.

The suite runs in a subprocess (tests/kafka_python_suite/run.py); its JSON report (passed /
failed / skipped ids, failure reasons) is written next to the test's tmp dir and its pytest log
beside it. `bootstrap` is a `skiff playground` process; passing.txt is what passes against it (regenerate
with `run.py --bootstrap HOST:PORT --write-passing`; the list may only grow).

The playground runs with the group setting kafka-python's own test broker uses
(`group.min.session.timeout.ms=1000`, in its servers/*/resources/kafka.properties): its
group tests ask for `session_timeout_ms=3000`, below the default minimum of 6000, and a
broker refusing that (INVALID_SESSION_TIMEOUT) makes those consumers fail for good.
Start a playground the same way to run the suite by hand:
`SKIFF_DEFAULT_PARTITIONS=3 SKIFF_GROUP_MIN_SESSION_TIMEOUT_MS=1000 skiff playground`.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kafka_python_suite import run as suite
from tests.support.agents import _spawn
from tests.support.s3servers import free_port

pytestmark = pytest.mark.slow

# What kafka-python's test broker configures, and differs from Skiff's defaults.
KAFKA_PYTHON_BROKER_ENV = {
    "SKIFF_DEFAULT_PARTITIONS": "3",
    "SKIFF_GROUP_MIN_SESSION_TIMEOUT_MS": "1000",  # group.min.session.timeout.ms=1000
    "SKIFF_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",  # group.initial.rebalance.delay.ms=0
}


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`skiff playground` configured as kafka-python's test broker is."""
    data = tmp_path_factory.mktemp("playground")
    port, mport = free_port(), free_port()
    p = _spawn(
        ["playground", "--data-dir", str(data / "data"), "--port", str(port), "--metadata-port", str(mport)],
        port,
        data / "playground.log",
        KAFKA_PYTHON_BROKER_ENV,
    )
    yield p.bootstrap
    p.kill(signal.SIGTERM)


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
