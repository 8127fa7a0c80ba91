#!/usr/bin/env bash
# Set up (first run only) and start the playground: one agent on localhost:9092, the
# metadata API on :9093, SQLite + a file:// bucket under ./skiff-data.
set -euo pipefail
cd "$(dirname "$0")/.."
SKIFF_EXTRAS="${SKIFF_EXTRAS:-test}"
# (again when an older install cannot import the skiff namespace, e.g. after an upgrade)
.venv/bin/python -c "import skiff.cli" 2>/dev/null || SKIFF_EXTRAS=test bash scripts/setup.sh
exec .venv/bin/skiff playground "$@"
