#!/usr/bin/env bash
# Every dispatch policy's count at 1, 4, 8 and 16 requests in flight on both backends (issue 40: what a
# policy costs in a round of one event, per round and per event of a larger one; the sim's cost model,
# scripts/ci/tailjob/sim/costs.py, is fitted from their totals), from a clean tree with the reference/
# and scripts/ of the commit this directory is named after (each report names the commit it ran at):
#   nice -n 10 bash benchmarks/results/policies/<commit>/count.sh [OUT_DIR]   (default: this directory)
# Needs valgrind.  Each report is `count`'s Markdown under the command that made it.  The count's default
# TAIL_US=1 ages every event; age3500 is age at the default TAIL_US (under callgrind, which runs the server
# about 50 times slower, most events age there too) and age60s at TAIL_US=60 s, at which no event ages.
# Two counts run side by side (a count does not depend on the machine's load), the fit's first: every
# policy on epoll at 1, 4 and 16 in flight and backend order on io_uring at 1.
set -euo pipefail
case "${1:-}" in
  -h|--help) echo "usage: benchmarks/results/policies/<commit>/count.sh [OUT_DIR]   (60 counts; default OUT_DIR: this directory)"; exit 0 ;;
esac
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../.." && pwd)"
out="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}"
mkdir -p "$out"
commit="$(git -C "$root" rev-parse --short=7 HEAD)"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
export root out commit tmp
one() {  # NAME ENV... -- ARGS...: one count, its report as NAME.md
  set -euo pipefail
  local name="$1"; shift; local env=(); while [ "$1" != "--" ]; do env+=("$1"); shift; done; shift
  env "${env[@]}" "$root/scripts/tail-latency.sh" count "$@" --out "$tmp/$name" >/dev/null
  { printf 'Command: `%s scripts/tail-latency.sh count %s`, from the tree at %s (no PYTHONPATH).\n\n' \
      "${env[*]}" "$*" "$commit"
    cat "$tmp/$name"/results/*-instructions.md; } >"$out/$name.md"
  echo "$name: $(sed -n 's/^| \*\*total\*\* | \*\*\(.*\)\*\* |$/\1/p' "$out/$name.md" | head -1)"
}
export -f one
counts() {  # one line per count, NAME ENV... -- ARGS..., the fit's inputs first
  local n b p
  for n in 1 4 16; do
    for p in backend age oldest lifo shortest; do
      echo "$p-bench-epoll-c$n CWIST_REACTOR_POLICY=$p -- --server bench-epoll --in-flight $n"
    done
  done
  echo "backend-bench-io_uring-c1 CWIST_REACTOR_POLICY=backend -- --server bench-io_uring --in-flight 1"
  for n in 8 1 4 16; do  # then the rest: epoll at 8 (the line's check), io_uring, age at 3500 and 60 s, asyncio
    for p in backend age oldest lifo shortest; do
      [ "$n" = 8 ] && echo "$p-bench-epoll-c$n CWIST_REACTOR_POLICY=$p -- --server bench-epoll --in-flight $n"
      [ "$n-$p" = 1-backend ] || echo "$p-bench-io_uring-c$n CWIST_REACTOR_POLICY=$p -- --server bench-io_uring --in-flight $n"
    done
    for b in epoll io_uring; do
      echo "age3500-bench-$b-c$n CWIST_REACTOR_POLICY=age CWIST_REACTOR_TAIL_US=3500 -- --server bench-$b --in-flight $n"
      echo "age60s-bench-$b-c$n CWIST_REACTOR_POLICY=age CWIST_REACTOR_TAIL_US=60000000 -- --server bench-$b --in-flight $n"
    done
    echo "asyncio-c$n PYTHONHASHSEED=0 -- --server asyncio --in-flight $n"
  done
}
counts | xargs -P 2 -L 1 bash -c 'one "$@"' one
