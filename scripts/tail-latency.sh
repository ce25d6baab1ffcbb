#!/usr/bin/env bash
# The main job: set up .venv and wrk if needed (not for --help) (and nginx for --peers), then run the tail-latency job
# against the bench server (default: the quick profile, both backends).  Arguments go to
# scripts/ci/tail_latency.py.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
for arg in "$@"; do  # --help installs nothing: it needs only Python's standard library
  case "$arg" in
    -h|--help) PYTHONPATH="$root/reference${PYTHONPATH:+:$PYTHONPATH}" \
                 exec "${PYTHON:-python3}" "$root/scripts/ci/tail_latency.py" --help ;;
  esac
done
tools=(--wrk)
for arg in "$@"; do
  if [ "$arg" = "--peers" ]; then tools+=(--nginx); fi
done
source "$root/scripts/bootstrap.sh" "${tools[@]}"
cd "$root"
exec "$TAILREACTOR_PY" scripts/ci/tail_latency.py "$@"
