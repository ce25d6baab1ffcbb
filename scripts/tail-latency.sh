#!/usr/bin/env bash
# The main job: set up .venv and wrk if needed (not for --help) (and nginx for `peers`), then run the
# tail-latency job (default: `ab`, the quick profile, both backends, then the same A/B in virtual time).
# Arguments go to the job's console script, tailreactor-tail-latency (tailjob.cli:main, in .venv):
# a subcommand (ab, calibrate, peers, sweep, validate, count) and its options.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
for arg in "$@"; do  # --help installs nothing: it needs only Python's standard library
  case "$arg" in
    -h|--help) PYTHONPATH="$root/scripts/ci:$root/reference${PYTHONPATH:+:$PYTHONPATH}" \
                 exec "${PYTHON:-python3}" -m tailjob.options "$@" ;;
  esac
done
tools=(--wrk)
if [ "${1:-}" = "peers" ]; then
  # Its arguments are checked before nginx is installed for it (one line, exit 2, nothing changed).
  PYTHONPATH="$root/scripts/ci:$root/reference${PYTHONPATH:+:$PYTHONPATH}" "${PYTHON:-python3}" -m tailjob.options "$@"
  tools+=(--nginx)
fi
source "$root/scripts/bootstrap.sh" "${tools[@]}"
cd "$root"
exec "$(dirname "$TAILREACTOR_PY")/tailreactor-tail-latency" "$@"
