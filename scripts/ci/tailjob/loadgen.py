"""The job's own load client: open- or closed-loop HTTP load, latency per client class.

wrk is closed loop: a stalled server receives fewer requests and the stall hides itself
(coordinated omission).  This client sends on a schedule and measures every latency from the
request's **intended** send time (wrk2's method), so a stall's wait is in the latency of every
request scheduled during it.  What a run is and reports: :mod:`tailjob.loadspec`.

Run: ``python -m tailjob.loadgen --url http://127.0.0.1:3000/ --spec JSON`` (:func:`command`):
exit 0 with the ``TAILREACTOR_LOAD`` line, 1 when a connection cannot be made or the run fails,
2 for a bad spec (one line on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .loadspec import (
    OUTPUT_PREFIX,
    ClassStats,
    LoadSpec,
    SpecError,
    _clamped,
    _part,
    _times,
    merge,
    parse_output,
    report,
    set_offered,
    set_offered_due,
)

READY_LINE = "TAILREACTOR_LOAD_READY"
"""What a class process of several prints once connected (``--start-on-stdin``)."""
_CI_DIR = Path(__file__).resolve().parents[1]


class ClientConnection:
    """What one keep-alive connection of a class does, whatever carries its bytes and keeps its time.

    Open loop: one request in flight, sent at its intended time (or as soon as the last is answered);
    closed loop: ``depth`` requests pipelined, then a think time.  ``run`` gives ``spec``,
    ``start_ns``, ``end_ns`` and ``next_seq()``; a subclass gives the transport and the clock:
    :meth:`now_ns`, :meth:`write`, :meth:`at` (send at an intended time, now or later) and
    :meth:`finish` -- the live client's on asyncio, and the virtual-time tier's."""

    def __init__(self, run, stats: ClassStats, index: int):
        import httptools

        self.run, self.stats, self.index, self.cls = run, stats, index, stats.cls
        self.parser = httptools.HttpResponseParser(self)
        self.in_flight: collections.deque[tuple[bytes, int]] = collections.deque()  # (seq, intended ns)
        self.body = bytearray()
        self.schedule: Iterator[int] = iter(())  # open loop: the intended times, drawn in start()
        self.next_ns: int | None = None  # open loop: the next intended time not yet sent
        self.rng = random.Random(f"{run.spec.seed}/{self.cls.name}/{index}")

    def now_ns(self) -> int:
        raise NotImplementedError

    def write(self, wire: bytes) -> None:
        raise NotImplementedError

    def at(self, intended_ns: int, count: int, now: int) -> None:
        """Send ``count`` requests due at ``intended_ns``: now if that is not later than ``now``."""
        raise NotImplementedError

    def finish(self) -> None:
        """This connection owes nothing more (its schedule ran out, or the run ended)."""
        raise NotImplementedError

    def record(self, us: int) -> None:
        self.stats.record(us)

    def start(self) -> None:
        now, cls = self.now_ns(), self.cls
        if cls.loop == "open":
            self.schedule = _times(
                self.run.spec, cls, self.index, self.run.start_ns, self.run.end_ns, self.rng
            )
            self.next_ns = next(self.schedule, None)
            self._next_open(now)
        else:
            self.stats.offered += cls.depth
            self.at(self.run.start_ns, cls.depth, now)  # the first batch at the run's start

    # httptools callbacks
    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        now = self.now_ns()
        seq, intended = self.in_flight.popleft()
        st = self.stats
        st.answered += 1
        st.in_window += now <= self.run.end_ns
        self.record((now - intended + 999) // 1000)
        if self.parser.get_status_code() >= 400:
            st.errors["status"] += 1
        elif bytes(self.body) != seq:
            st.errors["mismatch"] += 1
        self.body.clear()
        if self.cls.loop == "open":
            self._next_open(now)
        elif not self.in_flight:
            self._next_batch(now)

    def send(self, intended_ns: int, count: int) -> None:
        seqs = [self.run.next_seq() for _ in range(count)]
        path = self.cls.path.encode()
        self.in_flight.extend((s, intended_ns) for s in seqs)
        self.stats.sent += count
        self.write(b"".join(b"GET %s%s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % (path, s) for s in seqs))

    def fire(self, intended_ns: int, count: int) -> None:
        """The time came for a request due at ``intended_ns`` on an idle connection."""
        if self.cls.loop == "open":
            self.next_ns = next(self.schedule, None)
        self.send(intended_ns, count)

    def _next_open(self, now: int) -> None:
        if self.in_flight:
            return
        if self.next_ns is None:
            self.finish()
        elif self.next_ns <= now:  # its time came while the last one was in flight: send it now
            intended, self.next_ns = self.next_ns, next(self.schedule, None)
            self.send(intended, 1)
        else:
            self.at(self.next_ns, 1, now)

    def _next_batch(self, now: int) -> None:
        if now >= self.run.end_ns:
            self.finish()
            return
        think = self.rng.expovariate(1.0) * self.cls.think_ms * 1e6 if self.cls.think_ms else 0
        intended = round(now + think)
        if intended >= self.run.end_ns:
            self.finish()
            return
        self.stats.offered += self.cls.depth
        if think:
            self.at(intended, self.cls.depth, now)
        else:
            self.send(intended, self.cls.depth)

    def owed(self) -> int:
        """Requests offered to this connection and never answered (in flight, or never sent)."""
        unsent = (
            1 + sum(1 for _ in self.schedule) if self.cls.loop == "open" and self.next_ns is not None else 0
        )
        return len(self.in_flight) + unsent


class _Connection(asyncio.Protocol, ClientConnection):
    """A :class:`ClientConnection` on asyncio: monotonic time, timers, a TCP transport."""

    def __init__(self, run: _Run, stats: ClassStats, index: int):
        ClientConnection.__init__(self, run, stats, index)
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.done = asyncio.get_running_loop().create_future()
        self.timer: asyncio.TimerHandle | None = None
        self.read_ns = 0  # when the read being parsed began (a closed loop's turnaround starts there)

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.read_ns = time.monotonic_ns()
        try:
            self.parser.feed_data(data)
        except Exception:  # noqa: BLE001 (httptools.HttpParserError or a callback's: the stream is lost)
            self.stats.errors["read"] += 1
            self._lose()

    def connection_lost(self, exc) -> None:
        if not self.done.done():
            finished = self.cls.loop == "open" and self.next_ns is None and not self.in_flight
            if not finished:  # it still owed answers
                self.stats.errors["read"] += 1
            self._lose()

    def now_ns(self) -> int:
        return time.monotonic_ns()

    def write(self, wire: bytes) -> None:
        assert self.transport is not None  # connection_made() came first
        self.transport.write(wire)

    def fire(self, intended_ns: int, count: int) -> None:
        self.timer = None
        self.stats.lag.record_value(_clamped((time.monotonic_ns() - intended_ns + 999) // 1000))
        super().fire(intended_ns, count)

    def at(self, intended_ns: int, count: int, now: int) -> None:
        delay = (intended_ns - now) / 1e9
        if delay <= 0:
            self.fire(intended_ns, count)
        else:
            self.timer = asyncio.get_running_loop().call_later(delay, self.fire, intended_ns, count)

    def _next_batch(self, now: int) -> None:
        sent = self.stats.sent
        super()._next_batch(now)
        if self.stats.sent > sent and not self.cls.think_ms:  # the next batch went out on this read
            self.stats.turnaround.record_value(_clamped((time.monotonic_ns() - self.read_ns + 999) // 1000))

    def finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)

    def _lose(self) -> None:
        self.lost = True
        if self.timer is not None:
            self.timer.cancel()
        if self.transport is not None:
            self.transport.abort()
        self.finish()


class _Run:
    """One process's share of a run, from its start for the spec's duration.  The start is 20 ms after
    connecting, or with ``start_from_stdin`` (one process of several) the monotonic ns the supervisor
    writes on stdin once every process has printed :data:`READY_LINE` (connected)."""

    def __init__(self, spec: LoadSpec, host: str, port: int, start_from_stdin: bool = False):
        self.spec, self.host, self.port, self._from_stdin = spec, host, port, start_from_stdin
        self._seq = 0
        self.start_ns = self.end_ns = self.connected_ns = 0

    def next_seq(self) -> bytes:
        self._seq += 1
        return b"%d" % self._seq

    async def _connect(self, stats: list[ClassStats]) -> list[_Connection]:
        loop, conns = asyncio.get_running_loop(), []
        for st in stats:
            for i in range(st.cls.connections):
                try:
                    _, proto = await loop.create_connection(
                        functools.partial(_Connection, self, st, i), self.host, self.port
                    )
                except OSError as e:
                    raise ConnectionError(f"connect to {self.host}:{self.port} failed ({e})") from None
                conns.append(proto)
        return conns

    def _start(self) -> None:
        self.connected_ns = time.monotonic_ns()
        if self._from_stdin:
            print(READY_LINE, flush=True)
            line = sys.stdin.readline()  # blocks the loop: nothing is due before the start
            if not line.strip().isdigit():
                raise ConnectionError("the supervisor gave no start time")
            self.start_ns = int(line)
        else:
            self.start_ns = self.connected_ns + 20_000_000  # 20 ms to get every connection going
        self.end_ns = self.start_ns + round(self.spec.duration_s * 1e9)

    async def go(self) -> dict:
        stats = [ClassStats(c) for c in self.spec.classes]
        conns = await self._connect(stats)
        self._start()
        set_offered(self.spec, stats, self.start_ns, self.end_ns)
        for c in conns:
            c.start()
        cpu0 = time.process_time()
        deadline = (self.end_ns - time.monotonic_ns()) / 1e9 + self.spec.drain_s
        await asyncio.wait([c.done for c in conns], timeout=max(deadline, 0.1))
        busy = (time.process_time() - cpu0) / max((time.monotonic_ns() - self.start_ns) / 1e9, 1e-3)
        set_offered_due(self.spec, stats, self.start_ns, self.end_ns)
        for c in conns:
            owed = c.owed()
            if owed and not c.lost:
                c.stats.errors["timeout"] += owed
            if c.timer is not None:
                c.timer.cancel()
            if c.transport is not None:
                c.transport.close()
        doc = report(stats, self.spec.duration_s)
        names = [st.cls.name for st in stats]
        doc["processes"] = [
            {"classes": names, "busy": busy, "connected_ns": self.connected_ns, "start_ns": self.start_ns}
        ]
        doc["parts"] = [_part(st) for st in stats]
        return doc


def _supervise(spec: LoadSpec, url: str) -> tuple[int, dict | str]:
    """Run each class in a process of its own (a busy class cannot delay another's timers), all from
    one start 20 ms after the last has connected; merge their documents.  Returns ``(0, document)``
    or ``(exit status, the failing process's last stderr line)``."""
    procs = [
        subprocess.Popen(
            [*command(url, LoadSpec((cls,), spec.duration_s, spec.seed, spec.drain_s)), "--start-on-stdin"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=client_env(),
        )
        for cls in spec.classes
    ]
    # Each process prints the ready line once connected (or exits: EOF, its error follows below).
    ready = [p.stdout is not None and p.stdout.readline().strip() == READY_LINE for p in procs]
    start_ns = time.monotonic_ns() + 20_000_000
    for p, ok in zip(procs, ready):
        assert p.stdin is not None
        try:
            p.stdin.write(f"{start_ns if all(ready) else 'abort'}\n" if ok else "")
            p.stdin.flush()
        except BrokenPipeError:
            pass
    results = [p.communicate() for p in procs]  # (closes stdin)
    # A process that failed before it was ready first: the others were only told to give up.
    for p, (_, err), _ok in sorted(zip(procs, results, ready), key=lambda r: r[2]):
        if p.returncode != 0:
            return p.returncode, err.strip().splitlines()[-1] if err.strip() else f"exit {p.returncode}"
    return 0, merge([parse_output(out) for out, _ in results], spec)


def command(url: str, spec: LoadSpec | None, *, cpus: str | None = None) -> list[str]:
    """argv of one client run (``spec`` None: without ``--spec``); ``cpus`` pins it with taskset."""
    cmd = [sys.executable, "-m", "tailjob.loadgen", "--url", url]
    if spec is not None:
        cmd += ["--spec", spec.to_json()]
    return ["taskset", "-c", cpus, *cmd] if cpus is not None else cmd


def client_env() -> dict:
    """The client's environment: this process's with ``scripts/ci`` on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_CI_DIR), env.get("PYTHONPATH", "")) if p)
    return env


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tailjob.loadgen", description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="http://127.0.0.1:PORT/")
    p.add_argument("--spec", required=True, help="the LoadSpec as JSON")
    p.add_argument(
        "--start-on-stdin",
        action="store_true",
        help="(one process of several) once connected print the ready line, then read the run's "
        "start (monotonic ns) from stdin",
    )
    args = p.parse_args(argv)
    error = "tailjob.loadgen: error: "
    try:
        spec = LoadSpec.from_json(args.spec)
        where = urlsplit(args.url)
        if where.scheme != "http" or not where.hostname or not where.port:
            raise SpecError(f"--url {args.url!r}: accepted http://HOST:PORT/")
    except SpecError as e:
        print(error + str(e), file=sys.stderr)
        return 2
    if len(spec.classes) > 1:
        code, doc = _supervise(spec, args.url)
        if code:
            assert isinstance(doc, str)  # the failing process's stderr
            print(doc if doc.startswith("tailjob.loadgen") else error + doc, file=sys.stderr)
            return code
    else:
        try:
            import uvloop

            run: Callable[[Coroutine[Any, Any, dict]], dict] = uvloop.run
        except ImportError:  # the bench extra is missing: the stdlib loop works too, a little slower
            run = asyncio.run
        try:
            doc = run(_Run(spec, where.hostname, where.port, args.start_on_stdin).go())
        except ConnectionError as e:
            print(error + str(e), file=sys.stderr)
            return 1
    print(OUTPUT_PREFIX + json.dumps(doc, separators=(",", ":")), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
