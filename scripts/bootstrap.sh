#!/usr/bin/env bash
# Create or reuse .venv, install tailreactor with its test, bench and lint extras, and install system tools:
# --wrk installs wrk, --nginx installs nginx (the ceiling of the job's --peers comparison; it is not
# started as a service).  Sourced by scripts/test.sh and scripts/tail-latency.sh; safe to run again.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${TAILREACTOR_VENV:-$root/.venv}"
py="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
  echo "bootstrap: creating virtual environment $venv" >&2
  "$py" -m venv "$venv"
fi
# Reinstall only when pyproject.toml changed since the last install.
stamp="$venv/.tailreactor-installed"
if [ ! -f "$stamp" ] || [ "$root/pyproject.toml" -nt "$stamp" ]; then
  echo "bootstrap: installing tailreactor[test,bench,lint] into $venv" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -e "$root[test,bench,lint]"
  touch "$stamp"
fi

# System tools come from apt-get, as root or through sudo without a password.  Where that is not
# possible (no apt, not root, or apt-get fails) bootstrap says so in one line and goes on: the tests
# that need the tool are skipped with how to install it; the tail-latency job stops with the same hint.
apt_prefix() {  # prints the command prefix that runs apt-get as root; fails when there is none
  command -v apt-get >/dev/null 2>&1 || return 1
  if [ "$(id -u)" -eq 0 ]; then echo ""; return 0; fi
  command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1 && echo "sudo -n"
}
apt_install() {  # apt_install PACKAGE: install one Debian package quietly, or say why not
  local sudo
  if ! sudo="$(apt_prefix)"; then
    echo "bootstrap: $1 not found and cannot install it here (needs apt-get as root or passwordless sudo);" \
         "going on without it, what needs it is skipped; install it: sudo apt-get install $1" >&2
    return 0
  fi
  echo "bootstrap: installing $1 with apt-get" >&2
  if ! { $sudo apt-get update -qq >/dev/null && \
         DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$1" >/dev/null; }; then
    echo "bootstrap: apt-get could not install $1; going on without it, what needs it is skipped;" \
         "install it: sudo apt-get install $1" >&2
  fi
}
for arg in "$@"; do
  case "$arg" in
    --wrk) command -v wrk >/dev/null 2>&1 || apt_install wrk ;;
    --nginx) { command -v nginx || test -x /usr/sbin/nginx; } >/dev/null 2>&1 || apt_install nginx ;;
  esac
done
export TAILREACTOR_PY="$venv/bin/python"
