"""wrk: the command line, running it, and parsing its output.

Build ``wrk -tT -cC -dDs -s scripts/ci/tail_latency.lua URL`` (optionally
under ``taskset``), run it, and turn its output into a :class:`WrkResult`.

The figures come from the ``TAILREACTOR_METRICS {json}`` line that
``tail_latency.lua``'s ``done()`` prints (integers in microseconds, nothing
rounded).  wrk's own text lines ``Requests/sec:``, ``Socket errors: ...`` and
``Non-2xx or 3xx responses: N`` are parsed too and must agree with the JSON
line; a disagreement means the script or the parser is wrong, so it is an
error rather than a silently chosen number.

What the numbers are (see tail_latency.lua): wrk's histogram of its own,
closed-loop requests, after wrk 4's partial coordinated-omission correction
(``latency_samples`` counts the synthetic samples too); responses slower than
``--timeout`` count as ``timeout`` errors and are not in the histogram.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass

from . import pooled
from .metrics import PERCENTILES, Percentile, RunCounts

METRICS_PREFIX = "TAILREACTOR_METRICS "
ERROR_KINDS = ("connect", "read", "write", "status", "timeout")

_SOCKET_ERRORS = re.compile(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)")
_NON_2XX = re.compile(r"Non-2xx or 3xx responses: (\d+)")
_RPS = re.compile(r"^Requests/sec:\s+([0-9.]+)", re.M)


class WrkOutputError(ValueError):
    """wrk's output cannot be read (no metrics line, bad JSON, inconsistent figures)."""


@dataclass(frozen=True)
class WrkResult(RunCounts):
    """One wrk run.

    ``requests`` completed in ``duration_us``; ``latency_samples`` in wrk's
    histogram; ``latency_us`` has ``min``/``max``/``mean``/``stdev``;
    ``percentiles`` at :data:`PERCENTILES`; ``spectrum`` is ``(percentile,
    us)`` from p0 to p99.999 for plots; ``errors`` has the five wrk counters
    (``connect``, ``read``, ``write``, ``status`` = non-2xx/3xx, ``timeout``);
    ``text_rps`` is wrk's own ``Requests/sec`` line; ``histogram`` the run's
    whole latency histogram as an encoded HdrHistogram (:mod:`tailjob.pooled`),
    ``None`` when the script could not read it (wrk without LuaJIT's ffi, or a
    recorded output from before it was printed).
    """

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
        return {
            "requests": self.requests,
            "duration_us": self.duration_us,
            "bytes": self.bytes,
            "rps": self.rps,
            "text_rps": self.text_rps,
            "latency_samples": self.latency_samples,
            "latency_us": self.latency_us,
            "percentiles": [{"p": q.p, "us": q.us, "samples": q.samples} for q in self.percentiles],
            "spectrum": [list(x) for x in self.spectrum],
            "errors": self.errors,
            "histogram": self.histogram,
        }


def parse_wrk_output(text: str) -> WrkResult:
    """Parse the stdout of one ``wrk ... -s tail_latency.lua`` run.

    Raises :class:`WrkOutputError` when the ``TAILREACTOR_METRICS`` line is
    missing or not valid JSON, lacks a field, or disagrees with wrk's own
    ``Socket errors`` / ``Non-2xx`` lines.
    """
    lines = [ln for ln in text.splitlines() if ln.startswith(METRICS_PREFIX)]
    if not lines:
        raise WrkOutputError(
            "no TAILREACTOR_METRICS line in wrk's output (was wrk run with -s scripts/ci/tail_latency.lua?)"
        )
    raw = lines[-1][len(METRICS_PREFIX) :]
    try:
        m = json.loads(raw)
    except json.JSONDecodeError as e:
        raise WrkOutputError(f"TAILREACTOR_METRICS line is not valid JSON ({e}): {raw[:80]!r}") from None
    try:
        samples = int(m["latency_samples"])
        empty = samples == 0
        percentiles = tuple(
            Percentile(float(q["p"]), None if empty else int(q["us"]), int(q["samples"]))
            for q in m["percentiles"]
        )
        result = WrkResult(
            requests=int(m["requests"]),
            duration_us=int(m["duration_us"]),
            bytes=int(m["bytes"]),
            latency_samples=samples,
            latency_us=dict(m["latency_us"]),
            percentiles=percentiles,
            spectrum=tuple((float(p), int(us)) for p, us in m["spectrum"]),
            errors={k: int(m["errors"][k]) for k in ERROR_KINDS},
            text_rps=_text_rps(text),
            histogram=_histogram(m.get("histogram")),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise WrkOutputError(f"TAILREACTOR_METRICS line lacks or mangles a field: {e!r}") from None
    if [q.p for q in result.percentiles] != list(PERCENTILES):
        raise WrkOutputError(
            f"TAILREACTOR_METRICS percentiles are {[q.p for q in result.percentiles]}, "
            f"expected {list(PERCENTILES)}"
        )
    _check_text_agrees(text, result)
    return result


def _histogram(buckets) -> str | None:
    """wrk's ``[[us, count], ...]`` buckets as an encoded HdrHistogram (None stays None)."""
    if buckets is None:
        return None
    return pooled.encode(pooled.histogram_of((int(v), int(c)) for v, c in buckets))


def _text_rps(text: str) -> float | None:
    found = _RPS.search(text)
    return float(found.group(1)) if found else None


def _check_text_agrees(text: str, r: WrkResult) -> None:
    # wrk prints these lines only when the counters are non-zero.
    found = _SOCKET_ERRORS.search(text)
    text_errors = (
        dict(zip(("connect", "read", "write", "timeout"), map(int, found.groups())))
        if found
        else dict.fromkeys(("connect", "read", "write", "timeout"), 0)
    )
    for kind, n in text_errors.items():
        if r.errors[kind] != n:
            raise WrkOutputError(
                f"wrk's text says {kind} errors = {n}, TAILREACTOR_METRICS says {r.errors[kind]}"
            )
    found = _NON_2XX.search(text)
    text_status = int(found.group(1)) if found else 0
    if r.errors["status"] != text_status:
        raise WrkOutputError(
            f"wrk's text says non-2xx = {text_status}, TAILREACTOR_METRICS says {r.errors['status']}"
        )


def wrk_command(
    url: str,
    *,
    threads: int,
    connections: int,
    duration_s: int,
    script: str,
    cpus: str | None = None,
    timeout_s: int | None = None,
    wrk: str = "wrk",
) -> list[str]:
    """argv for one wrk run; ``cpus`` (e.g. ``"1"``) pins it with ``taskset -c``."""
    cmd = [wrk, f"-t{threads}", f"-c{connections}", f"-d{duration_s}s"]
    if timeout_s is not None:
        cmd.append(f"--timeout={timeout_s}s")
    cmd += ["-s", script, url]
    return ["taskset", "-c", cpus, *cmd] if cpus is not None else cmd


def wrk_env(base: dict | None = None) -> dict:
    """wrk's environment: ``base`` (default ``os.environ``) with ``TAILREACTOR_PERCENTILES``, the
    percentiles ``tail_latency.lua`` prints (:data:`tailjob.metrics.PERCENTILES`, comma-separated)."""
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
