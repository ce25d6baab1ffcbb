#!/usr/bin/env bash
# The test command: set up .venv and wrk if needed, then run the whole suite in parallel.
# Extra arguments go to pytest (e.g. scripts/test.sh -k timers).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/bootstrap.sh" --wrk
cd "$root"
exec "$TAILREACTOR_PY" -m pytest -n auto "$@"
