#!/usr/bin/env bash
# Create or reuse .venv, install tailreactor with its test extras, and (with --wrk) install wrk.
# Sourced by scripts/test.sh and scripts/tail-latency.sh; safe to run again (idempotent).
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
  echo "bootstrap: installing tailreactor[test] into $venv" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -e "$root[test]"
  touch "$stamp"
fi

if [ "${1:-}" = "--wrk" ] && ! command -v wrk >/dev/null 2>&1; then
  echo "bootstrap: installing wrk with apt-get" >&2
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq wrk >/dev/null
fi
export TAILREACTOR_PY="$venv/bin/python"
