"""Deny one syscall with a chosen errno in this process, via a seccomp BPF filter (ctypes, prctl).

Used by tests that need io_uring to be *really* unavailable: the kernel, not a
mock, refuses ``io_uring_setup`` the way Docker's default seccomp profile
(EPERM), a kernel without CONFIG_IO_URING (ENOSYS) or a memlock limit
(ENOMEM) does.  Applies to the calling process and its children; irreversible,
so call it only in a child process.

Source: seccomp(2), prctl(2) PR_SET_NO_NEW_PRIVS / PR_SET_SECCOMP.
"""

from __future__ import annotations

import ctypes
import errno as _errno

IO_URING_SETUP = 425  # the same number on every architecture (new-syscall unified table)

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_BPF_LD_W_ABS = 0x20
_BPF_JEQ_K = 0x15
_BPF_RET_K = 0x06
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000


class _Filter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint),
    ]


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Filter))]


def deny(syscall_nr: int, err: int) -> None:
    """Make ``syscall_nr`` fail with ``-err`` for this process from now on.  Raises OSError."""
    libc = ctypes.CDLL(None, use_errno=True)
    insns = (_Filter * 4)(
        _Filter(_BPF_LD_W_ABS, 0, 0, 0),  # A = seccomp_data.nr
        _Filter(_BPF_JEQ_K, 0, 1, syscall_nr),  # A == nr ? next : skip one
        _Filter(_BPF_RET_K, 0, 0, _RET_ERRNO | (err & 0xFFFF)),
        _Filter(_BPF_RET_K, 0, 0, _RET_ALLOW),
    )
    prog = _Prog(len(insns), insns)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, "prctl(PR_SET_SECCOMP) failed")


if __name__ == "__main__":  # python seccomp_deny.py ERRNO_NAME -- cmd ...: run cmd with io_uring denied
    import os
    import sys

    name, sep, *cmd = sys.argv[1:]
    deny(IO_URING_SETUP, getattr(_errno, name))
    os.execvp(cmd[0], cmd)
