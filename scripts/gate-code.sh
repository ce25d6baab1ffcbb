#!/usr/bin/env bash
# The code gate of .ci/run: does this change move the tail compared with its base?  The sim tier's quick
# profile with --gate and --a-ref BASE: arm A runs the reactor and HTTP code of BASE, arm B the working
# tree's, with the same knobs, on each backend (io_uring only where the kernel allows it: the job skips
# it otherwise, with one line naming the errno).  Exit 1 when a metric is a `regression`.
#
# BASE: the merge base with the main branch (main, else origin/main) when HEAD is not on it, else HEAD~1
# (HEAD is main's tip, or an older commit of main).  Where BASE is not in this clone (a shallow clone,
# the first commit, a branch that shares no history with main) it says so in one line and exits 0:
# there is nothing to compare with.
#
# It cannot fail on noise: a simulated run is a function of code, knobs, workload and seed, so two arms
# on the same code give ratio 1.000 on every metric, `equivalent`.  What it gates is what the sim tier
# models (the order of work, batching, yielding, pipelining, arming, timers, the injected knobs); a
# change that only makes Python slower costs the same virtual time, and the instruction tier gates that.
#
# The workload is `mixed`: a pipelined closed-loop bulk class beside open-loop interactive clients, so
# a change to dispatch (rounds, age order, budget) or to the HTTP connection code (batching, the yield
# batch, the late bypass, pipelining) moves one class against the other; closed-loop `uniform` sends
# one request per connection at a time and never exercises pipelining or yielding.
#
# Usage: scripts/gate-code.sh [job options...]   (e.g. --out DIR; they are added to the job's)
# The job runs from this tree (scripts/ci, reference/ first on the import path) under $TAILREACTOR_PY
# (set by scripts/bootstrap.sh), or python3.
set -euo pipefail
case "${1:-}" in
  -h|--help)
    echo "usage: scripts/gate-code.sh [JOB-OPTION ...]   (e.g. --out DIR; added to the job's options)"
    echo "the sim tier's quick profile, workload mixed, --gate --a-ref BASE: arm A on BASE's code, arm B"
    echo "on the working tree's; BASE: the merge base with main (or origin/main) off main, else HEAD~1"
    exit 0 ;;
esac
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
py="${TAILREACTOR_PY:-python3}"

commit() { git rev-parse -q --verify "$1^{commit}" 2>/dev/null; }

head="$(commit HEAD)"
main=""
for ref in main origin/main; do
  if commit "$ref" >/dev/null; then main="$ref"; break; fi
done
base="" what=""
if [ -n "$main" ] && [ "$(commit "$main")" != "$head" ]; then
  if ! merge_base="$(git merge-base HEAD "$main" 2>/dev/null)"; then
    echo "gate-code: HEAD and $main have no merge base in this clone (a shallow clone, or unrelated" \
         "histories): the code gate is skipped" >&2
    exit 0
  fi
  if [ "$merge_base" != "$head" ]; then  # else HEAD is an older commit of main: HEAD~1, below
    base="$merge_base" what="the merge base with $main"
  fi
fi
if [ -z "$base" ]; then
  if ! base="$(commit HEAD~1)"; then
    echo "gate-code: HEAD~1 is not in this clone (a shallow clone, or the first commit): the code gate is skipped" >&2
    exit 0
  fi
  what="HEAD~1"
fi
echo "gate-code: arm A runs ${base:0:12} ($what), arm B the working tree (HEAD ${head:0:12})" >&2
PYTHONPATH="$root/scripts/ci:$root/reference${PYTHONPATH:+:$PYTHONPATH}" \
  exec "$py" "$root/scripts/ci/tail_latency.py" --tier sim --profile quick --workload mixed --gate \
  --a-ref "$base" "$@"
