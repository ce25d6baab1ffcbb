"""A backend written in C passes the suite, and the suite bites it: ``--backend cabi:PATH``.

The example backend ``examples/c-backend/tr_epoll.c`` is built with the real
``cc`` (through its Makefile) into this test's temporary directory, then the
real ``tailreactor-conformance`` CLI runs on the shared library: every clause
on the correct build, and one clause on each broken variant built from the
same file with a ``-DTR_BUG_...`` flag.  A library that lacks a symbol of
``conformance/include/tailreactor_backend.h`` or speaks another ABI version
is one line and exit status 2.  Without a C compiler (or make) the tests that
need one skip with the reason.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_conformance_meta import ROOT, cli

EXAMPLE = ROOT / "examples" / "c-backend"
HAVE_CC = shutil.which("cc") is not None and shutil.which("make") is not None
needs_cc = pytest.mark.skipif(not HAVE_CC, reason="no C compiler: `cc` or `make` is not on PATH")

#: Broken variants of tr_epoll.c: the -D flag -> the clause that must catch it.
VARIANTS = {
    "TR_BUG_NO_ONESHOT": "B1",  # a reported token stays armed: reported again
    "TR_BUG_IGNORE_DISARM": "B3",  # disarm returns 0 and changes nothing
    "TR_BUG_KEEP_COLLECTED": "B3",  # a wait collects more than capacity; disarm leaves the rest
    "TR_BUG_DROP_HUP": "B6",  # HUP/ERR without IN/OUT reach no token
    "TR_BUG_NO_WAKE": "B7",  # wake returns 0 and writes nothing
    "TR_BUG_NO_LIMIT_IS_POLL": "B7",  # a wait with no limit (-1 ns) polls: returns 0 at once
    "TR_BUG_TRUNCATE_TIMEOUT": "B8",  # ns -> ms rounded down: 0.5 ms polls
    "TR_BUG_TRUNCATE_TIMEOUT_US": "B8",  # ns -> us rounded down, then up to ms: under 1 us polls
    "TR_BUG_LEAK_FD": "B14",  # close leaves the wake eventfd open
    # a fresh reader's bugs (issue 32), caught by the backend clause modules' event-library sections
    "TR_BUG_REARM_KEEPS_COLLECTED": "B1",  # a wait collects more than capacity; a re-arm keeps the old report
    "TR_BUG_FLUSH_EATS_WAKE": "B7",  # flush consumes the pending wake: wake, flush, wait(None) blocks
    "TR_BUG_LOWEST_FDS_FIRST": "B10",  # lowest fd numbers first, up to the capacity: the highest starve
    # what backends over event libraries still got past the suite (issue 41)
    "TR_BUG_REARM_HANDS_OVER": "B15",  # a re-arm gives the report caught for the old token to the new one
    "TR_BUG_REUSE_KEEPS_OLD_ARMING": "B5",  # a closed fd's arming reported for the file that took its number
    "TR_BUG_RDHUP_AS_HUP": "B15",  # the peer's SHUT_WR taken as HUP: WRITE reported with a full send buffer
    # a fourth fresh reader's (libev) findings (issue 41)
    "TR_BUG_NO_GENERATION": "B5",  # a closed file alive in a dup reports to its number's new arming
    "TR_BUG_SIGCHLD_HANDLER": "B7",  # create installs a SIGCHLD handler (libev's ev_default_loop)
    "TR_BUG_ONE_EPOLL_PER_PROCESS": "B1",  # backends share one epoll set: one wait takes the other's reports
    # a sixth fresh reader's (GLib) findings (issue 41)
    "TR_BUG_ONE_LOOP_OWNER": "B1",  # one wait at a time in the process (GLib's default context's ownership)
    "TR_BUG_RETRY_EINTR": "B7",  # a signal's EINTR retried inside the wait: a raising handler never runs
    # a tenth fresh reader's (libevent) finding (issue 41)
    "TR_BUG_EINTR_RESTARTS_COARSE": "B8",  # EINTR retried with the time left on the coarse clock: early
    # waits that spin or return unwoken: readers of libev and libevent (issue 41)
    "TR_BUG_NO_LIMIT_RETURNS_ZERO": "B7",  # a wait with no limit returns 0 at the end of each 100 ms slice
    "TR_BUG_SPIN_EINTR": "B7",  # an idle wait with no limit returns -EINTR over and over (libev's ev_async unref'd)
    "TR_BUG_KEEP_WATCHING": "B8",  # disarmed and reported fds stay watched: a wait beside them spins on -EINTR
    # epoll.py's two mutation gaps, as the example's (issue 41)
    "TR_BUG_KEEP_REFUSED_ARM": "B16",  # an arm that fails keeps its token: a closed file alive in a dup reports it
    "TR_BUG_EEXIST_FAILS": "B5",  # EEXIST fails the arm: a closed file dup2'd back to its number is refused
    # a spin inside one call, which counting calls cannot see: readers of GLib and libuv (issue 41)
    "TR_BUG_SPIN_INSIDE_WAIT": "B7",  # after a finite wait, wait(None) polls over and over: a ready time never reset
    # a GLib reader's and a libevent reader's spins, never early (issue 41)
    "TR_BUG_STALE_TIMER_RERUN": "B8",  # a timer from a clock cached before an idle gap, the loop re-run until the deadline
    "TR_BUG_TIMEOUT_WRAPS": "B8",  # the largest timeout's rounding up wraps negative: a wait of INT64_MAX ns polls
}


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


@needs_cc
@pytest.mark.parametrize("kind", ["missing", "a-file"])
def test_an_out_that_is_not_a_directory_is_one_line_naming_out(tmp_path, kind):
    """OUT is the directory the library is written to: a path that is none (a new user's
    OUT=/no/such/dir/lib.so, or a file) is one line naming OUT, not the linker's error."""
    out = tmp_path / "no" / "such" / "lib.so"
    if kind == "a-file":
        out = tmp_path / "lib.so"
        out.write_text("")
    proc = subprocess.run(
        ["make", "-C", str(EXAMPLE), f"OUT={out}"], capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode != 0, proc.stdout + proc.stderr
    [line] = proc.stderr.splitlines()
    assert f"OUT={out}: not a directory; accepted an existing directory, where libtr_epoll.so is" in line, (
        line
    )
    assert "ld" not in proc.stderr and "cc " not in proc.stdout, proc.stdout + proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ([] if kind == "missing" else ["lib.so"])


@needs_cc
def test_c_example_passes_every_clause(tmp_path):
    lib = build(tmp_path, "tr_epoll")
    proc, data = cli("--backend", f"cabi:{lib}", "-n", "0", json_path=tmp_path / "result.json")
    detail = proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, detail
    assert data["backends"] == ["cabi:libtr_epoll"], detail
    assert data["failed_clauses"] == [], detail
    cells = {cid: row["cabi:libtr_epoll"]["status"] for cid, row in data["clauses"].items()}
    # Every clause ran and passed; B17 (receive arming) and R23-R25 (the harvest mid-round) are
    # optional and not in the ABI.
    for cid in ("B17", "R23", "R24", "R25"):
        assert cells.pop(cid) == "skip", (cid, detail)
    # A clause may also skip for a named platform limit (as a normal user, RLIMIT_NOFILE's hard
    # limit can be below what B10's cap check needs); every other clause passed.
    limited = {
        cid
        for cid, row in data["clauses"].items()
        if row["cabi:libtr_epoll"]["status"] == "skip"
        and all("platform limit:" in r for r in row["cabi:libtr_epoll"]["skip_reasons"])
    }
    assert {s for cid, s in cells.items() if cid not in limited} == {"pass"}, cells
    # A skip only for what the backend lacks by declaration (issue 32): never a precondition.
    from test_conformance_meta import DECLARED_SKIPS

    reasons = [r for row in data["clauses"].values() for r in row["cabi:libtr_epoll"]["skip_reasons"]]
    assert all(any(d in r for d in DECLARED_SKIPS) for r in reasons), reasons
    assert "cabi:libtr_epoll" in proc.stdout and "no clause failed" in proc.stdout, detail
    if "capabilities" in data:  # the table's capability row (base.capabilities), where it exists
        assert data["capabilities"]["cabi:libtr_epoll"] == {"ordered": True, "max_batch": 1024}, detail


@needs_cc
@pytest.mark.parametrize("flag", sorted(VARIANTS))
def test_suite_catches_broken_c_variant(flag, tmp_path):
    cid = VARIANTS[flag]
    name = "tr_epoll_" + flag.removeprefix("TR_BUG_").lower()
    lib = build(tmp_path, name, f"-D{flag}")
    proc, data = cli(
        "--backend",
        f"cabi:{lib}",
        "--clause",
        cid,
        "-n",
        "0",
        "-x",
        json_path=tmp_path / "result.json",
        liveness_s=1.0,
    )
    detail = proc.stdout[-4000:] + proc.stderr[-2000:]
    assert proc.returncode == 1, f"{flag}: exit status {proc.returncode}, expected 1\n{detail}"
    assert data["failed_clauses"] == [cid], detail
    assert f"{cid} on cabi:lib{name}" in proc.stdout.replace("\n", " "), detail


#: The waits under a microsecond of clause B8 (test_backend_timeout_rounding.py), timed in C.
SUBMICRO = "test_a_wait_under_a_microsecond_is_never_early"
#: B8's waits of fractions of a millisecond and more (the same module), timed in C in a loop.
NEVER_EARLY = "test_wait_timeout_is_never_early"
#: Busy processes while a run goes on (scripts/cpu_hog.py): twice the machine's 2 cores.
UNDER_LOAD = (sys.executable, str(ROOT / "scripts" / "cpu_hog.py"), "-n", "4", "--")


@needs_cc
def test_the_microsecond_truncation_fails_b8_and_no_other_clause(tmp_path):
    """TR_BUG_TRUNCATE_TIMEOUT_US over every clause: B8 alone fails (its waits under a
    microsecond poll, and the C timing loop sees each poll return before its timeout)."""
    lib = build(tmp_path, "tr_epoll_truncate_timeout_us", "-DTR_BUG_TRUNCATE_TIMEOUT_US")
    proc, data = cli(
        "--backend", f"cabi:{lib}", "-n", "0", json_path=tmp_path / "result.json", liveness_s=1.0
    )
    detail = proc.stdout[-4000:] + proc.stderr[-2000:]
    assert proc.returncode == 1 and data["failed_clauses"] == ["B8"], detail
    failed = data["clauses"]["B8"]["cabi:libtr_epoll_truncate_timeout_us"]["failures"]
    assert failed and all(SUBMICRO in t for t in failed), failed


def b8_submicro(lib: Path, tmp_path: Path, **kw):
    """The suite's B8 waits under a microsecond alone on ``lib``, one worker (``kw``: cli's env, under)."""
    args = ("--backend", f"cabi:{lib}", "--clause", "B8", "-n", "0", "--", "-k", SUBMICRO)
    return cli(*args, json_path=tmp_path / "result.json", **kw)


@needs_cc
def test_the_c_example_never_returns_early_below_a_microsecond_with_every_core_busy(tmp_path):
    """The correct example passes B8's waits under a microsecond, timed in C, while four busy
    processes compete for two cores: a wait that returns late is fine, and none returns early."""
    lib = build(tmp_path, "tr_epoll")
    proc, data = b8_submicro(lib, tmp_path, under=UNDER_LOAD)
    detail = proc.stdout[-4000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, detail
    assert "cpu_hog: 4 busy processes" in proc.stderr, detail
    cell = data["clauses"]["B8"]["cabi:libtr_epoll"]
    assert cell["status"] == "pass" and not cell["skip_reasons"], cell


class _CostlyPoll:
    """A ``cabi:`` backend's ``time_waits`` whose poll (``tr_backend_wait(0)``) takes 560 ns at the
    least, as a GLib backend's loop run does, and whose other waits take their timeout."""

    def time_waits(self, timeout_ns, budget_s, at_least):
        from tailreactor_conformance.ctiming import WaitTimes

        return WaitTimes(at_least, 0, timeout_ns or 560, 0)


def test_a_timeout_under_the_backends_own_poll_cost_skips_naming_that_cost_and_longer_ones_run():
    """B8's waits timed in C: a timeout this backend's poll costs as much as cannot tell a poll from
    a wait, and skips naming the backend's cost (not a platform limit); the timeouts above that
    cost (1.5 and 2.5 us) still run."""
    from tailreactor_conformance.tests.test_backend_timeout_rounding import SUBMICRO_S, _timed_in_c

    with pytest.raises(pytest.skip.Exception) as skipped:
        _timed_in_c(_CostlyPoll(), 500)
    assert str(skipped.value) == (
        "tr_backend_wait(0) of this backend takes 560 ns at the least, not under the 500 ns timeout: "
        "a wait that polls looks like one that waited (the longer timeouts of this test still run)"
    )
    assert _timed_in_c(_CostlyPoll(), 1500).least_ns == 1500
    assert {1500, 2500} <= {round(t * 1e9) for t in SUBMICRO_S}


@needs_cc
def test_without_a_c_compiler_the_waits_under_a_microsecond_skip_naming_what_to_install(tmp_path):
    """No cc on PATH and CC unset (a machine without a compiler): B8's waits under a microsecond
    cannot be timed in C, and skip with one line naming what to install; they never fail for it."""
    lib = build(tmp_path, "tr_epoll")
    bare = tmp_path / "bin-without-cc"
    bare.mkdir()
    proc, data = b8_submicro(lib, tmp_path, env={"CC": "", "PATH": str(bare)})
    detail = proc.stdout[-4000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, detail
    [reason] = set(data["clauses"]["B8"]["cabi:libtr_epoll"]["skip_reasons"])
    assert reason == (
        "platform limit: no C compiler (cc is not on PATH) to time waits under a microsecond "
        "outside Python: install a C compiler (apt-get install gcc, dnf install gcc) or name one in CC"
    ), reason


@needs_cc
def test_a_cc_that_names_no_program_fails_the_waits_under_a_microsecond_naming_it(tmp_path):
    """CC set to a program that is not on PATH (a typo) is the user's setting, not the platform:
    B8's waits under a microsecond fail naming CC, so a backend that B8 would fail cannot pass by it."""
    lib = build(tmp_path, "tr_epoll")
    proc, data = b8_submicro(lib, tmp_path, env={"CC": "no-such-cc"})
    detail = proc.stdout[-4000:] + proc.stderr[-2000:]
    assert proc.returncode == 1, detail
    assert data["clauses"]["B8"]["cabi:libtr_epoll"]["status"] == "FAIL", detail
    assert "CC=no-such-cc names no program on PATH" in proc.stdout, detail


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


@pytest.fixture(scope="module")
def example_lib(tmp_path_factory) -> Path:
    if not HAVE_CC:
        pytest.skip("no C compiler: `cc` or `make` is not on PATH")
    return build(tmp_path_factory.mktemp("c-backend"), "tr_epoll")


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


def test_build_outputs_are_ignored_by_git():
    for output in ("examples/c-backend/libtr_epoll.so", "examples/c-backend/libtr_epoll_no_wake.so"):
        proc = subprocess.run(["git", "check-ignore", "-q", output], cwd=ROOT, check=False)
        if proc.returncode == 128:
            pytest.skip("not a git checkout")
        assert proc.returncode == 0, f"{output} (a build output) is not in .gitignore"


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


@needs_cc
def test_a_wait_that_never_returns_ends_the_run_with_one_line(tmp_path):
    """A tr_backend_wait that ignores its timeout (it pause()s) would hang the run:
    the adapter's watchdog prints one line and ends the process."""
    lib = build(tmp_path, "tr_epoll_wait_pauses", "-DTR_BUG_WAIT_PAUSES")
    proc, _ = cli(
        "--backend", f"cabi:{lib}", "--clause", "B8", "-n", "0", "--", "-k", NEVER_EARLY, liveness_s=0.5
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if "did not return" in line]
    assert len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith(  # its first wait, timed in C in a loop (MS_BUDGET_S, 0.1 s)
        "cabi:libtr_epoll_wait_pauses: tr_backend_wait(timeout 500000 ns), called for 0.1 s in a loop, "
        "did not return within "
    ), lines[0]


@needs_cc
def test_a_wait_that_never_returns_inside_the_c_timing_loop_ends_the_run_with_one_line(tmp_path):
    """The C loop that times B8's waits under a microsecond calls the library directly: the
    watchdog bounds the whole loop, and a wait that never returns in it ends the run as one line."""
    lib = build(tmp_path, "tr_epoll_wait_pauses", "-DTR_BUG_WAIT_PAUSES")
    proc, _ = cli(
        "--backend", f"cabi:{lib}", "--clause", "B8", "-n", "0", "--", "-k", SUBMICRO, liveness_s=0.5
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if "did not return" in line]
    assert len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith(
        "cabi:libtr_epoll_wait_pauses: tr_backend_wait(timeout 0 ns), called for 0.05 s in a loop, "
        "did not return within 1.05 s"
    ), lines[0]


@needs_cc
def test_a_wait_the_watchdog_ends_under_xdist_fails_its_clause_as_hung_and_quotes_the_line(tmp_path):
    """Under pytest-xdist the watchdog ends a worker, not the run: the test fails its clause as
    hung (not as a crash by a signal), the watchdog's line with its limit in seconds is quoted in
    the failure and in the table, and the line that reruns the test is kept (issue 41)."""
    label = "cabi:libtr_epoll_wait_pauses"
    lib = build(tmp_path, "tr_epoll_wait_pauses", "-DTR_BUG_WAIT_PAUSES")
    name = f"test_wait_timeout_is_never_early[{label.replace(':', '-')}-0.0005]"
    proc, data = cli(
        "--backend",
        f"cabi:{lib}",
        "--clause",
        "B8",
        "-n",
        "2",
        "--",
        "-k",
        name,
        json_path=tmp_path / "r.json",
        liveness_s=0.5,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and data is not None, out[-4000:]
    nodeid = f"test_backend_timeout_rounding.py::{name}"
    # B8's waits of a C backend are timed in C, in a loop (for MS_BUDGET_S, 0.1 s): the bound is the
    # loop's + the wait's timeout + WAIT_GRACE_S (twice the liveness bound).
    limit = float(f"{0.1 + 0.0005 + 2 * 0.5:g}")
    line = (
        f"{label}: tr_backend_wait(timeout 500000 ns), called for 0.1 s in a loop, did not return within "
        f"{limit:g} s; exiting: a call into the library cannot be interrupted"
    )
    assert data["failed_clauses"] == ["B8"], out[-4000:]
    assert data["clauses"]["B8"][label]["hung"] == [nodeid], data["clauses"]["B8"]
    [entry] = data["crashed"]
    assert entry["test"] == nodeid and entry["hung"]["limit_s"] == limit, entry
    assert entry["hung"]["watchdog"].startswith(line), entry
    rerun = f"tailreactor-conformance --backend cabi:{lib} -n 0 -- -s -k '{name}'"
    assert entry["rerun"] == rerun, entry
    # The suite's table and its lists, up to pytest's short summary (whose lines pytest leaves whole,
    # longrepr and all, where CI is set in the environment).
    table = proc.stdout[proc.stdout.index("tailreactor conformance: reactor") :].split(
        "short test summary info"
    )[0]
    assert "FAIL (hung)" in table and "FAIL (crashed)" not in table, table
    assert "a signal" not in proc.stdout, proc.stdout[-4000:]
    flat = " ".join(table.split())
    assert (
        "hung: 1 test(s) did not return from a call into the library within the watchdog's limit" in flat
    ), table
    assert f"{limit:g} s" in flat and rerun in table, table
    assert table.count(line) == 1, table  # quoted whole, once, in the table
    # ... and in pytest's own report of the failure, next to xdist's "crashed while running".
    failures = proc.stdout[
        proc.stdout.index("= FAILURES =") : proc.stdout.index("tailreactor conformance: reactor")
    ]
    assert "hung: the watchdog ended the worker" in failures and line in failures, failures


def test_every_call_into_the_library_is_made_under_the_watchdog(example_lib, monkeypatch):
    """Not only the wait: any call may loop inside the library (a thirteenth reader's libevent
    backend looped in event_del inside tr_backend_close, its lists corrupted by an event_assign
    of an event still added, and the run stalled with no table, issue 41).  Every function of
    the ABI the adapter calls runs with a deadline held by the watchdog; the ABI version alone
    is read at load, before there is a backend."""
    import gc

    from tailreactor.backends import READ
    from tailreactor.backends import cabi as adapter
    from tailreactor_conformance import cabi
    from tailreactor_conformance.harness import Pair

    real = adapter.load_library(example_lib)
    watched: dict[str, list[bool]] = {}

    class Library:  # the real library, each function noting whether a deadline is held as it runs
        def __getattr__(self, name):
            fn = getattr(real, name)

            def call(*args):
                watched.setdefault(name, []).append(bool(cabi._WATCH.waits))
                return fn(*args)

            call.__name__ = name
            return call

    monkeypatch.setattr(adapter, "load_library", lambda path: Library())
    b = cabi.CabiBackend(example_lib)
    p = Pair()
    try:
        p.make_readable()
        b.arm(p.fd, READ, "t")
        b.flush()
        assert b.wait(1.0) == [("t", 1)]
        b.arm(p.fd, READ, "t")
        b.disarm(p.fd, READ)
        b.wake()
        b.close()
    finally:
        p.close()
    del b
    gc.collect()  # destroy runs at the backend's collection
    assert set(watched) == set(adapter.SIGNATURES) - {"tr_backend_abi_version"}, sorted(watched)
    assert {name: all(calls) for name, calls in watched.items()} == dict.fromkeys(watched, True), watched


@needs_cc
def test_a_close_that_never_returns_fails_its_clause_as_hung_and_the_run_ends_with_its_table(tmp_path):
    """A tr_backend_close that never returns (as one looping in lists the library corrupted)
    ends its worker by the watchdog's line, not the run: the test fails its clause as hung and
    the table is printed (issue 41: such a close stalled a run with no table, no clause and no
    rerun line, and pytest-timeout's signal cannot interrupt a call into C)."""
    label = "cabi:libtr_epoll_close_pauses"
    lib = build(tmp_path, "tr_epoll_close_pauses", "-DTR_BUG_CLOSE_PAUSES")
    name = f"test_flush_after_close_raises[{label.replace(':', '-')}]"
    proc, data = cli(
        "--backend", f"cabi:{lib}", "--clause", "B13", "-n", "2", "--", "-k", name,
        json_path=tmp_path / "r.json", liveness_s=0.5,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and data is not None, out[-4000:]
    line = (
        f"{label}: tr_backend_close did not return within 1 s; exiting: a call into the library "
        "cannot be interrupted"
    )
    assert data["failed_clauses"] == ["B13"], out[-4000:]
    [entry] = data["crashed"]
    assert entry["test"].endswith(f"::{name}") and entry["hung"]["limit_s"] == 1, entry
    assert entry["hung"]["watchdog"].startswith(line), entry
    assert data["clauses"]["B13"][label]["hung"] == [entry["test"]], data["clauses"]["B13"]
    assert "FAIL (hung)" in proc.stdout and "any other call 1 s" in proc.stdout, out[-4000:]


def test_a_wait_cut_short_anywhere_leaves_the_watchdog_nothing_stale(example_lib):
    """A raise at each call and return of a watched wait (as R21's tests make, as a signal
    handler may) leaves no deadline behind (the watchdog would end the process for a wait that
    returned) and no lock the watchdog needs held (issue 41: it then never woke again)."""
    import sys

    from tailreactor.backends import READ
    from tailreactor_conformance import cabi
    from tailreactor_conformance.harness import Pair

    class Escape(BaseException):
        pass

    b = cabi.CabiBackend(example_lib)
    p = Pair()
    try:
        p.make_readable()
        k = 0
        while True:
            b.arm(p.fd, READ, "t")
            seen = {"n": 0, "on": True}

            def profile(frame, event, arg, k=k, seen=seen):
                if seen["on"]:
                    seen["n"] += 1
                    if seen["n"] > k:
                        seen["on"] = False
                        raise Escape

            before = sys.getprofile()
            sys.setprofile(profile)
            try:
                b.wait(1.0)
                cut = False
            except Escape:
                cut = True
            finally:
                seen["on"] = False
                sys.setprofile(before)
            assert cabi._WATCH.waits == {}, f"cut at event {k}: a deadline left behind"
            assert not cabi._WATCH._lock.locked(), f"cut at event {k}: the watchdog's lock left held"
            if not cut:
                break
            k += 1
            assert k < 10_000
        assert k >= 2, f"precondition: a wait makes more than {k} calls"
    finally:
        b.close()
        p.close()


@needs_cc
def test_a_wait_that_spins_in_the_library_after_a_wait_cut_short_is_ended_by_the_watchdog_under_xdist(
    tmp_path,
):
    """A tr_backend_wait(0) that spins in the library (TR_BUG_WAIT_SPINS: epoll_wait(0) forever, as a
    libevent loop re-armed inside its own callback) is ended by the watchdog under pytest-xdist
    too, after the worker ran R21's test that raises at every call and return of a wait: the run
    ends with its clause FAIL (hung) and the watchdog's line (issue 41: such a raise right after
    the watchdog's lock was taken kept that lock, and the run stalled silently). ``--dist
    each`` runs both tests in each worker, in the file's order; the run is bounded by cli's
    timeout, and the spin by the watchdog's limit."""
    label = "cabi:libtr_epoll_wait_spins"
    lib = build(tmp_path, "tr_epoll_wait_spins", "-DTR_BUG_WAIT_SPINS")
    cut = "test_a_wait_cut_short_inside_the_backend_hands_its_reports_over_at_once"
    spun = "test_an_interrupt_at_any_clock_read_of_a_round_loses_nothing"
    proc, data = cli(
        "--backend",
        f"cabi:{lib}",
        "-n",
        "2",
        "--",
        "--dist",
        "each",
        "-k",
        f"{cut} or {spun}",
        json_path=tmp_path / "r.json",
        liveness_s=0.5,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and data is not None, out[-4000:]
    # --dist each: both workers run both tests in the file's order, and each worker's spin is ended.
    entries = data["crashed"]
    assert len(entries) == 2, out[-4000:]
    line = f"{label}: tr_backend_wait(timeout 0 ns) did not return within {2 * 0.5:g} s; exiting"
    for entry in entries:
        assert spun in entry["test"] and entry.get("hung"), entry
        assert entry["hung"]["watchdog"].startswith(line), entry
    assert "FAIL (hung)" in proc.stdout and "hung: the watchdog ended the worker" in proc.stdout, out[-4000:]
    r21 = data["clauses"]["R21"][label]
    assert r21["passed"] == 2 and r21["failed"] == 2 and set(r21["hung"]) == {entries[0]["test"]}, r21


# -- the C backend under the bench server (issue 32) -------------------------------------
@needs_cc
def test_the_bench_server_serves_http_on_a_c_backend(tmp_path):
    """CWIST_REACTOR_BACKEND=cabi:PATH: the real tailreactor-bench on the example C backend
    answers real requests, then stops on SIGTERM with status 0."""
    from http_helpers import bench_env, connect, get, read_responses, start_bench

    lib = build(tmp_path, "tr_epoll")
    srv = start_bench(env=bench_env(CWIST_REACTOR_BACKEND=f"cabi:{lib}"))
    try:
        assert srv.backend == "cabi:libtr_epoll", srv.line
        with connect(srv.port) as s:
            s.sendall(get("/") * 3)
            assert [r.status for r in read_responses(s, 3)] == [200, 200, 200]
        code, err = srv.stop()
    finally:
        srv.kill()
    assert code == 0, err


@pytest.mark.parametrize(
    "value, says",
    [
        (
            "cabi:",
            "CWIST_REACTOR_BACKEND='cabi:' is invalid: accepted one of auto, io_uring, epoll, selectors, "
            "or cabi:PATH",
        ),
        (
            "cabi:/nonexistent/libx.so",
            "CWIST_REACTOR_BACKEND=cabi:/nonexistent/libx.so cannot start: backend "
            "'cabi:/nonexistent/libx.so': no such file /nonexistent/libx.so (accepted: "
            "cabi:PATH to a shared library",
        ),
    ],
)
def test_a_bad_cabi_backend_for_the_bench_server_is_one_line_and_exit_2(value, says):
    from http_helpers import bench_env, run_bench

    proc = run_bench(["--port", "0"], env=bench_env(CWIST_REACTOR_BACKEND=value))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and says in lines[0], proc.stderr


def test_a_wait_bound_is_the_figure_its_watchdog_line_prints():
    """A wait of 500 ns is bounded at 500 ns + twice the liveness bound; the line prints the
    bound with ``:g`` (six significant digits), and ``--json``'s ``limit_s`` is that same
    figure, not the full sum (6.0000005 beside a line saying 6 s)."""
    from tailreactor_conformance.cabi import WAIT_GRACE_S, wait_bound_s
    from tailreactor_conformance.harness import LIVENESS_S

    for timeout_ns in (500, 500_000, 50_000_000, -1):
        bound = wait_bound_s(timeout_ns)
        assert bound == float(f"{bound:g}"), (timeout_ns, bound)
    assert wait_bound_s(500) == float(f"{WAIT_GRACE_S:g}")
    assert wait_bound_s(-1) == LIVENESS_S + WAIT_GRACE_S


@pytest.mark.parametrize("sent_ms", [None, 2996.713], ids=["no-signal", "signal-after-the-return"])
def test_a_wait_early_before_its_signal_says_the_time_it_had_left_not_the_signals(sent_ms):
    """wait(0.05) returned after 0.088 ms, before the signal was sent: the message says so and
    gives the 49.912 ms of its timeout left, counted from its return, never from a signal sent
    when the watcher gave up seeing it block (2996.713 ms, LIVENESS_S later: "-2946.625 ms
    left" is what a GLib reader was shown)."""
    from tailreactor_conformance.tests.test_backend_signals import _early_after_a_signal

    sent = None if sent_ms is None else int(sent_ms * 1e6)
    message = _early_after_a_signal(0.05, 88_000, sent, 2)
    assert "49.912 ms" in message and "before the signal" in message, message
    assert not re.search(r"-\d", message), message
