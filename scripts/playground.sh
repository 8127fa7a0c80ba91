#!/usr/bin/env bash
# Set up (first run only) and start the playground: one agent on localhost:9092, the
# metadata API on :9093, SQLite + a file:// bucket under ./skiff-data. Installs everything
# the README's quick start uses (the Python client is in the test extra).
set -euo pipefail
cd "$(dirname "$0")/.."
SKIFF_EXTRAS="${SKIFF_EXTRAS:-test}"
# (again when an older install cannot import the skiff namespace, e.g. after an upgrade)
.venv/bin/python -c "import skiff.cli" 2>/dev/null || SKIFF_EXTRAS=test bash scripts/setup.sh
# The quick start (README) needs nothing beyond ./.venv: its Python client (confluent-kafka)
# is installed above. kcat is optional and a system package: say so instead of asking for
# sudo on a first run.
if ! command -v kcat >/dev/null 2>&1; then
    echo "note: kcat is not installed; the README's Python client (.venv/bin/python) needs nothing more," \
        "or install kcat: sudo apt-get install kcat (Debian/Ubuntu), brew install kcat (macOS)" >&2
fi
exec .venv/bin/skiff playground "$@"
