#!/usr/bin/env bash
# The lint step of .ci/run: ruff (rules and formatting) and mypy, as configured in pyproject.toml.
# Sets up .venv with the lint extra first (scripts/bootstrap.sh).  Runs every check, then exits
# non-zero if any of them found something.  Extra arguments go to `ruff check` (e.g. --fix).
set -euo pipefail
case "${1:-}" in
  -h|--help)
    echo "usage: scripts/lint.sh [RUFF-CHECK-OPTION ...]   (e.g. --fix: apply ruff's safe fixes)"
    echo "runs ruff check, ruff format --check and mypy as pyproject.toml configures them (scripts/lint.sh --fix, then ruff format, mends most);"
    echo "exits 1 if any of them found something"
    exit 0 ;;
esac
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/bootstrap.sh"
cd "$root"
bin="$(dirname "$TAILREACTOR_PY")"
status=0
echo "lint: ruff check" >&2
"$bin/ruff" check "$@" || status=1
echo "lint: ruff format --check" >&2
"$bin/ruff" format --check || status=1
echo "lint: mypy (reference/tailreactor, conformance/tailreactor_conformance, scripts/ci/tailjob)" >&2
"$bin/mypy" || status=1
exit "$status"
