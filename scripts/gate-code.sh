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
# Each run lasts DURATION_S virtual seconds, not the quick profile's 2: the interactive class sends 200
# requests/s, and a run's p99 has a verdict only with 7 samples at or beyond its rank (tailjob.stats.
# samples_to_bound), 700 per run, so at 2 s every class's p99 was `n/a` and the gate could not see the
# class that matters; at 5 s its p99 carries ~10 samples per run and its pooled p99.9 ~8.  Virtual seconds
# cost CPU only (the bulk class's simulated requests), not waiting.
#
# Usage: scripts/gate-code.sh [job options...]   (e.g. --out DIR; they are added to the job's, after its
# own, so --duration or --backend override them).  It sets itself up like the README's commands: it
# sources scripts/bootstrap.sh (.venv with the test extras, reused when up to date) and runs the job from
# this tree (scripts/ci, reference/ first on the import path) under the venv's python.
set -euo pipefail
DURATION_S=5
for arg in "$@"; do  # --help anywhere is the help alone; the live tier is another job
  case "$arg" in
    -h|--help)
      echo "usage: scripts/gate-code.sh [JOB-OPTION ...]   (e.g. --out DIR; added to the job's options)"
      echo "the sim tier's quick profile, workload mixed, $DURATION_S virtual s per run, --gate --a-ref BASE:"
      echo "arm A on BASE's code, arm B on the working tree's; BASE: the merge base with main (or origin/main)"
      echo "off main, else HEAD~1"
      echo "exit status:"
      echo "  0    no metric is a regression (or BASE is not in this clone: nothing to compare with)"
      echo "  1    a metric is a regression"
      echo "  2    bad input (one line naming the option)"
      echo "  3    the environment (a tool or the kernel) or a run failed"
      echo "  130  interrupted (Ctrl-C); 143 on SIGTERM"
      exit 0 ;;
  esac
done
tier_next=""
for arg in "$@"; do
  tier=""
  if [ -n "$tier_next" ]; then tier="$arg"; fi
  case "$arg" in --tier=*) tier="${arg#--tier=}" ;; esac
  tier_next=""
  [ "$arg" = "--tier" ] && tier_next=1
  if [ -n "$tier" ] && [ "$tier" != "sim" ]; then
    echo "gate-code: --tier $tier: the code gate runs virtual time, deterministic; accepted: --tier sim" \
         "(live load is scripts/tail-latency.sh --a-ref BASE)" >&2
    exit 2
  fi
done
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

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
source "$root/scripts/bootstrap.sh"
PYTHONPATH="$root/scripts/ci:$root/reference${PYTHONPATH:+:$PYTHONPATH}" \
  exec "$TAILREACTOR_PY" "$root/scripts/ci/tail_latency.py" --tier sim --profile quick --workload mixed \
  --duration "$DURATION_S" --gate --a-ref "$base" "$@"
