"""Runtime configuration: every ``CWIST_*`` knob in one table, parsed strictly.

Role
----
This module is the single source of truth for the environment variables the
reference reads.  Each knob is one :class:`Knob` row (name, type, default,
accepted range, unit, which backends it affects).  What the docs say about a
knob -- its help, when to change it, what 0 means, what CWIST does with a bad
value, in English and Korean -- is prose, kept in ``knobs.toml`` beside this
file and read only by :mod:`tailreactor.config_docs`.  The runtime-config docs
are generated from both, so the docs cannot disagree with the code.

Names are CWIST's (the variables of CWIST's README and of its PR #375) so both
projects share one set of docs.

Strict parsing, and how it differs from CWIST
---------------------------------------------
CWIST silently falls back to a default on a bad value (``CWIST_HTTP_BATCH=abc``
gives 16).  A silent fallback makes an A/B measure something other than what the
operator asked for, so here every invalid value raises :class:`ConfigError`
naming the variable, the value, and what is accepted.  Unset or empty means
"use the default".
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ConfigError", "Knob", "KNOBS", "Config", "load", "knob", "probe_file_path", "check_probe_file"]


class ConfigError(ValueError):
    """An environment variable holds a value the reference does not accept.

    The message is one line: ``CWIST_X='value' is invalid: accepted ...``.
    Attributes ``name``, ``value`` and ``accepted`` carry the same facts.
    """

    def __init__(self, name: str, value: str, accepted: str):
        self.name, self.value, self.accepted = name, value, accepted
        super().__init__(f"{name}={value!r} is invalid: accepted {accepted}")


@dataclass(frozen=True)
class Knob:
    """One row of the registry.

    ``kind`` is ``int`` (decimal integer in ``[lo, hi]``), ``choice`` (one of
    ``choices``, or one of ``prefixes`` followed by a non-empty value), ``bool`` (exactly ``0`` or ``1``) or ``path`` (any non-empty
    string).  ``default=None`` means "derived" and ``default_text`` says from
    what.  ``backends`` is a tuple of backend names the knob affects, or
    ``("all",)``.  ``unit`` is what an ``int`` counts (``us``, ``s``,
    ``requests``, ...).  ``test_only`` rows exist for the tests and the
    tail-latency job's controls.
    """

    name: str
    attr: str
    kind: str
    default: Any
    area: str
    lo: int | None = None
    hi: int | None = None
    choices: tuple[str, ...] = ()
    prefixes: tuple[
        tuple[str, str], ...
    ] = ()  # a choice knob also takes PREFIX + a value: (("cabi:", "PATH"),)
    default_text: str = ""
    backends: tuple[str, ...] = ("all",)
    test_only: bool = False
    unit: str = ""

    def accepted(self) -> str:
        """Human-readable description of the accepted values (English)."""
        if self.kind == "int":
            return f"an integer from {self.lo} to {self.hi}"
        if self.kind == "choice":
            return (
                "one of " + ", ".join(self.choices) + "".join(f", or {p}{what}" for p, what in self.prefixes)
            )
        if self.kind == "bool":
            return "0 or 1"
        return "a file path in an existing, writable directory (checked with CWIST_LATENCY_PROBE=1)"

    def in_range(self, value: int) -> bool:
        """Whether ``value`` is in ``[lo, hi]`` (an ``int`` knob's bounds; other kinds have none)."""
        return self.lo is not None and self.hi is not None and self.lo <= value <= self.hi

    def _is_choice(self, text: str) -> bool:
        return text in self.choices or any(
            text.startswith(p) and text[len(p) :].strip() for p, _ in self.prefixes
        )

    def parse(self, raw: str) -> Any:
        """Parse one raw string; raise :class:`ConfigError` if it is not accepted."""
        text = raw.strip()
        if self.kind == "int":
            # int() alone would accept "1_000" and " +5"; operators type digits.
            body = text[1:] if text[:1] == "-" else text
            # isdigit() alone accepts "²" and Arabic-Indic digits; operators type ASCII.
            if not (body.isascii() and body.isdigit()):
                raise ConfigError(self.name, raw, self.accepted())
            try:
                value = int(text)
            except ValueError:  # more digits than int() parses (4300): far out of range anyway
                raise ConfigError(self.name, raw, self.accepted()) from None
            if not self.in_range(value):
                raise ConfigError(self.name, raw, self.accepted())
            return value
        if self.kind == "choice":
            if not self._is_choice(text):
                raise ConfigError(self.name, raw, self.accepted())
            return text
        if self.kind == "bool":
            if text not in ("0", "1"):
                raise ConfigError(self.name, raw, self.accepted())
            return text == "1"
        if not text:
            raise ConfigError(self.name, raw, self.accepted())
        return text

    def check(self, value: Any) -> Any:
        """Return ``value`` if :meth:`parse` could have given it (or it is a ``None``
        default); raise :class:`ConfigError` otherwise.  What ``Config.replace`` checks."""
        if value is None:
            ok = self.default is None
        elif self.kind == "int":
            ok = type(value) is int and self.in_range(value)
        elif self.kind == "choice":
            ok = isinstance(value, str) and self._is_choice(value)
        elif self.kind == "bool":
            ok = type(value) is bool
        else:
            ok = isinstance(value, str) and value.strip() != ""
        if not ok:
            raise ConfigError(self.name, value, self.accepted())
        return value


# The registry.  Order is the order of the generated docs within each area.  What the docs say
# about each knob (English and Korean) is in knobs.toml next to this file.
KNOBS: tuple[Knob, ...] = (
    Knob(
        name="CWIST_REACTOR_BACKEND",
        attr="backend",
        kind="choice",
        default="auto",
        choices=("auto", "io_uring", "epoll", "selectors"),
        prefixes=(("cabi:", "PATH"),),
        area="backend",
    ),
    Knob(
        name="CWIST_URING_ENTRIES",
        attr="uring_entries",
        kind="int",
        default=256,
        lo=1,
        hi=32768,
        area="backend",
        backends=("io_uring",),
        unit="entries",
    ),
    Knob(
        name="CWIST_REACTOR_POLICY",
        attr="policy",
        kind="choice",
        default="age",
        choices=("backend", "age", "oldest", "lifo", "shortest"),  # tailreactor.policies.POLICIES
        area="dispatch",
    ),
    Knob(
        name="CWIST_REACTOR_TAIL_US",
        attr="tail_us",
        kind="int",
        default=3500,
        lo=0,
        hi=86_400_000_000,
        area="dispatch",
        unit="us",
    ),
    Knob(
        name="CWIST_REACTOR_AGE_FROM",
        attr="age_from",
        kind="choice",
        default="arm",
        choices=("arm", "ready"),
        area="dispatch",
    ),
    Knob(
        name="CWIST_REACTOR_ROUND_BUDGET_US",
        attr="round_budget_us",
        kind="int",
        default=2000,
        lo=0,
        hi=60_000_000,
        area="dispatch",
        backends=("io_uring",),
        unit="us",
    ),
    Knob(
        name="CWIST_REACTOR_HARVEST_US",
        attr="harvest_us",
        kind="int",
        default=0,
        lo=0,
        hi=60_000_000,
        area="dispatch",
        backends=("epoll", "io_uring", "selectors"),
        unit="us",
    ),
    Knob(
        name="CWIST_REACTOR_DRAIN_CHUNK",
        attr="drain_chunk",
        kind="int",
        default=8,
        lo=0,
        hi=1_000_000,
        area="dispatch",
        unit="callbacks",
    ),
    Knob(
        name="CWIST_RX_URING",
        attr="rx_uring",
        kind="choice",
        default="auto",
        choices=("auto", "1", "0"),
        area="backend",
        backends=("io_uring",),
    ),
    Knob(name="CWIST_LATENCY_PROBE", attr="latency_probe", kind="bool", default=False, area="probe"),
    Knob(name="CWIST_LATENCY_PROBE_FILE", attr="latency_probe_file", kind="path", default=None, area="probe"),
    Knob(
        name="CWIST_HTTP_BATCH",
        attr="http_batch",
        kind="int",
        default=16,
        lo=1,
        hi=1024,
        area="http",
        unit="requests",
    ),
    Knob(
        name="CWIST_HTTP_YIELD_BATCH",
        attr="http_yield_batch",
        kind="int",
        default=None,
        lo=1,
        hi=1024,
        area="http",
        unit="requests",
        default_text="CWIST_HTTP_BATCH",
    ),
    Knob(
        name="CWIST_HTTP_KEEP_ALIVE_TIMEOUT",
        attr="http_keep_alive_timeout_s",
        kind="int",
        default=15,
        lo=0,
        hi=86400,
        area="http",
        unit="s",
    ),
    Knob(
        name="CWIST_WORKERS",
        attr="workers",
        kind="int",
        default=1,
        lo=1,
        hi=1024,
        area="workers",
        unit="processes",
    ),
    Knob(
        name="CWIST_BENCH_DELAY_US",
        attr="bench_delay_us",
        kind="int",
        default=0,
        lo=0,
        hi=1_000_000,
        area="bench",
        unit="us",
        test_only=True,
    ),
    Knob(
        name="CWIST_BENCH_SLOW_US",
        attr="bench_slow_us",
        kind="int",
        default=0,
        lo=0,
        hi=1_000_000,
        area="bench",
        unit="us",
        test_only=True,
    ),
    Knob(
        name="CWIST_BENCH_SERVICE_ROUTE",
        attr="bench_service_route",
        kind="bool",
        default=False,
        area="bench",
        test_only=True,
    ),
    Knob(
        name="CWIST_BENCH_STALL_US",
        attr="bench_stall_us",
        kind="int",
        default=0,
        lo=0,
        hi=1_000_000,
        area="bench",
        unit="us",
        test_only=True,
    ),
    Knob(
        name="CWIST_BENCH_STALL_EVERY_MS",
        attr="bench_stall_every_ms",
        kind="int",
        default=0,
        lo=0,
        hi=3_600_000,
        area="bench",
        unit="ms",
        test_only=True,
    ),
)

_BY_NAME = {k.name: k for k in KNOBS}


def knob(name: str) -> Knob:
    """Return the registry row for ``name``; ``KeyError`` if it is not a known knob."""
    return _BY_NAME[name]


_BY_ATTR = {k.attr: k for k in KNOBS}
# The Python type of each kind's value; a knob whose default is None (derived, or "no file") may be None.
_TYPES = {"int": "int", "choice": "str", "bool": "bool", "path": "str"}


def field_type(k: Knob) -> str:
    """The annotation of ``k``'s :class:`Config` field, as source text."""
    return _TYPES[k.kind] + (" | None" if k.default is None else "")


def field_block(knobs: tuple[Knob, ...] = KNOBS) -> str:
    """:class:`Config`'s knob fields as source lines: one per knob, in registry order, with its default."""
    return "".join(f"    {k.attr}: {field_type(k)} = {_literal(k.default)}\n" for k in knobs)


def _literal(value: Any) -> str:
    """``value`` as source text, strings in double quotes as the formatter writes them."""
    return json.dumps(value) if isinstance(value, str) else repr(value)


@dataclass(frozen=True)
class Config:
    """Parsed knob values, one attribute per :attr:`Knob.attr`, in registry order.

    Build with :func:`load` (from an environment mapping) or :meth:`Config.default`.
    Times are in microseconds (``*_us``) as in CWIST.  ``source`` holds the
    variables the environment set.  The fields are the registry's, written out so
    a type checker sees them: after a change to :data:`KNOBS`, replace the block
    below with the output of ``python -m tailreactor.config --fields``
    (tests/test_config.py checks that they agree).  ``http_yield_batch`` is
    ``None`` only until :func:`load` or :meth:`replace` derive it from the batch.
    """

    # -- knob fields: generated by `python -m tailreactor.config --fields` --
    backend: str = "auto"
    uring_entries: int = 256
    policy: str = "age"
    tail_us: int = 3500
    age_from: str = "arm"
    round_budget_us: int = 2000
    harvest_us: int = 0
    drain_chunk: int = 8
    rx_uring: str = "auto"
    latency_probe: bool = False
    latency_probe_file: str | None = None
    http_batch: int = 16
    http_yield_batch: int | None = None
    http_keep_alive_timeout_s: int = 15
    workers: int = 1
    bench_delay_us: int = 0
    bench_slow_us: int = 0
    bench_service_route: bool = False
    bench_stall_us: int = 0
    bench_stall_every_ms: int = 0
    # -- end of knob fields --
    source: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def default(cls) -> Config:
        return load({})

    def replace(self, **changes: Any) -> Config:
        """A copy with some attributes changed, each checked as :func:`load` checks it.

        Raises :class:`ConfigError` for a value ``load`` would not give (the
        probe file's directory is checked when a probe opens it, not here)
        and ``TypeError`` for a name that is not an attribute.
        """
        unknown = sorted(set(changes) - set(_BY_ATTR))
        if unknown:
            raise TypeError(f"Config has no attribute {', '.join(unknown)}; accepted: {', '.join(_BY_ATTR)}")
        values = {attr: getattr(self, attr) for attr in _BY_ATTR}
        for attr, value in changes.items():
            values[attr] = _BY_ATTR[attr].check(value)
        return Config(source=self.source, **_derived(values))


def _derived(values: dict[str, Any]) -> dict[str, Any]:
    """Fill the knobs whose default is derived: ``CWIST_HTTP_YIELD_BATCH`` follows the batch."""
    if values["http_yield_batch"] is None:
        values["http_yield_batch"] = values["http_batch"]
    return values


def load(env: Mapping[str, str] | None = None) -> Config:
    """Parse every knob from ``env`` (default ``os.environ``).

    Returns a :class:`Config`.  Raises :class:`ConfigError` for the first
    invalid value, in registry order.  Unset or empty variables take their
    default; ``CWIST_HTTP_YIELD_BATCH`` defaults to the parsed batch value.
    """
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    used: dict[str, str] = {}
    for k in KNOBS:
        raw = env.get(k.name)
        if raw is None or raw.strip() == "":
            values[k.attr] = k.default
        else:
            values[k.attr] = k.parse(raw)
            used[k.name] = raw
    _derived(values)
    if values["latency_probe"] and values["latency_probe_file"] is not None:
        check_probe_file(values["latency_probe_file"], range(values["workers"]))
    return Config(source=used, **values)


def warnings(env: Mapping[str, str] | None = None) -> list[str]:
    """Settings in ``env`` (default ``os.environ``) that are valid but do nothing; one line each.

    A ``CWIST_*`` name that is not a knob but close to one (a typo) is named
    with the knob it resembles.  Other unknown ``CWIST_*`` names are CWIST's
    own settings sharing the environment (``CWIST_POOL_SHARDS`` ...) and are
    left alone, as CWIST leaves ours.  The server logs these at start.
    """
    import difflib

    env = os.environ if env is None else env
    out = []
    for name in sorted(n for n in env if n.startswith("CWIST_") and n not in _BY_NAME):
        near = difflib.get_close_matches(name, _BY_NAME, n=1, cutoff=0.85)
        if near:
            out.append(f"{name} is not a setting of the reference and is ignored; did you mean {near[0]}?")
    if (env.get("CWIST_LATENCY_PROBE_FILE") or "").strip() and (
        env.get("CWIST_LATENCY_PROBE") or ""
    ).strip() != "1":
        out.append(
            "CWIST_LATENCY_PROBE_FILE is set but CWIST_LATENCY_PROBE is not 1: "
            "no probe runs and no probe file is written"
        )
    return out


def probe_file_path(template: str, pid: int, worker: int) -> str:
    """The file one worker writes for ``CWIST_LATENCY_PROBE_FILE=template``.

    ``{pid}`` and ``{worker}`` are replaced; a placeholder the template lacks
    is appended (``.{pid}`` then ``.{worker}``), so workers -- forked
    processes or reactors in one process -- never overwrite each other.
    """
    path = template.replace("{pid}", str(pid)).replace("{worker}", str(worker))
    if "{pid}" not in template:
        path += f".{pid}"
    if "{worker}" not in template:
        path += f".{worker}"
    return path


def check_probe_file(template: str, workers) -> None:
    """Raise :class:`ConfigError` unless each worker in ``workers`` (indexes) can write its probe file.

    ``load()`` checks every worker, before the server forks them, so a bad
    path is one line and exit status 2, not a traceback per worker; each
    worker's ``LatencyProbe`` checks its own again when it starts.
    """
    name = "CWIST_LATENCY_PROBE_FILE"
    if template.endswith(os.sep):
        raise ConfigError(
            name,
            template,
            "a file path, not a directory (each worker would write a hidden .<pid>.<worker> file in it)",
        )
    for worker in workers:
        folder = os.path.dirname(probe_file_path(template, os.getpid(), worker)) or "."
        if not (os.path.isdir(folder) and os.access(folder, os.W_OK)):
            raise ConfigError(
                name,
                template,
                f"a path in an existing, writable directory ({folder!r}, worker {worker}'s, is not)",
            )


def main(argv: list[str] | None = None) -> int:
    """``python -m tailreactor.config --fields``: print :class:`Config`'s knob fields from the registry."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m tailreactor.config", description="Print Config's knob fields, generated from KNOBS."
    )
    parser.add_argument(
        "--fields",
        action="store_true",
        required=True,
        help="print the field block of class Config (one line per knob, registry order)",
    )
    parser.parse_args(argv)
    sys.stdout.write(field_block())
    return 0


if __name__ == "__main__":
    sys.exit(main())
