#!/usr/bin/env bash
# Create ./.venv and install Skiff with its test dependencies, plus the system tools the
# tests use (kcat from Debian, Java 17 for Spark and the Java Kafka client). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3

if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[${SKIFF_EXTRAS:-test,spark}]"
