"""Run kafka-python's own integration tests against an external Kafka-compatible broker.

kafka-python's integration suite (`test/integration/` in its PyPI sdist) can target a broker
that is already running: its fixtures read `KAFKA_URI=tcp://host:port` and then only wrap that
address (`ExternalService`) instead of launching Kafka. `KAFKA_VERSION` tells the tests which
Kafka release to assume (tests skip on it, and clients use it as their `api_version` ceiling;
they still ask the broker with ApiVersions and go no higher than it advertises). The fixtures
also want `KAFKA_ROOT` to be an existing directory, and import `test.service`, which the sdist
leaves out: our stand-in `service.py` (next to this file) takes its place.

What this script does:

1. downloads the sdist of the kafka-python version installed here (`pip download --no-binary
   :all: --no-deps kafka-python==X`) into `.cache/kafka-python-suite/` (repo root, git-ignored),
   extracts only its `test/` tree (the installed kafka-python is the code under test), adds
   `test/__init__.py`, our `test/service.py`, a `pytest.ini`, a tiny result-recording plugin
   and `keep_finished_join.py` as a plugin (a workaround for a kafka-python 3.0.12 bug that
   drops a finished group join on a busy machine; see that file and docs/testing.md);
2. runs pytest there in a subprocess, with the environment above, on the integration tests
   (all of them minus `excluded.txt`, or only those in `passing.txt` with --only-passing);
3. writes a JSON report: passed / failed / errors / skipped test ids, and `regressions`: the
   ids in `passing.txt` that did not pass. Exit status 0 iff there are no regressions (and
   pytest itself ran).

Usage (from the repo root, in the venv):

    python tests/kafka_python_suite/run.py --bootstrap 127.0.0.1:9092 [--only-passing]
        [--report PATH] [--kafka-version 4.0.0] [--write-passing [--label TEXT]] [--test-timeout 120]
        [--timeout 3600] [-- extra pytest args, e.g. -k produce -x -v]

The broker should be configured as kafka-python's own test broker is (its
servers/*/resources/kafka.properties): for Skiff, `SKIFF_DEFAULT_PARTITIONS=3
SKIFF_GROUP_MIN_SESSION_TIMEOUT_MS=1000 skiff playground` (the group tests ask for 3 s
sessions, below the default minimum of 6 s; see tests/e2e/test_kafka_python_suite.py).

`--write-passing` rewrites passing.txt with the tests that passed in this run (how the list for
a new broker is produced). Test ids are pytest node ids relative to the extracted sdist, e.g.
`test/integration/test_producer_integration.py::test_end_to_end[gzip]`.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
CACHE_DIR = REPO_ROOT / ".cache" / "kafka-python-suite"
PASSING_FILE = HERE / "passing.txt"
EXCLUDED_FILE = HERE / "excluded.txt"
SERVICE_FILE = HERE / "service.py"
# kafka-python 3.0.12 drops a group join that finished between two polls (client bug,
# docs/testing.md): loaded into the suite's pytest as a plugin, see the file.
KEEP_FINISHED_JOIN_FILE = HERE / "keep_finished_join.py"
DEFAULT_KAFKA_VERSION = "4.0.0"
INTEGRATION_DIR = "test/integration"

PYTEST_INI = """\
[pytest]
addopts = -p no:cacheprovider -p skiff_report_plugin -p skiff_keep_finished_join -ra
timeout = {test_timeout}
timeout_method = signal
asyncio_default_fixture_loop_scope = function
log_level = INFO
log_format = %(asctime)s.%(msecs)03d %(levelname)-8s %(threadName)s %(name)s %(message)s
"""

# Loaded into the pytest run (cwd is on sys.path) to record every test's outcome by node id.
REPORT_PLUGIN = '''\
"""Written by Skiff's tests/kafka_python_suite/run.py: records outcomes by node id."""
import json
import os

_results = {}


def pytest_runtest_logreport(report):
    entry = _results.setdefault(report.nodeid, {"outcome": "passed", "reason": None, "duration": 0.0})
    entry["duration"] += report.duration
    if report.failed:
        entry["outcome"] = "failed" if report.when == "call" else "error"
        entry["reason"] = entry["reason"] or (report.longreprtext or "")[-2000:]
    elif report.skipped and entry["outcome"] == "passed":
        entry["outcome"] = "skipped"
        longrepr = report.longrepr
        entry["reason"] = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    if report.when == "teardown":
        _write(None)  # after every test: a run killed half-way still leaves its results


def _write(exitstatus):
    path = os.environ.get("SKIFF_SUITE_RESULTS")
    if path:
        with open(path + ".tmp", "w") as fh:
            json.dump({"exitstatus": exitstatus, "results": _results}, fh, indent=1, sort_keys=True)
        os.replace(path + ".tmp", path)


def pytest_sessionfinish(session, exitstatus):
    _write(int(exitstatus))
'''


@dataclass(frozen=True)
class Excluded:
    test_id: str
    reason: str


def read_ids(path: Path) -> list[str]:
    """Test ids, one a line; blank lines and `#` comment lines are ignored."""
    if not path.exists():
        return []
    ids = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            ids.append(line)
    return ids


def read_excluded(path: Path = EXCLUDED_FILE) -> list[Excluded]:
    """Lines `<node id or node id prefix> # <reason>`; every entry must give a reason."""
    out = []
    for line in read_ids(path):
        test_id, sep, reason = line.partition(" # ")
        if not sep or not reason.strip():
            raise SystemExit(f"{path}: no reason given for excluded test {line!r} (write `id # reason`)")
        out.append(Excluded(test_id.strip(), reason.strip()))
    return out


def installed_kafka_python_version() -> str:
    return importlib.metadata.version("kafka-python")


def prepare_suite(version: str, *, test_timeout: int, cache: Path = CACHE_DIR) -> Path:
    """The extracted, patched suite directory for this kafka-python version (cached)."""
    suite = cache / f"kafka_python-{version}"
    if not (suite / INTEGRATION_DIR / "conftest.py").exists():
        sdist_dir = cache / "sdist"
        sdist_dir.mkdir(parents=True, exist_ok=True)
        sdists = list(sdist_dir.glob(f"kafka_python-{version}.tar.gz"))
        if not sdists:
            cmd = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps"]
            cmd += ["--no-binary", ":all:", "-d", str(sdist_dir), f"kafka-python=={version}"]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
            if proc.returncode != 0:
                raise SystemExit(f"`{' '.join(cmd)}` failed:\n{proc.stdout}\n{proc.stderr}")
            sdists = list(sdist_dir.glob(f"kafka_python-{version}.tar.gz"))
            if not sdists:
                raise SystemExit(f"pip saved no kafka_python-{version}.tar.gz in {sdist_dir}")
        tmp = cache / f".extract-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        prefix = f"kafka_python-{version}/test/"
        with tarfile.open(sdists[0]) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(prefix) and (m.isfile() or m.isdir())]
            tar.extractall(tmp, members=members, filter="data")
        shutil.rmtree(suite, ignore_errors=True)
        (tmp / f"kafka_python-{version}").rename(suite)
        shutil.rmtree(tmp, ignore_errors=True)
    # Refreshed on every run (cheap), so edits to the stand-ins take effect.
    init = suite / "test" / "__init__.py"
    if not init.exists():
        init.write_text("")
    shutil.copyfile(SERVICE_FILE, suite / "test" / "service.py")
    (suite / "pytest.ini").write_text(PYTEST_INI.format(test_timeout=test_timeout))
    (suite / "skiff_report_plugin.py").write_text(REPORT_PLUGIN)
    shutil.copyfile(KEEP_FINISHED_JOIN_FILE, suite / "skiff_keep_finished_join.py")
    (suite / "kafka-root-unused").mkdir(exist_ok=True)
    return suite


def suite_env(suite: Path, bootstrap: str, kafka_version: str, results: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ZOOKEEPER_URI", "PYTEST_ADDOPTS", "PYTHONPATH")}
    env.update(
        KAFKA_URI=f"tcp://{bootstrap}",
        KAFKA_VERSION=kafka_version,
        KAFKA_ROOT=str(suite / "kafka-root-unused"),
        PROJECT_ROOT=str(suite),
        SKIFF_SUITE_RESULTS=str(results),
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


def run_suite(
    bootstrap: str,
    *,
    only_passing: bool = False,
    kafka_version: str = DEFAULT_KAFKA_VERSION,
    report_path: Path | None = None,
    test_timeout: int = 120,
    timeout_s: float = 3600.0,
    pytest_args: list[str] | None = None,
) -> dict[str, Any]:
    """Run the suite against `bootstrap` ("host:port") and return (and write) the report."""
    version = installed_kafka_python_version()
    suite = prepare_suite(version, test_timeout=test_timeout)
    excluded = read_excluded()
    passing = read_ids(PASSING_FILE)
    results_file = suite / "results.json"
    results_file.unlink(missing_ok=True)

    cmd = [sys.executable, "-m", "pytest", "-c", str(suite / "pytest.ini"), "--rootdir", str(suite)]
    if only_passing:
        if not passing:
            raise SystemExit(f"--only-passing, but {PASSING_FILE} lists no tests")
        cmd += passing
    else:
        cmd.append(INTEGRATION_DIR)
    for e in excluded:
        cmd += ["--deselect", e.test_id]
    cmd += pytest_args or []

    started = time.monotonic()
    timed_out = False
    log_path = (report_path or CACHE_DIR / "report.json").with_suffix(".log")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        try:
            proc = subprocess.run(
                cmd,
                cwd=suite,
                env=suite_env(suite, bootstrap, kafka_version, results_file),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=timeout_s,
                check=False,
            )
            exit_code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            timed_out, exit_code = True, None
    duration = time.monotonic() - started

    raw: dict[str, Any] = {"results": {}}
    if results_file.exists():
        raw = json.loads(results_file.read_text())
    results: dict[str, dict[str, Any]] = raw["results"]
    by_outcome: dict[str, list[str]] = {"passed": [], "failed": [], "error": [], "skipped": []}
    for test_id, r in sorted(results.items()):
        by_outcome[r["outcome"]].append(test_id)
    passed = set(by_outcome["passed"])
    report: dict[str, Any] = {
        "bootstrap": bootstrap,
        "kafka_version": kafka_version,
        "kafka_python_version": version,
        "only_passing": only_passing,
        "pytest_command": cmd,
        "pytest_exit_code": exit_code,
        "timed_out": timed_out,
        "duration_s": round(duration, 1),
        "log": str(log_path),
        "counts": {k: len(v) for k, v in by_outcome.items()},
        "passed": by_outcome["passed"],
        "failed": by_outcome["failed"],
        "errors": by_outcome["error"],
        "skipped": {t: results[t]["reason"] for t in by_outcome["skipped"]},
        "failure_reasons": {t: results[t]["reason"] for t in by_outcome["failed"] + by_outcome["error"]},
        "excluded": {e.test_id: e.reason for e in excluded},
        "regressions": [t for t in passing if t not in passed],
    }
    out = report_path or CACHE_DIR / "report.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    return report


def write_passing(report: dict[str, Any], path: Path = PASSING_FILE, label: str | None = None) -> None:
    header = (
        "# kafka-python integration tests that must pass (node ids relative to the extracted sdist).\n"
        f"# Generated by tests/kafka_python_suite/run.py --write-passing against {label or report['bootstrap']}\n"
        f"# (kafka-python {report['kafka_python_version']}, KAFKA_VERSION={report['kafka_version']}).\n"
    )
    path.write_text(header + "".join(f"{t}\n" for t in report["passed"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True, help="host:port of the broker under test")
    parser.add_argument("--only-passing", action="store_true", help="run only the tests in passing.txt")
    parser.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION, help="KAFKA_VERSION for the suite")
    parser.add_argument("--report", type=Path, default=None, help="JSON report path")
    parser.add_argument("--write-passing", action="store_true", help="rewrite passing.txt from this run")
    parser.add_argument("--label", default=None, help="what the broker is, for passing.txt's header")
    parser.add_argument("--test-timeout", type=int, default=120, help="per-test timeout (s)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="whole-run timeout (s)")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    report = run_suite(
        args.bootstrap,
        only_passing=args.only_passing,
        kafka_version=args.kafka_version,
        report_path=args.report,
        test_timeout=args.test_timeout,
        timeout_s=args.timeout,
        pytest_args=args.pytest_args,
    )
    if args.write_passing:
        write_passing(report, label=args.label)
    counts = report["counts"]
    print(
        f"kafka-python {report['kafka_python_version']} suite against {args.bootstrap}: "
        f"{counts['passed']} passed, {counts['failed']} failed, {counts['error']} errors, "
        f"{counts['skipped']} skipped in {report['duration_s']}s; "
        f"{len(report['regressions'])} regression(s) vs passing.txt; report: {args.report or CACHE_DIR / 'report.json'}"
    )
    for t in report["regressions"]:
        print(f"  REGRESSION {t}")
    ran = report["pytest_exit_code"] in (0, 1) and not report["timed_out"]
    return 0 if ran and not report["regressions"] else 1


if __name__ == "__main__":
    sys.exit(main())
