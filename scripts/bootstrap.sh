#!/usr/bin/env bash
# Create or reuse .venv, install tailreactor with its test and bench extras, and install system tools:
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
  echo "bootstrap: installing tailreactor[test,bench] into $venv" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -e "$root[test,bench]"
  touch "$stamp"
fi

apt_install() {  # apt_install PACKAGE: install one Debian package quietly
  echo "bootstrap: installing $1 with apt-get" >&2
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$1" >/dev/null
}
for arg in "$@"; do
  case "$arg" in
    --wrk) command -v wrk >/dev/null 2>&1 || apt_install wrk ;;
    --nginx) { command -v nginx || test -x /usr/sbin/nginx; } >/dev/null 2>&1 || apt_install nginx ;;
  esac
done
export TAILREACTOR_PY="$venv/bin/python"
