#!/usr/bin/env bash
# Set up from scratch (venv, packages, system tools) and run every check and test tier.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/system-deps.sh
bash scripts/setup.sh
. .venv/bin/activate
echo "== ruff"; ruff check .
echo "== ruff format"; ruff format --check .
echo "== mypy"; bash scripts/typecheck.sh
echo "== import contracts"; lint-imports
echo "== function lengths"; python scripts/function_lengths.py
echo "== pytest"; python -m pytest -q "$@"
