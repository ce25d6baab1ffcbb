"""io_uring unavailable for each real cause, refused by the kernel through seccomp in a child.

EPERM (Docker's default seccomp profile, io_uring_disabled=2), ENOSYS (no
CONFIG_IO_URING, gVisor) and ENOMEM (memlock limits) each make
``io_uring_setup`` fail in a child process; ``auto`` must fall back to epoll
naming the errno, explicit ``io_uring`` must fail with it, and the bench server
must exit 2 with one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

CHILD = r"""
import json, logging, sys
sys.path.insert(0, {here!r})
import seccomp_deny, errno
seccomp_deny.deny(seccomp_deny.IO_URING_SETUP, getattr(errno, {err!r}))
logging.basicConfig(level=logging.WARNING, format="%(message)s")
from tailreactor import Config, Reactor, IoUringUnavailable
out = {{}}
r = Reactor(config=Config.default())
out["auto"] = r.backend_name
r.close()
try:
    Reactor(config=Config.default().replace(backend="io_uring"))
    out["explicit"] = "started"
except IoUringUnavailable as exc:
    out["explicit"] = str(exc)
    out["errno"] = exc.errno
print(json.dumps(out))
"""


@pytest.mark.parametrize("err", ["EPERM", "ENOSYS", "ENOMEM"])
def test_auto_falls_back_and_explicit_fails_with_the_real_errno(err):
    import errno

    proc = subprocess.run(
        [sys.executable, "-c", CHILD.format(here=str(HERE), err=err)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["auto"] == "epoll"
    assert out["errno"] == getattr(errno, err)
    assert err in out["explicit"] and "io_uring_disabled=" in out["explicit"]
    warnings = [line for line in proc.stderr.splitlines() if "falling back to epoll" in line]
    assert len(warnings) == 1 and err in warnings[0]


def test_bench_server_explicit_io_uring_denied_exits_2_with_one_line():
    env = dict(os.environ, CWIST_REACTOR_BACKEND="io_uring")
    cmd = [
        sys.executable,
        str(HERE / "seccomp_deny.py"),
        "EPERM",
        "--",
        sys.executable,
        "-m",
        "tailreactor.http.server",
        "--port",
        "0",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, check=False)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert "EPERM" in lines[0] and "io_uring" in lines[0]
