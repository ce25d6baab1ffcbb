"""Progress while the job runs: which leg and arm, run k of n, time left.

:class:`JobProgress` is the trial loop's ``progress`` callback: a rich bar on stderr when it is a
terminal, and one line per finished run (its headline figures), so a CI log shows every run.  Time
left: the planned durations plus the average overhead per run seen so far (server start/stop).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from . import PROG
from .plan import Leg


def counter(label: str, *, lines: int) -> Callable[[int, int], None]:
    """A ``progress(done, total)`` for runs outside the trial loop (the sim tier, the sweep): on a
    terminal one line rewritten, in a log about ``lines`` lines in all."""
    tty = sys.stderr.isatty()

    def progress(done: int, total: int) -> None:
        if not tty and done != total and done % max(total // lines, 1):
            return
        end = "" if tty and done < total else "\n"
        print(
            f"{chr(13) if tty else ''}{PROG}: {label}: {done}/{total} runs",
            end=end,
            file=sys.stderr,
            flush=True,
        )

    return progress


class JobProgress:
    """Context manager; call it as ``progress(event, info)`` (see run_job)."""

    def __init__(self, legs: list[Leg], *, warmup: bool, arms: int = 2):
        self.console = Console(stderr=True)
        # runs per leg: each arm (or peers server) once per trial, plus the warm-up
        self.plan_s = [leg.duration_s for leg in legs for _ in range(arms * leg.runs + (1 if warmup else 0))]
        self.total = len(self.plan_s)
        self.done = 0
        self.overhead_s: list[float] = []
        self._started = 0.0
        self._bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[left]}"),
            console=self.console,
            transient=True,
            disable=not self.console.is_terminal,
        )
        self._task = self._bar.add_task("starting", total=self.total, left="")

    def __enter__(self) -> JobProgress:
        self._bar.start()
        return self

    def __exit__(self, *exc) -> None:
        self._bar.stop()

    def time_left_s(self) -> float:
        overhead = sum(self.overhead_s) / len(self.overhead_s) if self.overhead_s else 1.0
        remaining = self.plan_s[self.done :]
        return sum(remaining) + overhead * len(remaining)

    def _say(self, text: str) -> None:
        self.console.print(text, highlight=False, markup=False, soft_wrap=True)

    def __call__(self, event: str, info: dict) -> None:
        leg, arm = info["leg"], info["arm"]
        if event == "capacity":
            cap = info["capacity"]
            flags = f"  [{', '.join(cap['flags'])}]" if cap["flags"] else ""
            self._say(
                f"capacity [{leg.name}] arm {arm.key}, closed loop ({' '.join(cap['wrk_argv'])}): "
                f"{cap['rps']:,.0f} req/s{flags}"
            )
            return
        what = "warm-up" if info["warmup"] else f"trial {info['trial'] + 1}/{leg.runs}"
        if event == "run-start":
            self._started = time.monotonic()
            self._bar.update(
                self._task,
                description=f"[{leg.name}] {what}, {arm.key}: {arm.label}",
                left=f"~{self.time_left_s():.0f} s left",
            )
            return
        took = time.monotonic() - self._started
        self.overhead_s.append(max(0.0, took - self.plan_s[self.done]))
        self.done += 1
        self._bar.update(self._task, completed=self.done, left=f"~{self.time_left_s():.0f} s left")
        r = info["record"]
        m = r.metrics
        cpu = f"{m['cpu_us_per_req']:.1f}" if m["cpu_us_per_req"] is not None else "-"
        flags = f"  [{', '.join(r.flags)}]" if r.flags else ""
        if r.classes:  # the load client: each class's achieved rate and p99
            each = (
                f"{name} {c['rps']:,.0f} req/s p99 {_ms(c['p99'], ' ms')}" for name, c in r.classes.items()
            )
            flags = "; " + ", ".join(each) + flags
        self._say(
            f"run {self.done}/{self.total} [{leg.name}] {what} {arm.key} ({arm.label}): "
            f"{m['rps']:,.0f} req/s, p99 {_ms(m['p99'])} ms, server CPU {cpu} us/req, "
            f"other CPU {r.other_cores:.2f} cores{flags}; ~{self.time_left_s():.0f} s left"
        )


def _ms(us: float | None, unit: str = "") -> str:
    return f"{us / 1000:.2f}{unit}" if us is not None else "-"
