#!/usr/bin/env bash
# The test command: set up .venv and wrk if needed, then run the whole suite in parallel.
# Extra arguments go to pytest (e.g. scripts/test.sh -k timers); --help is answered here.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
for arg in "$@"; do  # --help answers here: it neither sets up .venv nor starts pytest
  case "$arg" in
    -h|--help)
      cat <<'USAGE'
usage: scripts/test.sh [PYTEST ARGUMENTS ...]

Run the test suite: set up .venv (pip install -e .[test,bench,lint], only when pyproject.toml changed)
and wrk if needed (apt-get, as root or through sudo -n), then pytest -n auto on all cores. Every
argument goes to pytest, e.g.

  scripts/test.sh -k timers                     only the tests whose name matches "timers"
  scripts/test.sh tests/test_docs_korean.py     one file

It prints one line per reason a test was skipped and exits non-zero if a test fails.
pytest's own options: .venv/bin/python -m pytest --help
USAGE
      exit 0 ;;
  esac
done
source "$root/scripts/bootstrap.sh" --wrk
cd "$root"
exec "$TAILREACTOR_PY" -m pytest -n auto "$@"
