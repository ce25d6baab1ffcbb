"""A backend written in C passes the suite, and the suite bites it: ``--backend cabi:PATH``.

The example backend ``examples/c-backend/tr_epoll.c`` is built with the real
``cc`` (through its Makefile) into this test's temporary directory, then the
real ``tailreactor-conformance`` CLI runs on the shared library: every clause
on the correct build, and one clause on each broken variant built from the
same file with a ``-DTR_BUG_...`` flag; B8's waits under a microsecond are
timed in C.  Without a C compiler (or make) the tests that need one skip with
the reason.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from cabi_helpers import EXAMPLE, SUBMICRO, build, needs_cc
from test_conformance_meta import ROOT, cli

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


def test_build_outputs_are_ignored_by_git():
    for output in ("examples/c-backend/libtr_epoll.so", "examples/c-backend/libtr_epoll_no_wake.so"):
        proc = subprocess.run(["git", "check-ignore", "-q", output], cwd=ROOT, check=False)
        if proc.returncode == 128:
            pytest.skip("not a git checkout")
        assert proc.returncode == 0, f"{output} (a build output) is not in .gitignore"


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
