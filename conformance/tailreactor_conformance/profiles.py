"""Hypothesis settings profiles for the conformance suite: ``ci`` and ``deep``.

Role
----
``ci`` is fast and reproducible: a fixed example budget and
``derandomize=True`` (the seed is derived from each test, so two runs of the
same code try the same examples; the runner prints "derandomized" as the
seed).  ``deep`` tries many more examples from a random seed that the runner
records and prints (``--seed`` replays it).  Neither uses the example
database: a conformance run must not depend on what an earlier run found.

The profile is chosen once per session (``--conformance-profile``, or
``--profile`` on the runner) and read by the property tests through
:func:`current`, so loading it never changes the settings of unrelated
Hypothesis tests collected in the same session.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from hypothesis import HealthCheck, Phase, settings

__all__ = ["PROFILES", "register", "select", "current", "name", "keep_files_out_of_the_users_directory"]

#: Example budgets: (max_examples, stateful_step_count).
PROFILES = {"ci": (25, 20), "deep": (400, 60)}

_ACTIVE = "ci"


def register() -> None:
    """Register both profiles with Hypothesis (idempotent).

    ``TAILREACTOR_CONFORMANCE_SHRINK=0`` skips shrinking a failing example (the
    meta-test, which only needs to know that a mutant fails, sets it).
    """
    shrink = os.environ.get("TAILREACTOR_CONFORMANCE_SHRINK", "1") != "0"
    common: dict[str, Any] = dict(
        deadline=None,  # real sockets and a shared 2-core box: time per example varies
        database=None,
        print_blob=True,  # a failure prints @reproduce_failure(...) to replay it
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
        ],
    )
    if not shrink:
        common["phases"] = [p for p in Phase if p is not Phase.shrink]
    for prof, (examples, steps) in PROFILES.items():
        settings.register_profile(
            f"tailreactor-{prof}",
            max_examples=examples,
            stateful_step_count=steps,
            derandomize=(prof == "ci"),
            **common,
        )


def select(profile: str) -> None:
    """Make ``profile`` (``ci`` or ``deep``) the one :func:`current` returns.

    Raises ``ValueError`` for any other name.
    """
    global _ACTIVE
    if profile not in PROFILES:
        raise ValueError(f"conformance profile {profile!r} is unknown: accepted {', '.join(PROFILES)}")
    _ACTIVE = profile


def name() -> str:
    """The name of the active profile."""
    return _ACTIVE


def current() -> settings:
    """The active profile as a ``hypothesis.settings`` object (use as a decorator)."""
    register()
    return settings.get_profile(f"tailreactor-{_ACTIVE}")


def keep_files_out_of_the_users_directory():
    """Point Hypothesis's files at a new temporary directory; return what removes it.

    Hypothesis writes under ``./.hypothesis`` by default: besides the example
    database (the profiles use none), its cache of the constants found in the
    code under test.  A suite run keeps them in a temporary directory, shared
    with its xdist workers (they inherit the variable) and removed when the
    run ends; a ``HYPOTHESIS_STORAGE_DIRECTORY`` the user set is kept (then
    the returned callable does nothing).
    """
    if os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
        return lambda: None  # the user's choice, or a worker of this run
    from hypothesis.configuration import set_hypothesis_home_dir

    home = tempfile.mkdtemp(prefix="tailreactor-conformance-hypothesis-")
    os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = home
    set_hypothesis_home_dir(home)
    return lambda: shutil.rmtree(home, ignore_errors=True)
