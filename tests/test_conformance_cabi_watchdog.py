"""The watchdog of a ``cabi:`` run: a call into the library that never returns (a wait, a close,
a spin after a wait cut short) ends the run with one line, or under xdist fails its clause as
hung; every call into the library is made under it, and it bounds a wait by the figure its
line prints.
"""

from __future__ import annotations

from cabi_helpers import SUBMICRO, build, needs_cc
from test_conformance_meta import cli, rerun_command

#: B8's waits of fractions of a millisecond and more (the same module), timed in C in a loop.
NEVER_EARLY = "test_wait_timeout_is_never_early"


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
    rerun = f"{rerun_command()} --backend cabi:{lib} -n 0 -- -s -k '{name}'"
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
    # The suite wakes or rescues every wait within LIVENESS_S, whatever its timeout: a wait of
    # INT64_MAX that a wake does not end (a seventeenth reader's overflowed deadline) would
    # otherwise be bounded at 292 years, and the run never ended.
    assert wait_bound_s(2**63 - 1) == LIVENESS_S + WAIT_GRACE_S
