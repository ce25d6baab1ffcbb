#!/usr/bin/env bash
# Mutation testing of the backends, the conformance suite as the test command.
#
#   scripts/mutation.sh [--clause LIST] [--timeout S] [--sample N] [--rerun-survivors] [--only FILE] [--check] [TARGET ...]
#
#   TARGET   poll selectors_poll batch16 selectors epoll io_uring c (default: all of them)
#   --clause LIST       the clauses of the test command (default B; e.g. B,R for a second pass)
#   --timeout S         bound on one mutant's test run, seconds (default 60; a mutant that reaches it
#                       counts as killed, by timeout)
#   --sample N          how many of the C example's mutants to run (default 120, a fixed seed)
#   --rerun-survivors   run the survivors of the sessions again (after a clause was sharpened)
#   --only FILE         only the survivors a reasons file lists (an earlier commit's), fresh sessions only-T
#   --check             run nothing: report the sessions there are against the listed reasons
#
# The Python files are mutated by cosmic-ray, the C example (examples/c-backend/tr_epoll.c) by
# universalmutator; both come with the mutation extra:  .venv/bin/pip install -e '.[test,mutation]'.
# Both mutate files in place, so everything runs in a copy of the repository's files,
# ${MUTATION_OUT:-.mutation}/tree; the sessions and reports go beside it, and a session already there is
# resumed (a mutant with a result is not run again).  The test command, ${MUTATION_OUT:-.mutation}/suite.sh,
# is the real `tailreactor-conformance --backend B --clause B -x -n 0` (liveness bound 1 s), with
# cosmic-ray's CosmicRayTestingException in its builtins (what the ExceptionReplacer writes into an
# `except`, a handler that catches nothing); a mutant it passes survives.  A C mutant that compiles to the same object code as the original is equivalent and not
# run; one that does not compile is not a mutant.
#
# Every survivor needs a reason in conformance/mutation-survivors.toml (scripts/mutation_survivors.py
# prints the entry to fill in): the run exits 1 while one has none, 0 when all have one, 2 on bad
# input.  --only FILE confirms sharpened tests without a whole session: it runs, in sessions of their
# own (only-TARGET.sqlite), just the mutants whose file, operator and line FILE lists as survivors
# (git show REV:conformance/mutation-survivors.toml > FILE; Python targets only); the others count as
# skipped there.  The report, ${MUTATION_OUT:-.mutation}/report.md, names the command, the commit, the counts per
# file and how long each session took (conformance/mutation-report.md is the committed one).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
py="$root/.venv/bin"
reasons="$root/conformance/mutation-survivors.toml"
me="scripts/mutation.sh"

declare -A FILE=(
  [poll]=fixtures/backends/poll.py
  [selectors_poll]=fixtures/backends/selectors_poll.py
  [batch16]=fixtures/backends/batch16.py
  [selectors]=reference/tailreactor/backends/selectors_backend.py
  [epoll]=reference/tailreactor/backends/epoll.py
  [io_uring]=reference/tailreactor/backends/io_uring.py
  [c]=examples/c-backend/tr_epoll.c
)
declare -A BACKEND=(
  [poll]=fixtures.backends.poll:backend
  [selectors_poll]=fixtures.backends.selectors_poll:backend
  [batch16]=fixtures.backends.batch16:backend
  [selectors]=selectors
  [epoll]=epoll
  [io_uring]=io_uring
)
ALL=(poll selectors_poll batch16 selectors epoll io_uring c)

usage() {
  echo "usage:"
  sed -n '3,14p' "$0" | sed 's/^# \{0,1\}//'
}
bad() {  # bad OPTION VALUE ACCEPTED: one line, exit 2, nothing written
  echo "$me: $1 ${2@Q}: accepted $3" >&2
  exit 2
}

args=("$@")
clauses=B timeout_s=60 sample=120 rerun=0 check_only=0 only="" targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --clause)
      [ $# -ge 2 ] && [[ "$2" =~ ^[BRH][0-9]*(,[BRH][0-9]*)*$ ]] || bad --clause "${2:-}" "clause ids or letters, comma-separated (B, B,R, B3,R21)"
      clauses="$2"; shift 2 ;;
    --timeout|--sample)
      [ $# -ge 2 ] || bad "$1" "" "$([ "$1" = --timeout ] && echo "a number of seconds > 0" || echo "a whole number > 0")"
      if [ "$1" = --timeout ]; then
        [[ "$2" =~ ^[0-9]+([.][0-9]+)?$ ]] && [[ ! "$2" =~ ^0+([.]0+)?$ ]] || bad --timeout "$2" "a number of seconds > 0"
        timeout_s="$2"
      else
        [[ "$2" =~ ^[0-9]+$ ]] && [ "$2" -gt 0 ] || bad --sample "$2" "a whole number > 0"
        sample="$2"
      fi
      shift 2 ;;
    --rerun-survivors) rerun=1; shift ;;
    --check) check_only=1; shift ;;
    --only)
      [ $# -ge 2 ] && [ -f "$2" ] || bad --only "${2:-}" "an existing reasons file (TOML with [[survivor]] entries)"
      only="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"; shift 2 ;;
    -*) bad option "$1" "--clause LIST, --timeout S, --sample N, --rerun-survivors, --only FILE, --check, -h" ;;
    *) [ -n "${FILE[$1]:-}" ] || bad TARGET "$1" "${ALL[*]}"
       targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${ALL[@]}")
if [ -n "$only" ]; then
  for t in "${targets[@]}"; do [ "$t" != c ] || bad TARGET c "with --only: poll selectors_poll batch16 selectors epoll io_uring"; done
fi
[ -x "$py/cosmic-ray" ] && [ -x "$py/mutate" ] || {
  echo "$me: cosmic-ray or universalmutator missing in .venv: .venv/bin/pip install -e '.[test,mutation]'" >&2
  exit 2
}

out="$(mkdir -p "${MUTATION_OUT:-$root/.mutation}" && cd "${MUTATION_OUT:-$root/.mutation}" && pwd)"
tree="$out/tree"
commit="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- reference fixtures conformance examples || echo "+changes")"
if [ "$check_only" = 0 ]; then
  # The copy: the working tree's files as they are now (tracked ones, changes included).
  rm -rf "$tree.new" && mkdir -p "$tree.new"
  git ls-files -z reference fixtures conformance examples | xargs -0 cp -P --parents -t "$tree.new"  # -P: symlinks as symlinks
  rm -rf "$tree" && mv "$tree.new" "$tree"
fi
# cosmic-ray's ExceptionReplacer writes `except CosmicRayTestingException:`, a class of its own package
# that the mutated module does not import: the handler is meant to catch nothing.  The test command is
# a process of its own, so the name is put in its builtins by a sitecustomize (imported at start-up
# from the first PYTHONPATH entry, $out/site, never the repository's path); without it an exception
# through the mutated try raised NameError there and counted as a kill.
site="$out/site"
if [ "$check_only" = 0 ]; then
  mkdir -p "$site"
  cat > "$site/sitecustomize.py" <<'PY'
"""Written by scripts/mutation.sh for the test command's processes: the name cosmic-ray's
ExceptionReplacer writes into a mutated `except`, as a builtin, so that handler catches nothing."""

import builtins

from cosmic_ray.exceptions import CosmicRayTestingException

builtins.CosmicRayTestingException = CosmicRayTestingException
PY
fi
# The children import the copy (PYTHONPATH comes before the editable install) and keep their
# bytecode in a private cache, but never the mutated packages' (a mutant of the same size written
# in the same second as the last would look cached).  The test command is $out/suite.sh (arguments:
# --backend B), the one command both tools run.
cache="$out/pycache"
if [ "$check_only" = 0 ]; then
  cat > "$out/suite.sh" <<SH
#!/bin/sh
rm -rf $cache$tree/reference $cache$tree/fixtures
exec env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$cache PYTHONPATH=$site:$tree/reference:$tree/conformance:$tree \\
  TAILREACTOR_CONFORMANCE_LIVENESS_S=1 TAILREACTOR_CONFORMANCE_SHRINK=0 \\
  $py/tailreactor-conformance --clause $clauses -x -n 0 "\$@"
SH
fi

status=0
declare -A SECONDS_TAKEN=()
for t in "${targets[@]}"; do
  start=$(date +%s)
  sess="$out/$t.sqlite" && [ -z "$only" ] || sess="$out/only-$t.sqlite"
  if [ "$check_only" = 1 ] && { { [ "$t" = c ] && [ ! -f "$out/c/tr_epoll.c" ]; } || { [ "$t" != c ] && [ ! -f "$sess" ]; }; }; then
    echo "$t: no session in $out to check (run $me ${only:+--only FILE }$t first)"
    status=1 && SECONDS_TAKEN[$t]=0 && continue
  fi
  if [ "$t" = c ]; then
    d="$out/c"
    mkdir -p "$d"
    flags="-O2 -std=c11 -fPIC -shared -s -I$tree/conformance/include"
    if [ "$check_only" = 0 ]; then
      cp "$tree/${FILE[c]}" "$d/tr_epoll.c"
      cc $flags -o "$d/original.so" "$d/tr_epoll.c"
      if [ ! -d "$d/mutants" ]; then
        "$py/python" scripts/mutation_survivors.py c-lines "$d/tr_epoll.c" > "$d/lines.txt"
        mkdir -p "$d/mutants"
        (cd "$d" && "$py/mutate" tr_epoll.c c --noCheck --lines lines.txt --mutantDir mutants > mutate.log)
      fi
      # 0 for a mutant that compiles to other object code than the original; the ones that do not
      # compile and the ones that are the same object code (equivalent) are listed.
      cat > "$d/compile.sh" <<SH
#!/bin/sh
m="\$(basename "\$1")"
cc $flags -o "$d/mutant.so" "\$1" 2>/dev/null || { echo "\$m" >> "$d/not-compiled.txt"; exit 1; }
if cmp -s "$d/mutant.so" "$d/original.so"; then echo "\$m" >> "$d/same-object.txt"; exit 1; fi
SH
      chmod +x "$d/compile.sh"
      if [ "$rerun" = 1 ] && [ -f "$d/notkilled.txt" ]; then
        : > "$d/notkilled.txt"  # the survivors are run again; the killed are kept
      fi
      resume=() && [ -f "$d/killed.txt" ] && resume=(--resume)
      # analyze_mutants records one mutant less than --numMutants (it stops before recording the last).
      (cd "$d" && "$py/analyze_mutants" tr_epoll.c \
          "sh $out/suite.sh --backend cabi:$d/mutant.so >/dev/null 2>&1" \
          --mutantDir mutants --seed 32 --numMutants $((sample + 1)) --timeout "$timeout_s" \
          --compileCommand "$d/compile.sh MUTANT" "${resume[@]}" >> analyze.log 2>&1) || true
    fi
    "$py/python" scripts/mutation_survivors.py check-c "$d" --reasons "$reasons" --name c \
        --file "${FILE[c]}" > "$d/report.txt" || status=1
  else
    cfg="$out/$t.toml"
    cat > "$cfg" <<TOML
[cosmic-ray]
module-path = "${FILE[$t]}"
timeout = $timeout_s
excluded-modules = []
test-command = "sh $out/suite.sh --backend ${BACKEND[$t]}"

[cosmic-ray.distributor]
name = "local"
TOML
    if [ "$check_only" = 0 ]; then
      if [ ! -f "$sess" ]; then
        (cd "$tree" && "$py/cosmic-ray" init "$cfg" "$sess" \
            && "$py/python" "$root/scripts/mutation_survivors.py" skip "$sess" --reasons "$reasons" \
            && { [ -z "$only" ] || "$py/python" "$root/scripts/mutation_survivors.py" only "$sess" --listed "$only"; })
      fi
      [ "$rerun" = 0 ] || "$py/python" scripts/mutation_survivors.py rerun-survivors "$sess"
      (cd "$tree" && "$py/cosmic-ray" exec "$cfg" "$sess")
    fi
    # Again after the run: entries added to the reasons file since the session began count too.
    (cd "$tree" && "$py/python" "$root/scripts/mutation_survivors.py" skip "$sess" --reasons "$reasons") >/dev/null
    (cd "$tree" && "$py/python" "$root/scripts/mutation_survivors.py" check "$sess" \
        --reasons "$reasons" --name "$t") > "$out/$t.txt" || status=1
    report="$out/$t.txt"
  fi
  SECONDS_TAKEN[$t]=$(( $(date +%s) - start ))
  rep="$out/$t.txt" && [ "$t" = c ] && rep="$out/c/report.txt"
  grep -E "^$t: [0-9]+ mutants" "$rep" | sed "s/\$/ (${SECONDS_TAKEN[$t]} s)/"
  grep -q "without a listed reason" "$rep" && sed -n '/without a listed reason; entries/,$p' "$rep"
done

{
  echo "# Mutation testing: report"
  echo
  echo "Command: \`$me ${args[*]:-}\` (targets: ${targets[*]}; --clause $clauses, --timeout $timeout_s, --sample $sample), commit $commit,"
  echo "$(date -u +%Y-%m-%d) on $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end."
  echo
  echo "| Target | File | Counts | Session time (s) |"
  echo "|---|---|---|---|"
  for t in "${targets[@]}"; do
    rep="$out/$t.txt" && [ "$t" = c ] && rep="$out/c/report.txt"
    [ -f "$rep" ] || continue
    echo "| $t | \`${FILE[$t]}\` | $(grep -E "^$t: [0-9]+ mutants" "$rep" | sed "s/^$t: //") | ${SECONDS_TAKEN[$t]} |"
  done
} > "$out/report.md"
echo "$me: report in $out/report.md$([ $status = 0 ] || echo "; a target without a session, or survivors without a listed reason: see above")"
exit $status
