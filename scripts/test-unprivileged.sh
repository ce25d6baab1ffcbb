#!/usr/bin/env bash
# The test command as a normal user on a stock developer machine, started by root: scripts/test.sh as
# $TAILREACTOR_TEST_USER (default nobody) with nofile 1024 (soft and hard) and memlock 8 MiB, on a copy
# of this work tree in a temporary directory.  A copy because that user can write neither the checkout
# (pytest's cache, .hypothesis) nor, often, read root's Python.  Extra arguments go to pytest (none: the
# whole suite, as scripts/test.sh runs it).
# .ci/run runs it so that a test that passes only as root cannot land.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
user="${TAILREACTOR_TEST_USER:-nobody}"
nofile=1024
memlock=$((8 * 1024 * 1024))
case "${1:-}" in
  -h|--help)
    echo "usage: scripts/test-unprivileged.sh [PYTEST-ARGUMENT ...]   (as root; none: the whole suite)"
    echo "runs scripts/test.sh as $user with nofile $nofile and memlock 8 MiB, on a copy of this work tree"
    exit 0 ;;
esac
if [ "$(id -u)" -ne 0 ]; then
  echo "test-unprivileged: run it as root (it switches to $user); as $user itself run scripts/test.sh" >&2
  exit 2
fi
source "$root/scripts/bootstrap.sh" --wrk  # root's venv: the user's venv copies its packages
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
as_user() {
  prlimit --nofile=$nofile:$nofile --memlock=$memlock:$memlock \
    setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups env HOME="$tmp/home" "$@"
}

# A clone at this checkout's commit (tests read its git state), then the work tree on top as git
# sees it: tracked and untracked files, not ignored ones (.venv, caches), so uncommitted work is tested.
mkdir "$tmp/home"
git clone -q --no-checkout "$root" "$tmp/src"
git -C "$tmp/src" checkout -q --detach "$(git -C "$root" rev-parse HEAD)"
git -C "$root" ls-files -z -co --exclude-standard \
  | tar -C "$root" --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -C "$tmp/src" -xf -
git -C "$root" ls-files -z -d | (cd "$tmp/src" && xargs -0 -r rm -f --)  # deleted in the work tree

# A Python the user can run, of the venv's version: the venv's packages are copied next to it and the
# copy of the source is put on its path (an editable install of the copy, without pip's time).
want="$("$TAILREACTOR_PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
py=""
for cand in ${PYTHON:-} python3 "python$want" /usr/bin/python3 /usr/local/bin/python3; do
  c="$(command -v "$cand" 2>/dev/null)" || continue
  if [ "$(as_user "$c" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$want" ]; then
    py="$c"; break
  fi
done
if [ -z "$py" ]; then
  echo "test-unprivileged: no Python $want that $user can run (root's is $TAILREACTOR_PY);" \
       "install one: apt-get install python3" >&2
  exit 1
fi
"$py" -m venv --without-pip "$tmp/venv"
site="lib/python$want/site-packages"
cp -a "$(dirname "$(dirname "$TAILREACTOR_PY")")/$site/." "$tmp/venv/$site/"
rm -f "$tmp/venv/$site"/__editable__*tailreactor*
printf '%s\n' "$tmp/src/reference" "$tmp/src/conformance" "$tmp/src/scripts/ci" > "$tmp/venv/$site/tailreactor-src.pth"
cp -a "$(dirname "$TAILREACTOR_PY")/py-spy" "$tmp/venv/bin/" 2>/dev/null || true
# The venv's console scripts (pytest, tailreactor-*, ...), their shebang pointed at the user's Python.
for f in "$(dirname "$TAILREACTOR_PY")"/*; do
  [ -f "$f" ] && head -c 200 "$f" | head -n 1 | grep -q "^#!.*/python" || continue
  [ -e "$tmp/venv/bin/$(basename "$f")" ] && continue
  { echo "#!$tmp/venv/bin/python"; tail -n +2 "$f"; } > "$tmp/venv/bin/$(basename "$f")"
  chmod 755 "$tmp/venv/bin/$(basename "$f")"
done
touch "$tmp/venv/.tailreactor-installed"
chown -R "$user" "$tmp/src" "$tmp/home"

# As in .ci/run: where the user can set up a ring under these limits, io_uring tests must run.
require=0
if as_user "$tmp/venv/bin/python" -c 'from tailreactor.backends import IoUringBackend; IoUringBackend().close()'; then
  require=1
fi
echo "test-unprivileged: scripts/test.sh as $user, nofile $nofile, memlock $((memlock / 1024)) KiB," \
     "TAILREACTOR_REQUIRE_IO_URING=$require" >&2
cd "$tmp/src"
as_user env TAILREACTOR_VENV="$tmp/venv" TAILREACTOR_REQUIRE_IO_URING=$require bash scripts/test.sh "$@"
