"""wrk: its command line, and its output read into a :class:`WrkResult`.

The figures come from the ``TAILREACTOR_METRICS {json}`` line ``tail_latency.lua`` prints (integers
in microseconds, nothing rounded): wrk's histogram of its own closed-loop requests after wrk 4's
partial coordinated-omission correction (``latency_samples`` counts the synthetic samples too);
responses slower than ``--timeout`` are ``timeout`` errors.  wrk's own ``Socket errors`` and
``Non-2xx`` lines must agree with the JSON line: a disagreement means the script or the parser is
wrong, so it is an error rather than a silently chosen number.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import asdict, dataclass

from . import pooled
from .metrics import PERCENTILES, Percentile, RunCounts

METRICS_PREFIX = "TAILREACTOR_METRICS "
ERROR_KINDS = ("connect", "read", "write", "status", "timeout")
_SOCKET = ("connect", "read", "write", "timeout")
_SOCKET_ERRORS = re.compile(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)")
_NON_2XX = re.compile(r"Non-2xx or 3xx responses: (\d+)")
_RPS = re.compile(r"^Requests/sec:\s+([0-9.]+)", re.M)


class WrkOutputError(ValueError):
    """wrk's output cannot be read (no metrics line, bad JSON, inconsistent figures)."""


@dataclass(frozen=True)
class WrkResult(RunCounts):
    """One wrk run: ``latency_us`` has ``min``/``max``/``mean``/``stdev``; ``spectrum`` is
    ``(percentile, us)`` from p0 to p99.999 for plots; ``text_rps`` is wrk's own ``Requests/sec``;
    ``histogram`` the whole latency histogram encoded (:mod:`tailjob.pooled`), None when the script
    could not read it (wrk without LuaJIT's ffi)."""

    requests: int
    duration_us: int
    bytes: int
    latency_samples: int
    latency_us: dict
    percentiles: tuple[Percentile, ...]
    spectrum: tuple[tuple[float, int], ...]
    errors: dict
    text_rps: float | None = None
    histogram: str | None = None

    def percentile(self, p: float) -> Percentile:
        """The :class:`Percentile` for ``p``; ``KeyError`` if ``p`` is not in :data:`PERCENTILES`."""
        for q in self.percentiles:
            if q.p == p:
                return q
        raise KeyError(f"percentile {p} not recorded: recorded {[q.p for q in self.percentiles]}")

    def as_dict(self) -> dict:
        return {**asdict(self), "rps": self.rps}


def parse_wrk_output(text: str) -> WrkResult:
    """The result of one ``wrk ... -s tail_latency.lua`` run's stdout; :class:`WrkOutputError` when
    its metrics line is missing, not JSON, lacks a field or disagrees with wrk's own lines."""
    lines = [ln for ln in text.splitlines() if ln.startswith(METRICS_PREFIX)]
    if not lines:
        raise WrkOutputError(
            "no TAILREACTOR_METRICS line in wrk's output (was wrk run with -s scripts/ci/tailjob/tail_latency.lua?)"
        )
    raw = lines[-1][len(METRICS_PREFIX) :]
    try:
        m = json.loads(raw)
    except json.JSONDecodeError as e:
        raise WrkOutputError(f"TAILREACTOR_METRICS line is not valid JSON ({e}): {raw[:80]!r}") from None
    try:
        empty = int(m["latency_samples"]) == 0
        buckets = m.get("histogram")
        rps = _RPS.search(text)
        result = WrkResult(
            requests=int(m["requests"]),
            duration_us=int(m["duration_us"]),
            bytes=int(m["bytes"]),
            latency_samples=int(m["latency_samples"]),
            latency_us=dict(m["latency_us"]),
            percentiles=tuple(
                Percentile(float(q["p"]), None if empty else int(q["us"]), int(q["samples"]))
                for q in m["percentiles"]
            ),
            spectrum=tuple((float(p), int(us)) for p, us in m["spectrum"]),
            errors={k: int(m["errors"][k]) for k in ERROR_KINDS},
            text_rps=float(rps.group(1)) if rps else None,
            histogram=None
            if buckets is None
            else pooled.encode(pooled.histogram_of((int(v), int(c)) for v, c in buckets)),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise WrkOutputError(f"TAILREACTOR_METRICS line lacks or mangles a field: {e!r}") from None
    if [q.p for q in result.percentiles] != list(PERCENTILES):
        raise WrkOutputError(
            f"TAILREACTOR_METRICS percentiles are {[q.p for q in result.percentiles]}, "
            f"expected {list(PERCENTILES)}"
        )
    # wrk prints these lines only when the counters are non-zero.
    socket, status = _SOCKET_ERRORS.search(text), _NON_2XX.search(text)
    said = {
        **dict(zip(_SOCKET, map(int, socket.groups()) if socket else (0, 0, 0, 0))),
        "non-2xx": int(status.group(1)) if status else 0,
    }
    for kind, n in said.items():
        ours = result.errors["status" if kind == "non-2xx" else kind]
        if ours != n:
            what = kind if kind == "non-2xx" else f"{kind} errors"
            raise WrkOutputError(f"wrk's text says {what} = {n}, TAILREACTOR_METRICS says {ours}")
    return result


def wrk_command(
    url: str,
    *,
    threads: int,
    connections: int,
    duration_s: int,
    script: str,
    cpus: str | None = None,
) -> list[str]:
    """argv for one wrk run; ``cpus`` (e.g. ``"1"``) pins it with ``taskset -c``."""
    cmd = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration_s}s", "-s", script, url]
    return ["taskset", "-c", cpus, *cmd] if cpus is not None else cmd


def wrk_env(base: dict | None = None) -> dict:
    """wrk's environment: ``base`` (default ``os.environ``) with ``TAILREACTOR_PERCENTILES``, the
    percentiles ``tail_latency.lua`` prints (the metric table's)."""
    return {
        **(os.environ if base is None else base),
        "TAILREACTOR_PERCENTILES": ",".join(f"{p:g}" for p in PERCENTILES),
    }


def wrk_version(wrk: str = "wrk") -> str:
    """wrk's version line (``wrk -v`` prints it and exits 1, which is normal)."""
    try:
        out = subprocess.run([wrk, "-v"], capture_output=True, text=True, timeout=10, check=False)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{wrk!r} not found; install it: scripts/bootstrap.sh --wrk "
            "(as root or with sudo: apt-get install wrk)"
        ) from None
    lines = (out.stdout or out.stderr).splitlines()
    # "wrk debian/4.1.0-3+b2 [epoll] Copyright (C) 2012 Will Glozer" -> up to the copyright
    return lines[0].split(" Copyright")[0].strip() if lines else "unknown"
