"""The C header stands alone: ``conformance/include/tailreactor_backend.h``.

A backend author includes only the header, so it must compile on its own, in C
and C++, with every warning an error; its types and prototypes must be the ones
the loader (``reference/tailreactor/backends/cabi.py``) calls through; its bits must be
Linux's ``POLL*`` values, as it says; and the build line it gives must build a
library the loader accepts.  Real ``cc`` and ``c++``; without them the tests
skip with the reason.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_conformance_meta import ROOT

INCLUDE = ROOT / "conformance" / "include"
HEADER = INCLUDE / "tailreactor_backend.h"

#: Each function as the loader declares it (cabi.SIGNATURES), as a C pointer type.
PROTOTYPES = {
    "tr_backend_abi_version": "uint32_t (*)(void)",
    "tr_backend_create": "int (*)(tr_backend **)",
    "tr_backend_capabilities": "int (*)(tr_backend *, tr_capabilities *)",
    "tr_backend_arm": "int (*)(tr_backend *, int, int, uint64_t)",
    "tr_backend_disarm": "int (*)(tr_backend *, int, int)",
    "tr_backend_wait": "int (*)(tr_backend *, int64_t, tr_event *, uint32_t)",
    "tr_backend_flush": "int (*)(tr_backend *)",
    "tr_backend_wake": "int (*)(tr_backend *)",
    "tr_backend_close": "int (*)(tr_backend *)",
    "tr_backend_destroy": "void (*)(tr_backend *)",
}

#: A translation unit that includes the header alone, then pins what it promises.
PROBE = "\n".join(
    [
        '#include "tailreactor_backend.h"',
        "#include <poll.h>",
        "#include <stddef.h>",
        "#ifdef __cplusplus",
        "#define STATIC_ASSERT static_assert",
        "#else",
        "#define STATIC_ASSERT _Static_assert",
        "#endif",
        'STATIC_ASSERT(sizeof(tr_event) == 16, "tr_event: token, revents, reserved");',
        'STATIC_ASSERT(offsetof(tr_event, revents) == 8, "tr_event.revents");',
        'STATIC_ASSERT(sizeof(tr_capabilities) == 8, "tr_capabilities: flags, max_batch");',
        'STATIC_ASSERT(TR_IN == POLLIN && TR_OUT == POLLOUT, "TR_IN, TR_OUT");',
        'STATIC_ASSERT(TR_ERR == POLLERR && TR_HUP == POLLHUP, "TR_ERR, TR_HUP");',
        'STATIC_ASSERT(TR_RDHUP == POLLRDHUP, "TR_RDHUP");',
        'STATIC_ASSERT(TR_BACKEND_ABI_VERSION == 1u, "ABI version 1");',
        *(f"typedef {ptr.replace('(*)', f'(*{name}_t)')};" for name, ptr in PROTOTYPES.items()),
        # A mismatched prototype is an incompatible-pointer error under -Werror.
        *(f"{name}_t probe_{name} = {name};" for name in PROTOTYPES),
        "",
    ]
)


def compile_probe(compiler: str, std: str, tmp_path, suffix: str) -> subprocess.CompletedProcess:
    src = tmp_path / f"probe{suffix}"
    src.write_text(PROBE)
    return subprocess.run(
        [
            compiler,
            f"-std={std}",
            "-D_GNU_SOURCE",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            f"-I{INCLUDE}",
            "-c",
            str(src),
            "-o",
            str(tmp_path / "probe.o"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler: `cc` is not on PATH")
@pytest.mark.parametrize("std", ["c99", "c11"])
def test_the_header_compiles_alone_in_c_with_warnings_as_errors(std, tmp_path):
    proc = compile_probe("cc", std, tmp_path, ".c")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler: `c++` is not on PATH")
def test_the_header_compiles_alone_in_cpp_with_warnings_as_errors(tmp_path):
    proc = compile_probe("c++", "c++11", tmp_path, ".cpp")
    assert proc.returncode == 0, proc.stderr


def test_the_probe_names_every_function_the_loader_calls():
    from tailreactor.backends.cabi import SIGNATURES

    assert set(PROTOTYPES) == set(SIGNATURES)


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler: `cc` is not on PATH")
def test_the_build_line_in_the_header_builds_a_library_the_loader_accepts(tmp_path):
    """The line as written, run by a shell from an empty directory with the venv's scripts on
    PATH: ``-I`` takes the installed header's directory from ``tailreactor-conformance --header``."""
    from tailreactor.backends.cabi import load_library

    (line,) = re.findall(r"^ \*\s+(cc .*-shared.*)$", HEADER.read_text(), flags=re.M)
    lib = tmp_path / "libfoo.so"
    argv = [
        str(ROOT / "examples" / "c-backend" / "tr_epoll.c")
        if a == "foo.c"
        else str(lib)
        if a == "libfoo.so"
        else a
        for a in line.split(" ")
    ]
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    proc = subprocess.run(
        ["sh", "-c", " ".join(argv)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"{line}: {proc.stderr}"
    assert load_library(lib).tr_backend_abi_version() == 1


# -- the header ships with the package: `tailreactor-conformance --header` --------------------
def test_header_option_prints_the_path_of_the_header_the_package_ships(tmp_path):
    """From any directory: one line, the absolute path of the installed package's header, the
    same text as the repository's."""
    from test_conformance_meta import child_env

    script = Path(sys.executable).with_name("tailreactor-conformance")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "tailreactor_conformance"]
    proc = subprocess.run(
        [*cmd, "--header"],
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    path = Path(line)
    assert path.is_absolute() and path.name == "tailreactor_backend.h", line
    assert path.read_text() == HEADER.read_text()


def test_the_wheel_holds_the_header_as_package_data(tmp_path):
    """What pip installs: a wheel built from the tree has tailreactor_conformance/include/
    tailreactor_backend.h, byte for byte the repository's."""
    import zipfile

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0 and "No module named pip" in proc.stderr:
        pytest.skip("pip is not installed in this interpreter")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (wheel,) = tmp_path.glob("tailreactor-*.whl")
    with zipfile.ZipFile(wheel) as z:
        assert z.read("tailreactor_conformance/include/tailreactor_backend.h") == HEADER.read_bytes()
