#!/usr/bin/env bash
# Set up from scratch (venv, packages, system tools) and run every check and test tier.
#
#   bash scripts/test.sh                 everything, in lanes (below)
#   bash scripts/test.sh tests/unit -x   one plain serial pytest with these arguments
#
# The lanes partition the checks and the test suite; each runs as its own process, at most
# SKIFF_TEST_JOBS of them at a time (default 3: the suite waits on sockets, subprocesses
# and services far more than it computes, so three lanes keep two cores busy), longest
# first. Every lane writes its output to its own log under SKIFF_TEST_LOGS (default
# $TMPDIR/skiff-test-logs/<date>-<pid>); the summary at the end gives each lane's result,
# wall and CPU seconds and pytest's last line, then the tail of every failing lane's log.
# Exit status: non-zero if any lane failed. Timings and the reasons: docs/testing.md.
#
#   e2e           tests/e2e, except the PostgreSQL/S3-marked tests
#   services-e2e  tests/e2e marked `postgres` or `s3` (clusters of agent processes on
#                 PostgreSQL and S3)
#   services      tests/unit, tests/contract, tests/component marked `postgres` or `s3`
#   component     tests/component, the others
#   spark         tests/spark (one Spark session: ~18 s to start, so never split)
#   unit          tests/unit and tests/contract, the others
#   static        ruff, ruff format --check, mypy, the import contracts
#
# The first three wait (on processes, clients, JVMs, PostgreSQL, S3 servers) far more than
# they compute: each runs in two pytest-xdist workers (SKIFF_TEST_WORKERS); end-to-end, a
# whole test file per worker, so that a module's cluster is built once.
#
# Lanes share nothing that could collide: servers bind 127.0.0.1 port 0 (or ports checked
# free), each PostgreSQL test gets its own uniquely named database (tests/support/pg.py),
# each lane its own pytest base temporary directory, and the Java client's cache is built
# under a file lock.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/system-deps.sh
bash scripts/setup.sh
. .venv/bin/activate

if [ "$#" -gt 0 ]; then
    echo "== pytest $*"
    exec python -m pytest -q "$@"
fi

SERVICES="postgres or s3"
NOT_SERVICES="not postgres and not s3"
PYTEST=(python -m pytest -q -p no:cacheprovider --durations=25)
WORKERS=(-n "${SKIFF_TEST_WORKERS:-2}")
declare -A LANE_CMD=(
    [services-e2e]="${PYTEST[*]} ${WORKERS[*]} --dist loadfile tests/e2e -m '$SERVICES'"
    [e2e]="${PYTEST[*]} ${WORKERS[*]} --dist loadfile tests/e2e -m '$NOT_SERVICES'"
    [services]="${PYTEST[*]} ${WORKERS[*]} tests/unit tests/contract tests/component -m '$SERVICES'"
    [component]="${PYTEST[*]} tests/component -m '$NOT_SERVICES'"
    [spark]="${PYTEST[*]} tests/spark"
    [unit]="${PYTEST[*]} tests/unit tests/contract -m '$NOT_SERVICES'"
    [static]="ruff check . && ruff format --check . && bash scripts/typecheck.sh && lint-imports && python scripts/function_lengths.py"
)
LANES=(e2e services-e2e component services spark unit static) # longest first

# A test directory no lane names would silently never run: refuse instead.
for dir in tests/*/; do
    dir="${dir%/}"
    case "$dir" in
    tests/unit | tests/contract | tests/component | tests/e2e | tests/spark) ;;
    *) if compgen -G "$dir/test_*.py" >/dev/null; then
        echo "scripts/test.sh: $dir holds tests but is in no lane" >&2
        exit 2
    fi ;;
    esac
done

JOBS="${SKIFF_TEST_JOBS:-3}"
LOGS="${SKIFF_TEST_LOGS:-${TMPDIR:-/tmp}/skiff-test-logs/$(date -u +%Y%m%dT%H%M%SZ)-$$}"
mkdir -p "$LOGS"
LOGS="$(cd "$LOGS" && pwd)"

run_lane() { # name: runs the lane into its log; writes its status, wall and CPU seconds
    local name="$1" status=0 TIMEFORMAT='%R %U %S'
    {
        time (
            export PYTEST_ADDOPTS="${PYTEST_ADDOPTS:-} --basetemp=$LOGS/tmp-$name"
            bash -c "${LANE_CMD[$name]}" >"$LOGS/$name.log" 2>&1
        )
    } 2>"$LOGS/$name.time" || status=$?
    # the last line: a lane killed by a signal has bash's report of it above the times
    read -r wall user sys < <(tail -n 1 "$LOGS/$name.time")
    echo "$status $wall $(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')" >"$LOGS/$name.result"
}

echo "== lanes: ${LANES[*]} ($JOBS at a time); logs in $LOGS"
suite_start=$(date +%s)
for name in "${LANES[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
    echo "   start $name"
    run_lane "$name" &
done
wait
suite_end=$(date +%s)

failed=()
echo
echo "== lanes: $((suite_end - suite_start)) s in all; logs in $LOGS"
printf '   %-13s %-12s %7s %7s  %s\n' lane result "wall s" "CPU s" "pytest's summary"
for name in "${LANES[@]}"; do
    read -r status wall cpu <"$LOGS/$name.result"
    summary=$(grep -E '(passed|failed|errors?|skipped|no tests ran).* in [0-9.]+s' "$LOGS/$name.log" | tail -1 || true)
    if [ "$status" -eq 0 ]; then result=ok; else result="FAILED ($status)" && failed+=("$name"); fi
    printf '   %-13s %-12s %7.0f %7.0f  %s\n' "$name" "$result" "$wall" "$cpu" "${summary//=/}"
done
for name in "${failed[@]}"; do
    echo
    echo "== $name failed; the end of $LOGS/$name.log:"
    tail -n 60 "$LOGS/$name.log"
done
[ "${#failed[@]}" -eq 0 ]
