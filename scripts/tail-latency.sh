#!/usr/bin/env bash
# The main job: set up .venv and wrk if needed (not for --help) (and nginx for --peers), then run the tail-latency job
# against the bench server (default: the quick profile, both backends).  Arguments go to
# the job's console script, tailreactor-tail-latency (tailjob.cli:main, installed in .venv).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
for arg in "$@"; do  # --help installs nothing: it needs only Python's standard library
  case "$arg" in
    -h|--help) PYTHONPATH="$root/scripts/ci:$root/reference${PYTHONPATH:+:$PYTHONPATH}" \
                 exec "${PYTHON:-python3}" -m tailjob.options ;;
  esac
done
tools=(--wrk)
for arg in "$@"; do
  if [ "$arg" = "--peers" ]; then tools+=(--nginx); fi
done
source "$root/scripts/bootstrap.sh" "${tools[@]}"
cd "$root"
exec "$(dirname "$TAILREACTOR_PY")/tailreactor-tail-latency" "$@"
