"""What reporting a failure needs, whatever the code under test did.

Role
----
Helpers of :mod:`.plugin`: fds held for the report (:class:`FdReserve`), a
traceback entry without a line number given one (:func:`give_lines`), and a
test whose worker process died (a crash in a C library: abort, segfault)
named as a failure of its clause (:func:`crash_props`, :func:`rerun_hint`); a worker
the C adapter's watchdog ended (a ``tr_backend_wait`` that never returned) is told from
one a signal ended by the line the watchdog left for the controller (:func:`note_hang`,
:func:`hang_of`).
"""

from __future__ import annotations

import json
import os
import re
import resource
import shlex
import shutil
import sys
import types


# -- file descriptors for reporting ------------------------------------------------
class FdReserve:
    """File descriptors held from the session's start, for reporting alone.

    A backend under test that leaks fds can leave the process none (EMFILE): the
    failures of the tests after it are its doing, but the report must still be made.
    Formatting a failure reads the tests' source, the table imports its renderer and
    ``--json`` opens its file: each needs an fd. ``RESERVE_FDS`` of them (``/dev/null``,
    read-only) are held while tests run, given back while pytest formats a failure and
    at the session's end, so those never depend on what the backend left.
    """

    def __init__(self, n: int):
        self._n = n
        self._fds: list[int] = []

    def hold(self) -> None:
        """Take up to ``n`` fds (fewer if the process has fewer free)."""
        while len(self._fds) < self._n:
            try:
                self._fds.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                return

    def release(self) -> None:
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)


RESERVE_FDS = 16
RESERVE = FdReserve(RESERVE_FDS)


# -- a traceback entry without a line number ----------------------------------------
def _chain(exc: BaseException):
    """``exc`` and every exception chained to it (``__cause__``, ``__context__``), once each."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [e.__cause__, e.__context__]


def _entries(tb: types.TracebackType | None):
    while tb is not None:
        yield tb
        tb = tb.tb_next


def lineless(exc: BaseException) -> bool:
    return any(tb.tb_lineno is None for e in _chain(exc) for tb in _entries(e.__traceback__))


def give_lines(exc: BaseException) -> None:
    """Rebuild the tracebacks of ``exc``'s chain where an entry has no line (tb_lineno is read-only)."""
    for e in _chain(exc):
        entries = list(_entries(e.__traceback__))
        if all(tb.tb_lineno is not None for tb in entries):
            continue
        rebuilt = None
        for tb in reversed(entries):
            line = tb.tb_lineno if tb.tb_lineno is not None else _line_before(tb.tb_frame.f_code, tb.tb_lasti)
            rebuilt = types.TracebackType(rebuilt, tb.tb_frame, tb.tb_lasti, line)
        e.__traceback__ = rebuilt


def _line_before(code: types.CodeType, offset: int) -> int:
    """The line of the last instruction at or before ``offset`` in ``code`` that has one."""
    line = code.co_firstlineno
    for start, _end, lineno in code.co_lines():
        if start > offset:
            break
        if lineno is not None:
            line = lineno
    return line


# -- why a test failed ---------------------------------------------------------------
#: The most characters of a failure's reason the table quotes.
REASON_CHARS = 1000


#: pytest-xdist's first line of a report from a worker: which worker, which Python.
_XDIST_HEADER = re.compile(r"\[gw\d+\] ")
#: An exception's line in a traceback, inside an exception group's ``|`` margin or not.
#: pytest-timeout's failure at the test's bound (plugin.test_bound_s), which names no cause.
_TEST_BOUND = re.compile(r"Failed: Timeout \(>[\d.]+s\) from pytest-timeout")
#: What reaches that bound, said after it.
TEST_BOUND_HINT = (
    " (the test's bound: a round, a drain or a wait in it never ends or spins; see B7's and B8's "
    "failures first, which measure waits)"
)
_ERROR_LINE = re.compile(r"^[\s|]*((?:[A-Za-z_][\w.]*)?(?:Error|Exception|Failed|Warning): .*)$")


def failure_reason(longrepr: str) -> str:
    """A failed test's reason in one line: the first ``E`` line of pytest's report (the
    exception and its message), else the first error an exception group's traceback holds
    (Hypothesis's distinct failures: no ``E`` line) that is not the group, with its message's
    next line when it ends in a colon, else the report's first line that is not empty and
    not pytest-xdist's line naming its worker (a ``pytest.fail(..., pytrace=False)`` is its
    message alone); pytest-timeout's, which names no cause, with TEST_BOUND_HINT."""
    lines = [ln for ln in longrepr.splitlines() if not _XDIST_HEADER.match(ln)]
    first = next((ln[1:].strip() for ln in lines if ln.startswith("E ") and ln[1:].strip()), None)
    if first is None:
        first = _group_error(lines)
    if first is None:
        first = next((ln.strip() for ln in lines if ln.strip()), "")
    if _TEST_BOUND.match(first):
        first += TEST_BOUND_HINT
    return first if len(first) <= REASON_CHARS else first[: REASON_CHARS - 3] + "..."


def _group_error(lines: list[str]) -> str | None:
    """The first error in a traceback's ``lines`` that is not an exception group, joined with
    the next line when its message ends in a colon (the model's "disagrees with the model:")."""
    for i, ln in enumerate(lines):
        m = _ERROR_LINE.match(ln)
        if m is None or m.group(1).startswith(("ExceptionGroup", "BaseExceptionGroup")):
            continue
        error = m.group(1).strip()
        if error.endswith(":") and i + 1 < len(lines):
            more = lines[i + 1].strip().lstrip("|").strip()
            error = f"{error} {more}" if more else error
        return error
    return None


# -- a crashed worker ---------------------------------------------------------------
#: What pytest-xdist's report of a test whose worker died says (its ``when`` is "???").
CRASH_TEXT = "crashed while running"


def crashed(report) -> bool:
    """Whether ``report`` is pytest-xdist's report of a test whose worker process died."""
    return (
        report.failed
        and report.when not in ("setup", "call", "teardown")
        and CRASH_TEXT in str(report.longrepr)
    )


def crash_props(nodeid: str, seen: dict[str, dict], package_dir) -> dict:
    """The clause and backend of the crashed test ``nodeid``: xdist's report of it carries
    no ``user_properties``, so they are the ones its setup report brought (``seen``), else
    read from the test function's marker (a crash in setup: no backend then), else ``{}``."""
    if nodeid in seen:
        return seen[nodeid]
    import importlib

    path, _, name = nodeid.partition("::")
    try:
        module = importlib.import_module(f"{package_dir.name}.tests.{os.path.basename(path)[:-3]}")
        marks = getattr(getattr(module, name.partition("[")[0]), "pytestmark", [])
    except (ImportError, AttributeError):
        return {}
    cids = [m.args[0] for m in marks if m.name == "clause"]
    return {"clause": cids[0]} if len(cids) == 1 else {}


def backend_of(nodeid: str, labels: list[str]) -> str:
    """The backend (its table label) whose parameter id is in ``nodeid``, else ``-``."""
    params = nodeid.partition("[")[2].rstrip("]")
    for label in labels:
        pid = label.replace(":", "-")
        if (
            params == pid
            or params.startswith(pid + "-")
            or params.endswith("-" + pid)
            or f"-{pid}-" in params
        ):
            return label
    return "-"


#: The environment a rerun needs as the run had it: a sanitizer's runtime preloaded and its options
#: (without the preload an ASan library prints only "ASan runtime does not come first").
RERUN_ENV = ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "TSAN_OPTIONS")
#: Set by the runner: {canonical spec: the spec as the user typed it} (cabi:./libfoo.so is run as
#: cabi:/abs/dir/libfoo.so, and a rerun line shows what was typed, from the same directory).
TYPED_ENV = "TAILREACTOR_CONFORMANCE_TYPED_BACKENDS"


#: Set by the runner: its own command as the user can type it again (:func:`invoked_as`).
COMMAND_ENV = "TAILREACTOR_CONFORMANCE_COMMAND"
#: The runner's console script.
COMMAND = "tailreactor-conformance"


def invoked_as(argv0: str, path: str | None = None, cwd=None) -> str:
    """The runner's command as the user can type it again, from its ``sys.argv[0]``: its name
    where ``path`` (PATH) finds that same script, else the path it was run by (relative to
    ``cwd``, the current directory: ``../.venv/bin/tailreactor-conformance``), else
    ``python -m tailreactor_conformance`` for the module."""
    if os.path.basename(argv0) != COMMAND:
        return f"{shlex.quote(sys.executable)} -m tailreactor_conformance"
    here = os.path.join(cwd or os.getcwd(), argv0)
    found = shutil.which(COMMAND, path=path)
    if found and os.path.realpath(found) == os.path.realpath(here):
        return COMMAND
    return shlex.quote(argv0)


def as_typed(spec: str) -> str:
    """``spec`` as the user gave it to the runner (:data:`TYPED_ENV`), else unchanged."""
    try:
        typed = json.loads(os.environ.get(TYPED_ENV) or "{}")
    except ValueError:
        return spec
    return typed.get(spec, spec) if isinstance(typed, dict) else spec


def rerun_hint(nodeid: str, backend_spec: str) -> str:
    """How to see what a crashed test's process printed (the library's message): the test
    alone, in-process, its output not captured, the backend as typed and with the environment
    of :data:`RERUN_ENV` that this run had."""
    name = nodeid.partition("::")[2] or nodeid
    env = "".join(f"{k}={shlex.quote(os.environ[k])} " for k in RERUN_ENV if os.environ.get(k))
    return (
        f"{env}{os.environ.get(COMMAND_ENV) or COMMAND} --backend {shlex.quote(as_typed(backend_spec))} "
        f"-n 0 -- -s -k '{name}'"
    )


# -- a hung worker ----------------------------------------------------------------------
#: The key, in each pytest-xdist worker's ``workerinput``, of the directory where the C
#: adapter's watchdog leaves its line before it ends the process (the controller made it).
HANGS_KEY = "tailreactor_conformance_hangs"


def note_hang(config, line: str, limit_s: float) -> None:
    """Leave the watchdog's ``line`` and ``limit_s`` for the controller, as a file named by
    this process in the directory it gave this worker. xdist's report of the test is only
    "crashed while running"; the file says the test hung and what the watchdog printed.
    In-process (no controller) it does nothing: the line on stderr ends the run."""
    directory = (getattr(config, "workerinput", None) or {}).get(HANGS_KEY)
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rpartition(" (")[0]  # "nodeid (call)"
    if not directory or not test:
        return
    RESERVE.release()  # the backend may have left no fd
    record = {"test": test, "limit_s": limit_s, "watchdog": line}
    with open(os.path.join(directory, f"{os.getpid()}.json"), "w") as f:
        json.dump(record, f)


def hang_of(directory, report) -> dict | None:
    """``{"limit_s": ..., "watchdog": line}`` if the watchdog ended the worker of xdist's crash
    ``report`` (:func:`note_hang`), its line then added to the report; else None (a signal)."""
    for entry in os.scandir(directory) if directory else ():
        try:
            with open(entry.path) as f:
                record = json.load(f)
        except (OSError, ValueError):
            continue  # a worker that died while writing: no line to quote
        if record.get("test") == report.nodeid:
            limit_s, line = record["limit_s"], record["watchdog"]
            report.longrepr = (
                f"{report.longrepr}\nhung: the watchdog ended the worker (its limit {limit_s:g} s):\n{line}"
            )
            return {"limit_s": limit_s, "watchdog": line}
    return None


def nofile_soft_limit() -> int | None:
    """This process's RLIMIT_NOFILE soft limit (None: unlimited)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def max_worker_restart(config) -> int | None:
    """How many crashed workers pytest-xdist replaces before it stops the run (None: no limit, or
    no xdist)."""
    try:
        from xdist.dsession import get_default_max_worker_restart  # type: ignore[import-untyped]
    except ImportError:
        return None
    try:
        return get_default_max_worker_restart(config)
    except (AttributeError, ValueError):
        return None


def status(cell: dict | None) -> str:
    """``FAIL`` if any test failed, ``pass`` if any passed, ``skip``, or ``not run``."""
    if not cell:
        return "not run"
    if cell["failed"]:
        return "FAIL"
    if cell["passed"]:
        return "pass"
    return "skip"


def skip_reason(report) -> str | None:
    """The reason of a skipped test's report (``pytest.skip``'s message)."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return None
