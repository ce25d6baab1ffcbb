#!/usr/bin/env bash
# The main job: set up .venv and wrk if needed (and nginx for `peers`; nothing for --help or bad
# options), then run the tail-latency job (default: `ab`, the quick profile, both backends, then the
# same A/B in virtual time).
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
# Bad options are refused before .venv, wrk or nginx is set up (one line, exit 2, nothing changed):
# the options need only the standard library.  Any other failure of this early check (a base Python
# too old for it) is left to the job, which checks them again.
if [ $# -gt 0 ] && command -v "${PYTHON:-python3}" >/dev/null; then
  status=0
  refusal="$(PYTHONPATH="$root/scripts/ci:$root/reference${PYTHONPATH:+:$PYTHONPATH}" \
    "${PYTHON:-python3}" -m tailjob.options "$@" 2>&1 >/dev/null)" || status=$?
  if [ "$status" = 2 ]; then
    printf '%s\n' "$refusal" >&2
    exit 2
  fi
fi
tools=(--wrk)
if [ "${1:-}" = "peers" ]; then
  tools+=(--nginx)
fi
source "$root/scripts/bootstrap.sh" "${tools[@]}"
# The job runs from the repository root; a relative path the user gives (--workload, --out, --grid,
# --baseline) is relative to where they ran this script, which TAILJOB_CWD tells the job.
export TAILJOB_CWD="$PWD"
cd "$root"
exec "$(dirname "$TAILREACTOR_PY")/tailreactor-tail-latency" "$@"
