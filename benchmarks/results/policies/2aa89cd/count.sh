#!/usr/bin/env bash
# Age order's and backend order's counts at 1, 4, 8 and 16 requests in flight after the reactor walks
# the parts of an age-ordered round that need no decision (issue 40, item 3: the default policy within
# 2k instructions of backend order's dispatch walk), from a clean tree with the reference/ and scripts/
# of the commit this directory is named after:
#   bash benchmarks/results/policies/<commit>/count.sh [OUT_DIR]   (default: this directory; needs valgrind)
# The rows of benchmarks/results/policies/f276819/count.sh that this change can move: age (the count's
# default TAIL_US=1: every event aged by its delivery), age3500 (TAIL_US=3500, the default, which under
# callgrind also ages every event), age60s (TAIL_US=60 s, at which no event ages) and backend.
# Each report is `count`'s Markdown under the command that made it.
set -euo pipefail
case "${1:-}" in
  -h|--help) echo "usage: benchmarks/results/policies/<commit>/count.sh [OUT_DIR]   (32 counts; default OUT_DIR: this directory)"; exit 0 ;;
esac
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../.." && pwd)"
out="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}"
commit="$(git -C "$root" rev-parse --short=7 HEAD)"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
one() {  # NAME ENV... -- ARGS...: one count, its report as NAME.md
  local name="$1"; shift; local env=(); while [ "$1" != "--" ]; do env+=("$1"); shift; done; shift
  rm -rf "$tmp/r"
  env "${env[@]}" "$root/scripts/tail-latency.sh" count "$@" --out "$tmp/r" >/dev/null
  { printf 'Command: `%s scripts/tail-latency.sh count %s`, from the tree at %s (no PYTHONPATH).\n\n' \
      "${env[*]}" "$*" "$commit"
    cat "$tmp"/r/results/*-instructions.md; } >"$out/$name.md"
  echo "$name: $(sed -n 's/^| \*\*total\*\* | \*\*\(.*\)\*\* |$/\1/p' "$out/$name.md" | head -1)"
}
for n in 1 16 4 8; do
  for backend in epoll io_uring; do
    for policy in backend age; do
      one "$policy-bench-$backend-c$n" CWIST_REACTOR_POLICY="$policy" -- --server "bench-$backend" --in-flight "$n"
    done
    one "age3500-bench-$backend-c$n" CWIST_REACTOR_POLICY=age CWIST_REACTOR_TAIL_US=3500 -- \
      --server "bench-$backend" --in-flight "$n"
    one "age60s-bench-$backend-c$n" CWIST_REACTOR_POLICY=age CWIST_REACTOR_TAIL_US=60000000 -- \
      --server "bench-$backend" --in-flight "$n"
  done
done
