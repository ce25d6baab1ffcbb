"""The ``cabi:`` adapter: a library that lacks a symbol of
``conformance/include/tailreactor_backend.h`` or speaks another ABI version is one line and exit
status 2; the library's capabilities become the attributes base.py names; a library that breaks
the ABI's own rules is a clear error naming the values.
"""

from __future__ import annotations

import pytest

from cabi_helpers import build, needs_cc
from test_conformance_meta import cli


@needs_cc
@pytest.mark.parametrize(
    "flag, says",
    [
        ("-DTR_BUG_OMIT_FLUSH", "does not export tr_backend_flush"),
        ("-DTR_BUG_ABI_VERSION=2", "ABI version 2"),
    ],
)
def test_a_library_that_does_not_fit_the_abi_is_one_line_and_exit_2(flag, says, tmp_path):
    lib = build(tmp_path, "tr_epoll_misfit", flag)
    proc, _ = cli("--backend", f"cabi:{lib}")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--backend cabi:{lib}: " in lines[0] and says in lines[0], proc.stderr
    assert "tailreactor_backend.h" in lines[0], proc.stderr  # says where the ABI is written down


def test_capabilities_become_the_attributes_base_py_names(example_lib):
    from tailreactor_conformance.cabi import CabiBackend

    b = CabiBackend(example_lib)
    try:
        assert (b.name, b.ordered, b.max_batch) == ("cabi:libtr_epoll", True, 1024)
    finally:
        b.close()


def test_a_capability_skip_names_the_c_spelling_for_a_c_library(example_lib):
    """A C library that leaves TR_CAP_ORDERED out is told where a C library claims it (the
    flag, the function, the header), not the Python attribute of base.py."""
    from tailreactor_conformance.cabi import CabiBackend
    from tailreactor_conformance.harness import require_capability

    b = CabiBackend(example_lib)
    b.ordered = False  # as a library whose tr_backend_capabilities leaves the flag out
    try:
        with pytest.raises(pytest.skip.Exception) as skip:
            require_capability(b, "ordered", "B9")
    finally:
        b.close()
    reason = str(skip.value)
    assert "does not declare TR_CAP_ORDERED" in reason and "tr_backend_capabilities" in reason, reason
    assert "ordered=True" not in reason and "base.py" not in reason, reason


def test_reports_the_library_returned_survive_a_wait_cut_short(example_lib):
    """A signal handler can raise right after tr_backend_wait returned, before the
    adapter read the count: the next wait still returns those reports, once."""
    from tailreactor.backends import READ
    from tailreactor_conformance.cabi import CabiBackend
    from tailreactor_conformance.harness import Pair, collect

    b = CabiBackend(example_lib)
    ps = [Pair() for _ in range(3)]
    try:
        for i, p in enumerate(ps):
            p.make_readable()
            b.arm(p.fd, READ, f"t{i}")
        # The library takes the reports into the adapter's array; the adapter never sees the count.
        n = b._lib.tr_backend_wait(b._h, 10_000_000, b._events, len(b._events))
        assert n == 3, "precondition: three ready fds in one wait"
        assert collect(b, 3, extra_waits=2) == {"t0": 1, "t1": 1, "t2": 1}
    finally:
        b.close()
        for p in ps:
            p.close()


def test_a_directory_is_one_line_saying_so_and_exit_2(tmp_path):
    proc, _ = cli("--backend", f"cabi:{tmp_path}")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{tmp_path} is a directory" in lines[0], proc.stderr
    assert "no such file" not in lines[0], proc.stderr


def test_a_missing_library_is_one_line_and_exit_2(tmp_path):
    missing = tmp_path / "libnothing.so"
    proc, _ = cli("--backend", f"cabi:{missing}")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(missing) in lines[0] and "no such file" in lines[0], proc.stderr


def test_cabi_without_a_path_is_one_line_and_exit_2():
    proc, _ = cli("--backend", "cabi:")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cabi:PATH" in lines[0], proc.stderr


# -- a library that breaks the ABI's own rules: a clear error naming the values -----------
#: -D flag -> (the call that meets it, what the error says).  Each is an error the
#: adapter raises in the test that made the call (a failing clause), not a value it
#: passes on to the reactor.
MISBEHAVIOURS = {
    "TR_BUG_OVER_CAPACITY": ("wait", "tr_backend_wait returned 1025 reports, more than its capacity 1024"),
    "TR_BUG_UNKNOWN_TOKEN": ("wait", f"tr_backend_wait reported token {1 + (1 << 40)}, never given by arm"),
    "TR_BUG_ZERO_REVENTS": ("wait", "revents 0"),
    "TR_BUG_RESERVED": ("wait", "reserved 7"),
    "TR_BUG_ODD_REVENTS": ("wait", "bits 0x40000000 (EPOLLONESHOT) outside the TR_* set"),
    "TR_BUG_NVAL_REVENTS": (
        "wait",
        "bits 0x20 (POLLNVAL: the fd was closed while armed; drop its armings and the library's watch "
        "of it, or report TR_ERR once, and never poll it again) outside the TR_* set 0x201d",
    ),
    "TR_BUG_INT_MIN": ("arm", "tr_backend_arm returned -2147483648, not a negative errno"),
    "TR_BUG_FLUSH_COUNT": ("flush", "tr_backend_flush returned 1000"),
}


@needs_cc
@pytest.mark.parametrize("flag", sorted(MISBEHAVIOURS))
def test_a_report_or_return_value_outside_the_abi_is_a_clear_error(flag, tmp_path):
    from tailreactor.backends import READ
    from tailreactor_conformance.cabi import CabiBackend, ContractError
    from tailreactor_conformance.harness import Pair

    call, says = MISBEHAVIOURS[flag]
    lib = build(
        tmp_path, "tr_epoll_" + flag.removeprefix("TR_BUG_").lower(), f"-D{flag}", cflags="-O0 -Wall -Wextra"
    )  # no timing is measured on these: the fastest build
    b = CabiBackend(lib)
    p = Pair()
    try:
        p.make_readable()
        with pytest.raises(ContractError) as info:
            b.arm(p.fd, READ, "ready")  # the first arm gets token number 1
            if call == "flush":
                b.flush()
            for _ in range(100):  # the ready fd is reported by the first wait
                b.wait(0.01)
        assert says in str(info.value) and b.name in str(info.value), str(info.value)
    finally:
        b.close()
        p.close()


@needs_cc
def test_create_returning_a_positive_value_is_quoted(tmp_path):
    from tailreactor_conformance.cabi import CabiBackend, CabiError

    lib = build(tmp_path, "tr_epoll_create_positive", "-DTR_BUG_CREATE_POSITIVE", cflags="-O0")
    with pytest.raises(CabiError, match=r"tr_backend_create returned 7 \(accepted: 0, or a negative errno"):
        CabiBackend(lib)


@needs_cc
def test_a_failure_the_adapter_finds_is_a_failing_clause(tmp_path):
    # Through the real CLI: the token the library made up fails the clause that met it.
    lib = build(tmp_path, "tr_epoll_unknown_token", "-DTR_BUG_UNKNOWN_TOKEN")
    proc, data = cli(
        "--backend",
        f"cabi:{lib}",
        "--clause",
        "B2",
        "-n",
        "0",
        "-x",
        json_path=tmp_path / "result.json",
        liveness_s=1.0,
    )
    detail = proc.stdout[-4000:] + proc.stderr[-2000:]
    assert proc.returncode == 1 and data["failed_clauses"] == ["B2"], detail
    assert "never given by arm" in proc.stdout, detail
