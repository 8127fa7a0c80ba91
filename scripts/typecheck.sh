#!/usr/bin/env bash
# mypy over the product packages as they import: `skiff.agent`, `skiff.metadata`, ... The
# folders stay at the top level and setuptools maps them into the `skiff` namespace when it
# installs them, which mypy cannot see (it runs no import hooks), so this points a tree of
# symlinks (.typecheck/skiff/<folder> -> <folder>) at them and checks that tree; error paths
# are printed as the real ones.
set -euo pipefail
cd "$(dirname "$0")/.."
tree=.typecheck
mkdir -p "$tree/skiff"
for pkg in agent metadata compactor fileformat spark cli; do
    ln -sfn "../../$pkg" "$tree/skiff/$pkg"
done
status=0
out=$(MYPYPATH="$tree" mypy --explicit-package-bases "$tree/skiff" examples "$@" 2>&1) || status=$?
printf '%s\n' "$out" | sed "s#^$tree/skiff/##"
exit "$status"
