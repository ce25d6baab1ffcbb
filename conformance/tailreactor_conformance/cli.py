"""``tailreactor-conformance``: run the conformance suite against a backend or reactor.

Usage::

    tailreactor-conformance --backend epoll
    tailreactor-conformance --backend io_uring --backend selectors -n auto
    tailreactor-conformance --backend mypkg.fast:make_backend      # a third-party backend
    tailreactor-conformance --backend cabi:path/to/libfoo.so       # a backend in C, Rust, Go (cabi.py)
    tailreactor-conformance --backend epoll --reactor mypkg.r:MyReactor
    tailreactor-conformance --backend epoll --policy mypkg.order:MyOrder --clause R21,R26,R27
    tailreactor-conformance --backend epoll --clause B7 --clause R10 -x
    tailreactor-conformance --profile deep --seed 1234
    tailreactor-conformance --list                                 # the clauses, no run
    cc -I "$(dirname "$(tailreactor-conformance --header)")" ...    # the C ABI's header, installed

Checks that each ``--backend`` starts, that ``--reactor`` imports and that each
``--policy`` makes a policy (else one line naming the option and exit 2), then replaces itself with a fresh
``python -m pytest`` over the tests shipped in ``tailreactor_conformance/tests``
(pytest-xdist, the plugin prints the per-clause pass/fail table).  A fresh
interpreter because pytest must mark this package and ``tailreactor`` for
assert rewriting before they are imported, and this process has imported
both.  Exit status: 0 when every selected clause passed, 1 when a test failed
(also with ``-x`` under xdist, see :mod:`.plugin`), 2 for a backend or reactor
that cannot start or an interrupted run, 3 without the ``conformance`` extra
(one line naming the ``pip install``), 4 for a pytest usage error.
Arguments after ``--`` go to pytest unchanged.

``module:factory`` names are imported from the current directory first (as
``python -m`` would), so a project can test the backend it is writing
without installing it.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
from pathlib import Path

from tailreactor.extras import require

from .failures import COMMAND_ENV, TYPED_ENV, invoked_as

__all__ = ["main", "build_pytest_args"]

TESTS_DIR = Path(__file__).resolve().parent / "tests"
#: The C ABI's header, package data (``--header`` prints it).
HEADER = Path(__file__).resolve().parent / "include" / "tailreactor_backend.h"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tailreactor-conformance",
        description="Run the tailreactor conformance suite and print a per-clause table.",
        epilog="Arguments after -- are passed to pytest.",
    )
    p.add_argument(
        "--backend",
        action="append",
        metavar="NAME",
        help="auto, epoll, io_uring, selectors, module:factory or cabi:PATH.so "
        "(a shared library with the C ABI of tailreactor_backend.h) (repeatable; "
        "default: the three shipped backends; auto runs and is shown as "
        "io_uring, or epoll when the kernel refuses io_uring)",
    )
    p.add_argument(
        "--reactor",
        metavar="MODULE:FACTORY",
        help="reactor under test, called as factory(backend, config=..., clock=...)",
    )
    p.add_argument(
        "--policy",
        action="append",
        metavar="NAME",
        help="dispatch policy under test in the policy clauses (R21, R26, R27): backend, age, "
        "oldest, lifo, shortest or module:Class, called as Class(age_from, threshold_ns) "
        "(repeatable; default: every shipped policy)",
    )
    p.add_argument(
        "--clause",
        action="append",
        metavar="ID",
        help="run only these clauses (B1, R10, ...; B, R or H for an area)",
    )
    p.add_argument(
        "--profile",
        choices=("ci", "deep"),
        default="ci",
        help="Hypothesis profile: ci (fast, derandomized) or deep (many examples)",
    )
    p.add_argument("--seed", type=int, help="Hypothesis seed for --profile deep (default: random, printed)")
    p.add_argument(
        "-n",
        "--jobs",
        default="auto",
        help="pytest-xdist workers: a number, or auto (default); 0 runs in-process",
    )
    p.add_argument("-x", "--exitfirst", action="store_true", help="stop at the first failing test")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    p.add_argument("--list", action="store_true", help="print the clause registry and exit")
    p.add_argument(
        "--header",
        action="store_true",
        help="print the path of tailreactor_backend.h, the C ABI's header this package ships "
        "(for cc -I), and exit",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="one line per test")
    return p


def build_pytest_args(ns: argparse.Namespace, extra: list[str]) -> list[str]:
    """The pytest command line for parsed runner options ``ns``."""
    args = [
        str(TESTS_DIR),
        "-p",
        "tailreactor_conformance.plugin",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(TESTS_DIR),
        "-c",
        str(TESTS_DIR / "suite.ini"),  # the suite's own configuration (see that file)
        "-n",
        str(ns.jobs),
        "--conformance-profile",
        ns.profile,
        "-rfE",  # skips: their reasons are in the table, once
    ]
    # Default verbosity, not -q: under -q xdist repeats "bringing up nodes..."
    # where a non-terminal output gets the worker and test counts.
    if ns.verbose:
        args.append("-v")
    for name in ns.backend or ():
        args += ["--backend", name]
    if ns.reactor:
        args += ["--reactor", ns.reactor]
    for spec in ns.policy or ():
        args += ["--policy", spec]
    for cid in ns.clause or ():
        args += ["--clause", cid]
    if ns.exitfirst:
        args.append("-x")
    if ns.json:
        args += ["--conformance-json", ns.json]
    if ns.profile == "deep":
        args.append(f"--hypothesis-seed={ns.seed}")
    return args + extra


class StartError(Exception):
    """A backend or reactor under test cannot start: one line, exit status 2."""


def _one_line(exc: BaseException) -> str:
    """``Type: message`` on one line (a message with newlines is shown as its repr)."""
    text = str(exc)
    if "\n" in text:
        text = repr(text)
    return f"{type(exc).__name__}: {text}"


def _check_backends(names: list[str]) -> list[str]:
    """Create and close each backend once; return the names, ``auto`` resolved.

    Raises :class:`StartError` naming the first backend that cannot be created.
    """
    from .cabi import canonical, create_backend  # cabi:PATH, or a name tailreactor.backends knows

    resolved = []
    for name in names:
        try:
            b = create_backend(name)
            resolved.append(b.name if name == "auto" else canonical(name))
            b.close()
        except BaseException as exc:  # noqa: BLE001 - any failure to start (SystemExit too) is the answer
            plain = isinstance(exc, Exception) and "\n" not in str(exc)
            raise StartError(
                f"--backend {name}: cannot be created: {exc if plain else _one_line(exc)}"
            ) from None
    return resolved


#: What the reactor clauses call on every reactor (the rest is optional per clause).
REACTOR_METHODS = ("arm", "disarm", "run_once", "post", "call_later_us", "close")


def _check_reactor(spec: str, backend_name: str) -> None:
    """Load the ``--reactor`` factory and make one reactor as the tests will.

    Raises :class:`StartError` (one line) if it cannot be loaded, is not
    callable, raises when called as ``factory(backend, config=..., clock=...)``,
    or returns something without the reactor methods the clauses call.
    """
    import time

    from tailreactor.backends import describe, import_factory, missing_methods
    from tailreactor.config import Config

    from .cabi import create_backend

    try:
        factory = import_factory(spec)
    except ValueError as exc:
        raise StartError(
            f"--reactor {spec}: {exc} (accepted: module:factory, e.g. tailreactor.reactor:Reactor)"
        ) from None
    if not callable(factory):
        raise StartError(
            f"--reactor {spec}: {type(factory).__name__} is not callable "
            f"(accepted: a Reactor class or factory)"
        )
    backend = create_backend(backend_name)
    try:
        reactor = factory(backend, config=Config.default(), clock=time.monotonic_ns)
    except BaseException as exc:  # noqa: BLE001 - any failure (SystemExit too) is the user's answer
        backend.close()
        raise StartError(
            f"--reactor {spec}: not a reactor factory: factory(backend, config=..., "
            f"clock=...) raised {_one_line(exc)}"
        ) from None
    missing = missing_methods(reactor, REACTOR_METHODS)
    try:
        if callable(getattr(reactor, "close", None)):
            reactor.close()
    except BaseException as exc:  # noqa: BLE001
        raise StartError(f"--reactor {spec}: the reactor's close() raised {_one_line(exc)}") from None
    finally:
        backend.close()  # idempotent; a reactor that closed it already is fine
    if missing:
        raise StartError(
            f"--reactor {spec}: factory returned {describe(reactor)}, not a reactor: no "
            f"{', '.join(m + '()' for m in missing)} (accepted: a Reactor class or factory)"
        )


#: What the reactor calls on every dispatch policy (tailreactor/policies/__init__.py).
POLICY_METHODS = ("start", "next", "again", "add")


def _check_policy(spec: str) -> None:
    """Make the ``--policy`` once as the reactor will; :class:`StartError` (one line) if it cannot."""
    from tailreactor.backends import describe, missing_methods
    from tailreactor.policies import POLICIES, create

    accepted = f"accepted: {', '.join(POLICIES)} or module:Class"
    if ":" not in spec and spec not in POLICIES:
        raise StartError(f"--policy {spec}: not a policy ({accepted})")
    try:
        policy = create(spec, "arm", 0)
    except BaseException as exc:  # noqa: BLE001 - any failure (SystemExit too) is the user's answer
        raise StartError(f"--policy {spec}: cannot be made: {_one_line(exc)} ({accepted})") from None
    missing = missing_methods(policy, POLICY_METHODS)
    if missing:
        raise StartError(
            f"--policy {spec}: made {describe(policy)}, not a policy: no "
            f"{', '.join(m + '()' for m in missing)} (tailreactor/policies/__init__.py)"
        )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    ns = _parser().parse_args(argv)

    if ns.header:
        print(HEADER)
        return 0
    require("conformance", "tailreactor-conformance")  # pytest, its plugins, Hypothesis: one line if not

    if ns.list:
        from .table import render_registry

        render_registry(
            sys.stdout,
            width=os.get_terminal_size().columns if sys.stdout.isatty() else 120,
            color=sys.stdout.isatty(),
        )
        return 0

    # module:factory names resolve from the current directory, here and in
    # the xdist workers (they inherit PYTHONPATH).
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [cwd, os.environ.get("PYTHONPATH")]))

    os.environ[COMMAND_ENV] = invoked_as(sys.argv[0])  # rerun lines name the runner as it was run
    try:
        if ns.backend:
            typed = ns.backend
            ns.backend = _check_backends(ns.backend)
            # The table and its rerun lines name a backend as typed (failures.as_typed).
            os.environ[TYPED_ENV] = json.dumps({c: t for c, t in zip(ns.backend, typed) if c != t})
        if ns.reactor:
            _check_reactor(ns.reactor, ns.backend[0] if ns.backend else "epoll")
        for spec in ns.policy or ():
            _check_policy(spec)
    except StartError as exc:
        print(f"tailreactor-conformance: {exc}", file=sys.stderr)
        return 2
    if ns.profile == "deep":
        if ns.seed is None:
            ns.seed = secrets.randbelow(2**32)
        print(
            f"tailreactor-conformance: profile deep, hypothesis seed {ns.seed} "
            f"(replay with --profile deep --seed {ns.seed})"
        )
    elif ns.seed is not None:
        print("tailreactor-conformance: --seed is ignored with --profile ci (derandomized)", file=sys.stderr)

    # The suite needs its own plugin, pytest-xdist and Hypothesis's plugin,
    # all loaded from entry points.
    os.environ.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "pytest", *build_pytest_args(ns, extra)])
    return 127  # not reached: execv replaces this process or raises OSError


if __name__ == "__main__":
    raise SystemExit(main())
