#!/usr/bin/env bash
# The main job: set up .venv and wrk if needed, then run the tail-latency job against the bench
# server (default: the quick profile, both backends).  Arguments go to scripts/ci/tail_latency.py.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/bootstrap.sh" --wrk
cd "$root"
exec "$TAILREACTOR_PY" scripts/ci/tail_latency.py "$@"
