"""pytest plugin: backend/reactor selection, clause markers, the per-clause table.

Role
----
Loaded by name, ``pytest -p tailreactor_conformance.plugin`` (the
``tailreactor-conformance`` CLI and this repository's pytest configuration
pass it).  It is deliberately not a ``pytest11`` entry point: that would load
it into every pytest session of the venv, where its ``--backend`` option and
its Hypothesis profile would clash with a backend author's own.  Outside
conformance tests it stays inert.  What it does for conformance tests:

* ``--backend NAME`` (repeatable; ``auto``, ``epoll``, ``io_uring``,
  ``selectors``, ``module:factory`` or ``cabi:PATH``, a shared library with
  the C ABI of ``tailreactor_backend.h``, shown as ``cabi:libname``; see
  :mod:`.cabi`) parametrizes every test over the
  backends under test (default: the three shipped ones, io_uring skipped when
  the kernel refuses it); ``auto`` is replaced by the backend it resolves to
  (io_uring, or epoll when the kernel refuses io_uring), so the table names it;
* ``--reactor module:factory`` runs the reactor clauses against a third-party
  reactor class or factory called like ``Reactor(backend, config=, clock=)``;
* ``--policy NAME`` (repeatable; a shipped policy's name or ``module:Class``)
  parametrizes the dispatch-policy tests (R21, R26, R27) over the policies
  under test (default: every shipped one);
* ``--clause ID`` (repeatable, or comma-separated; a letter ``B``/``R``/``H``
  selects an area) deselects every other clause;
* ``--conformance-profile ci|deep`` picks the Hypothesis profile;
* each backend's declared capabilities (``tailreactor.backends.base.capabilities``:
  ``ordered``, ``max_batch``) head the table as its ``caps`` row, and every
  clause whose tests all skipped is listed under the table with the reasons
  (a clause needing a capability the backend does not claim skips that way);
* every test must carry exactly one ``@pytest.mark.clause("ID")`` naming a
  registered clause (a missing or unknown one is a collection error), and the
  outcome of each test is folded into a clause x backend table printed at the
  end of the session (``--conformance-json PATH`` also writes it as JSON);
* the report does not depend on what the code under test left: fds are held
  for it from the start (:class:`.failures.FdReserve`; the table says when tests
  found none left), and a traceback entry without a line number (a hang
  interrupted where CPython 3.11 has none) is given one before pytest formats it;
* a test whose xdist worker died (a C library's abort or fault) fails its clause,
  shown ``FAIL (crashed)``, and the table prints the line that reruns it
  in-process with its output shown, where the library's message appears; one
  whose worker the C adapter's watchdog ended (a ``tr_backend_wait`` that never
  returned) is shown ``FAIL (hung)``, the watchdog's line quoted.

Works with pytest-xdist: the clause and backend travel with each test report
as ``user_properties``, so the controller builds the table.  With ``-x`` (or
``--maxfail``) xdist ends the session as *interrupted* (pytest's exit status
2) after the first failure; in a conformance run that is reported as what it
is, failed tests (1), so 2 keeps meaning "interrupted" or "cannot start".
"""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from . import failures, profiles
from .clauses import AREAS, CLAUSES, UnknownClause, clause
from .failures import (
    RESERVE,
    as_typed,
    backend_of,
    crash_props,
    crashed,
    failure_reason,
    give_lines,
    lineless,
    rerun_hint,
)

PACKAGE_DIR = Path(__file__).resolve().parent
SHIPPED_BACKENDS = ("epoll", "io_uring", "selectors")
DEFAULT_REACTOR = "tailreactor.reactor:Reactor"


# -- options --------------------------------------------------------------------
def pytest_addoption(parser):
    group = parser.getgroup("tailreactor-conformance", "tailreactor conformance suite")
    group.addoption(
        "--backend",
        action="append",
        dest="conformance_backends",
        default=None,
        metavar="NAME",
        help="backend under test: epoll, io_uring, selectors or module:factory "
        "(repeatable; default: the three shipped backends)",
    )
    group.addoption(
        "--reactor",
        dest="conformance_reactor",
        default=None,
        metavar="MODULE:FACTORY",
        help="reactor under test, called as factory(backend, config=..., clock=...) "
        f"(default {DEFAULT_REACTOR})",
    )
    group.addoption(
        "--policy",
        action="append",
        dest="conformance_policies",
        default=None,
        metavar="NAME",
        help="dispatch policy under test in the policy clauses (R21, R26, R27): a shipped name "
        "or module:Class (repeatable; default: every shipped policy)",
    )
    group.addoption(
        "--clause",
        action="append",
        dest="conformance_clauses",
        default=None,
        metavar="ID",
        help="run only these clauses (B1, R10, ...; B/R/H = a whole area; repeatable or comma-separated)",
    )
    group.addoption(
        "--conformance-profile",
        dest="conformance_profile",
        default="ci",
        choices=sorted(profiles.PROFILES),
        help="Hypothesis profile for the property tests (default ci)",
    )
    group.addoption(
        "--conformance-json",
        dest="conformance_json",
        default=None,
        metavar="PATH",
        help="write the clause x backend results as JSON",
    )


# -- resolving names -------------------------------------------------------------
def resolve(spec: str, option: str = "--reactor"):
    """Import ``module:attr`` and return the attribute.

    Raises ``pytest.UsageError`` with one line naming the option, the spec and
    the reason (the runner prints the same line and exits 2).
    """
    from tailreactor.backends import import_factory

    try:
        return import_factory(spec)
    except ValueError as exc:
        raise pytest.UsageError(f"{option} {spec}: {exc}") from None


_AUTO_KEY = pytest.StashKey[str]()


def _auto_backend(config) -> str:
    """The shipped backend ``auto`` resolves to here (created once and closed)."""
    if _AUTO_KEY not in config.stash:
        from tailreactor.backends import create_backend

        b = create_backend("auto")
        config.stash[_AUTO_KEY] = b.name
        b.close()
    return config.stash[_AUTO_KEY]


def backend_names(config) -> list[str]:
    """The backends under test, ``auto`` replaced by what it resolves to."""
    names = list(config.getoption("conformance_backends") or SHIPPED_BACKENDS)
    return [_auto_backend(config) if n == "auto" else n for n in names]


def _label(spec: str) -> str:
    """The table's name for a backend spec (``cabi:dir/libfoo.so`` -> ``cabi:libfoo``)."""
    from .cabi import label  # imports tailreactor: not before pytest's assert rewriting is set up

    return label(spec)


def policy_specs(config) -> list[str]:
    """The dispatch policies under test: ``--policy``, or every shipped one."""
    from tailreactor.policies import POLICIES  # not before pytest's assert rewriting is set up

    return list(config.getoption("conformance_policies") or POLICIES)


def policy_class(spec: str):
    """The class of a policy spec: a shipped name, or ``module:Class`` (``pytest.UsageError``)."""
    from tailreactor.policies import POLICIES

    return POLICIES[spec] if spec in POLICIES else resolve(spec, "--policy")


def reactor_spec(config) -> str:
    return config.getoption("conformance_reactor") or DEFAULT_REACTOR


def selected_clauses(config) -> set[str] | None:
    """Clause ids chosen with ``--clause`` (areas expanded), or None for all."""
    raw = config.getoption("conformance_clauses")
    if not raw:
        return None
    chosen: set[str] = set()
    for part in ",".join(raw).split(","):
        part = part.strip()
        if not part:
            continue
        if part in AREAS:
            chosen.update(c.id for c in CLAUSES if c.id[0] == part)
            continue
        try:
            chosen.add(clause(part).id)
        except UnknownClause as exc:
            raise pytest.UsageError(f"--clause: {exc}") from None
    return chosen


class _State:
    """Per-session results: {(clause, backend): {"passed": n, ..., "failures": [...]}}."""

    def __init__(self):
        self.results: dict[tuple[str, str], dict] = {}
        self.collected: dict[str, int] = {}  # clause -> tests collected (in-process runs only)
        self.out_of_fds: list[str] = []  # failing tests whose error was EMFILE, in report order
        self.props: dict[str, dict] = {}  # nodeid -> clause and backend, from its first report
        self.crashed: list[dict] = []  # tests whose worker process died: nodeid, clause, rerun
        self.last_phase: dict[tuple, str] = {}  # (worker, nodeid) -> the last phase it reported
        self.workers_crashed = 0  # worker processes that died (pytest-xdist, in the controller)


_STATE_KEY = pytest.StashKey[_State]()
#: This session's config: cabi.py's wait watchdog suspends its output capture before it exits.
CONFIG = None


def _run_of(report) -> tuple:
    """Which run of a test ``report`` is about: pytest-xdist's worker (``--dist each`` runs one
    test on every worker) and the test id."""
    node = getattr(report, "node", None)
    return (getattr(getattr(node, "gateway", None), "id", None), report.nodeid)


def pytest_configure(config):
    global CONFIG
    CONFIG = config
    config.addinivalue_line("markers", "clause(id): the conformance clause this test checks")
    profiles.register()
    profiles.select(config.getoption("conformance_profile"))
    config.stash[_STATE_KEY] = _State()
    config.pluginmanager.register(_Recorder(config), "tailreactor-conformance-recorder")
    specs = list(config.getoption("conformance_backends") or [])
    if config.getoption("conformance_reactor"):
        specs.append(config.getoption("conformance_reactor"))
    specs += config.getoption("conformance_policies") or []
    if any(":" in s for s in specs) and os.getcwd() not in sys.path:
        # module:factory names are resolved like `python -m` would: from the
        # current directory (a project testing its own backend).
        sys.path.insert(0, os.getcwd())
    if config.getoption("conformance_reactor"):
        resolve(config.getoption("conformance_reactor"))  # fail early, one line
    for spec in config.getoption("conformance_policies") or ():
        if ":" in spec:
            resolve(spec, "--policy")
    selected_clauses(config)  # validate ids early
    if config.rootpath == PACKAGE_DIR / "tests":  # run by tailreactor-conformance (--rootdir)
        # pytest names a test in its short summary by a path from the current directory:
        # a chain of ../ up to where the suite is installed.  Name it as the table does,
        # by its id in the suite (test_backend_reports.py::test_x[epoll]).  Python-only machinery:
        # Config.cwd_relative_nodeid is where pytest makes that path.
        config.cwd_relative_nodeid = lambda nodeid: nodeid  # type: ignore[method-assign]
        config.add_cleanup(profiles.keep_files_out_of_the_users_directory())


def test_bound_s() -> float:
    """The most one conformance test may take, in seconds: a liveness bound, reached only
    by code under test that never ends (a round, a drain or a wait that loops forever).

    ``TAILREACTOR_CONFORMANCE_TEST_BOUND_S``, else 20 times the liveness bound of one
    wait (60 s by default), 16 times that under the ``deep`` profile (16 times the
    examples).  Past it pytest-timeout fails the test ("Timeout (>60.0s) from
    pytest-timeout"), so its clause fails in the table.
    """
    if os.environ.get("TAILREACTOR_CONFORMANCE_TEST_BOUND_S"):
        return float(os.environ["TAILREACTOR_CONFORMANCE_TEST_BOUND_S"])
    liveness_s = float(os.environ.get("TAILREACTOR_CONFORMANCE_LIVENESS_S") or 3.0)  # harness.LIVENESS_S
    return 20 * liveness_s * (16 if profiles.name() == "deep" else 1)


def hypothesis_seed(config) -> str:
    """What to record as the seed: ``derandomized`` under ci, else --hypothesis-seed."""
    if profiles.name() == "ci":
        return "derandomized"
    return str(config.getoption("hypothesis_seed", None) or "random (not recorded)")


def pytest_report_header(config):
    if not _is_conformance_run(config):
        return None
    return (
        f"tailreactor conformance: backends={', '.join(as_typed(b) for b in backend_names(config))}; "
        f"reactor={reactor_spec(config)}; policies={', '.join(policy_specs(config))}; "
        f"profile={profiles.name()}; seed={hypothesis_seed(config)}"
    )


def _is_conformance_run(config) -> bool:
    args = [str(a) for a in config.args]
    return any(str(PACKAGE_DIR) in str(Path(a).resolve()) or "tailreactor_conformance" in a for a in args)


# -- collection ------------------------------------------------------------------
def _is_conformance_item(item) -> bool:
    return PACKAGE_DIR in Path(str(item.path)).resolve().parents


def pytest_generate_tests(metafunc):
    if "conformance_backend" in metafunc.fixturenames:
        names = backend_names(metafunc.config)
        metafunc.parametrize("conformance_backend", names, ids=[_label(n).replace(":", "-") for n in names])
    if "conformance_policy" in metafunc.fixturenames:
        specs = policy_specs(metafunc.config)
        metafunc.parametrize("conformance_policy", specs, ids=[s.replace(":", "-") for s in specs])


def pytest_collection_modifyitems(session, config, items):
    state = config.stash[_STATE_KEY]
    chosen = selected_clauses(config)
    keep, drop = [], []
    for item in items:
        if not _is_conformance_item(item):
            keep.append(item)
            continue
        marks = list(item.iter_markers("clause"))
        if len(marks) != 1 or len(marks[0].args) != 1:
            raise pytest.UsageError(
                f"{item.nodeid}: a conformance test needs exactly one @pytest.mark.clause('ID') marker"
            )
        try:
            cid = clause(marks[0].args[0]).id
        except UnknownClause as exc:
            raise pytest.UsageError(f"{item.nodeid}: {exc}") from None
        if chosen is not None and cid not in chosen:
            drop.append(item)
            continue
        backend = getattr(item, "callspec", None) and item.callspec.params.get("conformance_backend")
        # The liveness bound of the whole test (pytest-timeout, SIGALRM in the test's thread):
        # a reactor or backend that loops forever fails this clause instead of hanging the run.
        item.add_marker(pytest.mark.timeout(test_bound_s(), method="signal"))
        item.user_properties.append(("clause", cid))
        item.user_properties.append(("backend", _label(backend) if backend else "-"))
        state.collected[cid] = state.collected.get(cid, 0) + 1
        keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


# -- failures ---------------------------------------------------------------------
@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """A failure whose traceback has an entry without a line number is still reported.

    The bound on one test (pytest-timeout's SIGALRM) raises where the hang is, at any
    instruction, and CPython 3.11 gives some no line (the jump back of a loop,
    python/cpython#107901): that entry's ``tb_lineno`` is None, which pytest's
    formatting cannot take (TypeError, an INTERNALERROR that ends the run). Such an
    entry is given the line of the last instruction before it that has one, the line
    the loop ran last, before pytest formats the failure. The formatting gets the fds
    of :data:`RESERVE` (the process may have none left).
    """
    if call.excinfo is None or not _is_conformance_item(item):
        return (yield)
    if lineless(call.excinfo.value):
        value = call.excinfo.value
        give_lines(value)
        call.excinfo = pytest.ExceptionInfo.from_exc_info((type(value), value, value.__traceback__))
    RESERVE.release()  # formatting reads the source of every entry (FdReserve)
    try:
        return (yield)
    finally:
        RESERVE.hold()


# -- results ---------------------------------------------------------------------
def backend_capabilities(config) -> dict[str, dict | str]:
    """What each backend under test declares (base.capabilities), by name, made once.

    A backend that cannot be created here (io_uring refused) is the reason,
    as a string; a malformed declaration is its error message.
    """
    from tailreactor.backends.base import capabilities

    from .cabi import create_backend  # cabi:PATH too

    if _CAPS_KEY not in config.stash:
        caps: dict[str, dict | str] = {}
        for name in backend_names(config):
            label = _label(name)
            try:
                b = create_backend(name)
            except Exception as exc:  # noqa: BLE001 - reported in the table, the tests say the rest
                caps[label] = f"unavailable: {exc}"
                continue
            try:
                c = capabilities(b)
                caps[label] = {"ordered": c.ordered, "max_batch": c.max_batch}
            except ValueError as exc:
                caps[label] = str(exc)
            finally:
                b.close()
        config.stash[_CAPS_KEY] = caps
    return config.stash[_CAPS_KEY]


_CAPS_KEY = pytest.StashKey[dict]()
#: How a failure says that the process had no fd left (OSError EMFILE).
EMFILE_TEXT = f"[Errno {errno.EMFILE}]"


class _Recorder:
    """Folds test reports into clause x backend cells; prints and writes them."""

    def __init__(self, config):
        self.config = config
        self.stopped_at_maxfail = False
        self.hangs: str | None = None  # where the workers' watchdogs leave their lines (controller)

    @property
    def state(self) -> _State:
        return self.config.stash[_STATE_KEY]

    def pytest_runtest_logreport(self, report):
        props = dict(getattr(report, "user_properties", ()) or ())
        if crashed(report):
            self._record_crash(report)
            return
        self.state.last_phase[_run_of(report)] = report.when
        cid = props.get("clause")
        if cid is None:
            return
        self.state.props.setdefault(report.nodeid, props)
        # One outcome per phase that matters: the call, or a setup/teardown that did not pass.
        if report.when == "call" or (report.when in ("setup", "teardown") and not report.passed):
            if report.when == "teardown" and report.skipped:
                return
            outcome = "failed" if report.failed else "skipped" if report.skipped else "passed"
            if (
                report.failed
                and EMFILE_TEXT in report.longreprtext
                and report.nodeid not in self.state.out_of_fds
            ):
                self.state.out_of_fds.append(report.nodeid)
            self._record(
                cid,
                props.get("backend", "-"),
                outcome,
                report.nodeid,
                failures.skip_reason(report) if report.skipped else None,
            )
            if report.failed:
                reasons = self.state.results[(cid, props.get("backend", "-"))].setdefault("reasons", {})
                reasons.setdefault(report.nodeid, failure_reason(report.longreprtext))

    def _record_crash(self, report) -> None:
        """A test whose worker died (xdist's report names it, nothing more): its clause fails;
        if the watchdog ended the worker, as hung, its line quoted in the report too."""
        nodeid = report.nodeid
        hung = failures.hang_of(self.hangs, report)
        props = crash_props(nodeid, self.state.props, PACKAGE_DIR)
        cid = props.get("clause")
        if cid is None:
            return  # not a conformance test: pytest's own summary names it
        specs = {_label(b): b for b in backend_names(self.config)}
        backend = props.get("backend") or backend_of(nodeid, list(specs))
        self._record(cid, backend, "failed", nodeid)
        self.state.results[(cid, backend)].setdefault("crashed", []).append(nodeid)
        entry = {
            "test": nodeid,
            "clause": cid,
            "backend": backend,
            "rerun": rerun_hint(nodeid, specs.get(backend, backend)),
        }
        if self.state.last_phase.get(_run_of(report)) == "call":
            entry["phase"] = "teardown"  # its call was reported: the fixtures' teardown, the backend's close
        if hung:
            self.state.results[(cid, backend)].setdefault("hung", []).append(nodeid)
            entry["hung"] = hung
        self.state.crashed.append(entry)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        """pytest-xdist, in the controller: a worker ended, with ``error`` when it died. Past
        --max-worker-restart such deaths xdist stops and drops every test not run yet."""
        if error:
            self.state.workers_crashed += 1

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node):
        """pytest-xdist, in the controller: each worker learns where its watchdog leaves its line."""
        if self.hangs is None:
            self.hangs = tempfile.mkdtemp(prefix="tailreactor-conformance-hangs-")
        node.workerinput[failures.HANGS_KEY] = self.hangs

    def _record(self, cid: str, backend: str, outcome: str, nodeid: str, reason: str | None = None) -> None:
        state = self.state
        cell = state.results.setdefault(
            (cid, backend),
            {"passed": 0, "failed": 0, "skipped": 0, "failures": [], "skips": [], "skip_reasons": []},
        )
        cell[outcome] += 1
        names = cell["failures"] if outcome == "failed" else cell["skips"] if outcome == "skipped" else None
        if names is not None and nodeid not in names:
            names.append(nodeid)
        if reason and reason not in cell["skip_reasons"]:
            cell["skip_reasons"].append(reason)

    def summary(self) -> dict:
        """The results as a JSON-able dict (also what ``--conformance-json`` writes)."""
        config, state = self.config, self.state
        backends = [_label(b) for b in backend_names(config)]  # cabi:dir/libfoo.so -> cabi:libfoo
        chosen = selected_clauses(config)
        rows = {}
        for c in CLAUSES:
            if chosen is not None and c.id not in chosen:
                continue
            rows[c.id] = {
                b: {
                    "status": failures.status(state.results.get((c.id, b))),
                    **(state.results.get((c.id, b)) or {}),
                }
                for b in backends
            }
        order = [c.id for c in CLAUSES]
        failed = sorted({cid for (cid, _), cell in state.results.items() if cell["failed"]}, key=order.index)
        return {
            "backends": backends,
            "capabilities": backend_capabilities(config),
            "reactor": reactor_spec(config),
            "policies": policy_specs(config),
            "profile": profiles.name(),
            "seed": hypothesis_seed(config),
            "clauses": rows,
            "failed_clauses": failed,
            "collected": dict(state.collected),
            "out_of_fds": {
                "tests": list(state.out_of_fds),
                "nofile_soft_limit": failures.nofile_soft_limit(),
            },
            "crashed": list(state.crashed),
            "workers_crashed": {
                "count": state.workers_crashed,
                "max_restart": failures.max_worker_restart(config),
            },
        }

    def pytest_terminal_summary(self, terminalreporter, exitstatus, config):
        if hasattr(config, "workerinput") or not self.state.results:
            return
        from .table import render

        out = io.StringIO()
        render(self.summary(), out, width=terminalreporter._tw.fullwidth, color=terminalreporter.hasmarkup)
        terminalreporter.write(out.getvalue())

    def pytest_keyboard_interrupt(self, excinfo):
        # xdist's Interrupted("stopping after N failures") for -x/--maxfail, as
        # opposed to a real Ctrl-C or a worker that crashed.
        self.stopped_at_maxfail = type(excinfo.value).__module__.startswith("xdist") and str(
            excinfo.value
        ).startswith("stopping after")

    def pytest_sessionstart(self, session):
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None and self.config.rootpath == PACKAGE_DIR / "tests":
            reporter.startpath = PACKAGE_DIR  # skips, too, by the suite's own file names
        if _is_conformance_run(self.config):  # inert elsewhere
            from . import table  # noqa: F401 - before any backend under test runs (FdReserve)

            RESERVE.hold()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session):
        if not hasattr(self.config, "workerinput") and _is_conformance_run(self.config):
            # Read before the tests, which creates and closes each backend: one that leaks
            # fds may leave none to create it with at the end.
            backend_capabilities(self.config)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session, exitstatus):
        RESERVE.release()  # the table and --json get them (FdReserve)
        if (
            self.stopped_at_maxfail
            and session.testsfailed
            and exitstatus == pytest.ExitCode.INTERRUPTED
            and _is_conformance_run(self.config)
        ):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # what pytest gives without xdist
        path = self.config.getoption("conformance_json")
        if path and not hasattr(self.config, "workerinput"):
            Path(path).write_text(json.dumps(self.summary(), indent=2) + "\n")

    def pytest_unconfigure(self, config):
        if self.hangs is not None:  # after the terminal summary, which read it
            shutil.rmtree(self.hangs, ignore_errors=True)
