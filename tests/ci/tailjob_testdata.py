"""Shared data of the tail-latency job's tests: paths, and made-up run records.

A module of its own, not ``conftest``: ``from conftest import ...`` names
whichever conftest module Python imported first under that name
(``tests/conftest.py`` or this directory's), so helpers are imported from
here instead.  Importing it also makes ``scripts/ci`` importable (package
``tailjob``).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CI_DIR = ROOT / "scripts" / "ci"
FIXTURES = ROOT / "fixtures" / "wrk"

if str(CI_DIR) not in sys.path:
    sys.path.insert(0, str(CI_DIR))


def installed_from_a_wheel(monkeypatch) -> None:
    """The project as ``pip install tailreactor-*.whl`` leaves it (not ``pip install -e``): the
    installed distribution records a wheel file, not an editable checkout (direct_url.json)."""
    import json

    from tailreactor import extras

    class Wheel:
        def read_text(self, name: str) -> str | None:
            return json.dumps({"url": "file:///tmp/tailreactor-0-py3-none-any.whl", "archive_info": {}})

    monkeypatch.setattr(extras.metadata, "distributions", lambda **kw: [Wheel()])


def record(leg, trial, position, arm, *, warmup=False, scale=1.0, flags=(), errors=None):
    """A RunRecord with made-up but self-consistent figures; ``scale`` multiplies latency and CPU."""
    from tailjob.runner import RunRecord

    base = 1000 + 10 * trial + position  # us at p50, a little different per run
    pct = {
        50: base,
        75: 1.2 * base,
        90: 1.5 * base,
        99: 3 * base,
        99.9: 5 * base,
        99.99: 8 * base,
        99.999: 9 * base,
    }
    # a run of 1,000,000 samples: enough at or beyond every rank to bound it (stats.samples_to_bound)
    samples = {50: 500000, 75: 250000, 90: 100000, 99: 10000, 99.9: 1000, 99.99: 100, 99.999: 10}
    rps = 40000 / scale + 100 * trial
    requests = int(rps * 2)
    errors = errors or {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0}
    spectrum = [[100 * (1 - 10 ** (-k / 10)), int(base * scale * (1 + k / 5))] for k in range(51)]
    wrk = {
        "requests": requests,
        "duration_us": 2_000_000,
        "bytes": requests * 40,
        "rps": rps,
        "text_rps": rps,
        "latency_samples": 1_000_000,
        "latency_us": {"min": 50, "max": 9 * base, "mean": base, "stdev": base / 3},
        "percentiles": [{"p": p, "us": int(v * scale), "samples": samples[p]} for p, v in pct.items()],
        "spectrum": spectrum,
        "errors": errors,
    }
    metrics = {"rps": rps, "cpu_us_per_req": 25.0 * scale + trial / 10}
    metrics.update({f"p{p:g}": int(v * scale) for p, v in pct.items() if p not in (75, 90)})
    return RunRecord(
        leg=leg,
        trial=trial,
        position=position,
        arm=arm,
        warmup=warmup,
        backend="epoll",
        port=3000,
        started_at="2026-11-29T21:00:00+00:00",
        wall_s=2.0,
        wrk_argv=["wrk", "-t2", "-c64", "-d2s"],
        wrk=wrk,
        server_cpu_s=requests * 25e-6,
        wrk_cpu_s=2.5,
        self_cpu_s=0.01,
        machine_busy_s=6.0,
        steal_s=0.0,
        other_cpu_s=0.3 if "polluted" in flags else 0.01,
        other_cores=0.1 if "polluted" in flags else 0.003,
        metrics=metrics,
        flags=list(flags),
    )


#: A small traffic file (tailjob.workloads.read_traffic): a few pipelining clients that cost the server,
#: a few open-loop ones that do not.
SMALL_TRAFFIC = """\
[batch]
connections = 4
loop = "closed"
depth = 4
service_us = 200

[web]
connections = 4
loop = "open"
rate = 1000
schedule = "constant"
"""


def stopped_after_the_first_run(
    cmd: list[str], signum: int, cwd: Path | None = None, *, until_it_ends: bool = False
) -> tuple[int, str]:
    """Run the job ``cmd``, send ``signum`` once its progress line says run 1 finished (a run is kept
    then); its exit code and stderr.  ``until_it_ends``: send it again and again until the job exits
    (a CI's timeout that signals the job and its process group too: the later ones reach it while it
    stops its servers and writes what it kept)."""
    import signal
    import subprocess

    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # A shell's background job (and an xdist worker) ignores SIGINT, and a child inherits that:
        # the job would never see Ctrl-C.  A terminal's Ctrl-C finds the default disposition.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("run 1/"):
                break
        proc.send_signal(signum)
        while until_it_ends and proc.poll() is None:
            proc.send_signal(signum)
            try:
                proc.wait(timeout=0.005)  # (bounds the loop's rate; the exit ends it)
            except subprocess.TimeoutExpired:
                pass
        rest = proc.stderr.read()
        return proc.wait(timeout=120), "".join(lines) + rest
    finally:
        proc.kill()
        if proc.stderr is not None:
            proc.stderr.close()
