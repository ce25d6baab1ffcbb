"""What the ``cabi:`` test modules (``test_conformance_cabi_*.py``) share: the example C backend
and its build with the real ``cc`` (through its Makefile), the mark that skips a test without a C
compiler (or make), and the name of clause B8's waits under a microsecond.  The example library
built once per module is the ``example_lib`` fixture of conftest.py.  Not collected: it holds no
test."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from test_conformance_meta import ROOT

EXAMPLE = ROOT / "examples" / "c-backend"
HAVE_CC = shutil.which("cc") is not None and shutil.which("make") is not None
needs_cc = pytest.mark.skipif(not HAVE_CC, reason="no C compiler: `cc` or `make` is not on PATH")


def build(out: Path, name: str, *defs: str, cflags: str | None = None) -> Path:
    """``make -C examples/c-backend`` into ``out``: returns ``out/lib<name>.so``."""
    args = [f"CFLAGS={cflags}"] if cflags else []
    proc = subprocess.run(
        ["make", "-s", "-C", str(EXAMPLE), f"OUT={out}", f"NAME={name}", f"DEFS={' '.join(defs)}", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lib = out / f"lib{name}.so"
    assert lib.is_file(), proc.stdout + proc.stderr
    return lib


#: The waits under a microsecond of clause B8 (test_backend_timeout_rounding.py), timed in C.
SUBMICRO = "test_a_wait_under_a_microsecond_is_never_early"
