#!/usr/bin/env bash
# Mutation testing of the backends with cosmic-ray, the conformance suite as the test command.
#
#   scripts/mutation.sh [TARGET ...]     TARGET: poll epoll selectors io_uring batch16 selectors_poll
#                                        (default: all of them)
#
# For each target: cosmic-ray mutates the one file (in place, one mutant at a time, restoring it
# after), runs the real `tailreactor-conformance` on that backend over the backend clauses (B,
# stopping at the first failure), and a mutant the suite passes "survives". The session and its
# report go to ${MUTATION_OUT:-.mutation}/TARGET.{sqlite,txt}; a session already there is resumed
# (cosmic-ray exec skips the mutants it has results for). Needs the mutation extra:
#   .venv/bin/pip install -e '.[test,mutation]'
# Time: about 15-30 s per mutant on a loaded 2-core machine (poll.py has 114 mutants).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
py="$root/.venv/bin"
out="${MUTATION_OUT:-$root/.mutation}"
mkdir -p "$out"

declare -A FILE=(
  [poll]=fixtures/backends/poll.py
  [epoll]=reference/tailreactor/backends/epoll.py
  [selectors]=reference/tailreactor/backends/selectors_backend.py
  [io_uring]=reference/tailreactor/backends/io_uring.py
  [batch16]=fixtures/backends/batch16.py
  [selectors_poll]=fixtures/backends/selectors_poll.py
)
declare -A BACKEND=(
  [poll]=fixtures.backends.poll:backend
  [epoll]=epoll
  [selectors]=selectors
  [io_uring]=io_uring
  [batch16]=fixtures.backends.batch16:backend
  [selectors_poll]=fixtures.backends.selectors_poll:backend
)

if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  echo "usage: scripts/mutation.sh [TARGET ...]  (TARGET: ${!FILE[*]}; default: all)"
  echo "mutates each TARGET's file with cosmic-ray (in place, restored after each mutant) and runs"
  echo "tailreactor-conformance --clause B on it; sessions and reports go to \${MUTATION_OUT:-.mutation}/"
  exit 0
fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(poll selectors_poll batch16 selectors epoll io_uring)
for t in "${targets[@]}"; do
  if [ -z "${FILE[$t]:-}" ]; then
    echo "scripts/mutation.sh: TARGET $t: accepted ${!FILE[*]}" >&2
    exit 2
  fi
done

for t in "${targets[@]}"; do
  cfg="$out/$t.toml"
  cat > "$cfg" <<TOML
[cosmic-ray]
module-path = "${FILE[$t]}"
timeout = 180.0
excluded-modules = []
test-command = "env TAILREACTOR_CONFORMANCE_LIVENESS_S=1 TAILREACTOR_CONFORMANCE_SHRINK=0 $py/tailreactor-conformance --backend ${BACKEND[$t]} --clause B -x -n 0"

[cosmic-ray.distributor]
name = "local"
TOML
  [ -f "$out/$t.sqlite" ] || "$py/cosmic-ray" init "$cfg" "$out/$t.sqlite"
  start=$(date +%s)
  "$py/cosmic-ray" exec "$cfg" "$out/$t.sqlite"
  "$py/cr-report" --show-pending "$out/$t.sqlite" > "$out/$t.txt"
  echo "$t (${FILE[$t]}): $(tail -n 3 "$out/$t.txt" | tr '\n' ' ') in $(( $(date +%s) - start )) s"
done
