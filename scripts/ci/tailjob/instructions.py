"""The instruction tier: user-space instructions per request, counted by callgrind, split by component.

Role
----
CPU time per request on a shared machine moves by 20 % from run to run; the
instructions a server executes for a fixed sequence of requests do not.  This
measure starts one server of the ``--peers`` comparison (the bench server on a
backend, or the asyncio peer) under ``valgrind --tool=callgrind``, sends it a
fixed number of keep-alive ``GET /`` requests from this process, and divides
the instructions callgrind counted by the requests.

What makes the count repeat (``same count twice within 0.5 %``):

* **One request in flight.**  The client sends a request on one of
  ``connections`` keep-alive connections in turn and reads the whole answer
  before the next, so every round of the server carries exactly one request,
  however slow valgrind makes it.  (wrk's batches depend on timing: how many
  requests a round finds is the one thing the machine's load changes.)  The
  round's fixed cost is therefore charged in full to each request; a server
  under ``wrk -c64`` spreads it over a batch.
* **The window.**  The counters are zeroed (``callgrind_control --zero``)
  after a warm-up of the same requests, while the server waits for the next
  one, and dumped (``--dump``) after the last answer.  The few instructions
  the server runs between sending the last answer and the dump (its re-arm
  and the next wait) are the only part that races, under 0.1 % at the default
  count.
* **No timers, fixed hashing.**  ``CWIST_HTTP_KEEP_ALIVE_TIMEOUT=0`` unless
  set (an idle timer fires by wall clock, and valgrind stretches the wall
  clock), and ``PYTHONHASHSEED=0``.
* **No path chosen by the wall clock.**  Unless set, ``CWIST_REACTOR_TAIL_US=1``
  (every event has aged by its delivery, so each round takes the aged path, the
  age-based rule's; at the default 3500 whether an event aged depends on how
  far valgrind stretched the round) and ``CWIST_REACTOR_ROUND_BUDGET_US=0``
  (io_uring's mid-round submit fires by wall time).  Two counts under load
  differed by 1.2 % before these were fixed.

What it counts: every user-space instruction of the server process (the
Python interpreter, httptools, uring-api, libc), none of the kernel's.  A
syscall is a handful of user-space instructions however long the kernel
takes: io_uring's saving in system calls shows in CPU time, not here.

Components
----------
Callgrind attributes instructions to C functions, not to Python functions:
3.11's interpreter runs Python calls inside one ``_PyEval_EvalFrameDefault``.
So the table splits a request by the C functions its parts end in
(:data:`COMPONENTS`: inclusive cost, so a component holds what it calls,
Python callbacks included) and leaves the rest, the interpreter running the
reactor's round, the dispatch, the connection's state machine and the route,
as one row, ``python``.  That row callgrind cannot split.

The whole table (:data:`ROWS`: reactor round, dispatch walk, backend
wait/report, arm, HTTP parse, route, send, then recv, connection, clock,
other) puts each C component in its row and spreads the ``python`` row over
the rows in proportion to the Python bytecodes each part runs per request
(:func:`bytecode_shares`: ``benchmarks/bytecodes.py`` on the same server,
path and knobs, by :data:`PYTHON_ROWS`).  Its Python part is an estimate (a
bytecode's cost varies: a call or an allocation costs more than a load); the
total, the C components and the gate are exact.

Gate
----
``compare`` puts each server's instructions per request beside a baseline (a
small JSON, :data:`BASELINE`, written by ``--write-baseline``): more than
:data:`GATE_LIMIT` (+2 %) is a ``regression``, less than -2 % a ``gain``, else
``equivalent``.  The count is deterministic, so no bootstrap: one count per
server is the verdict.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tailreactor.backends import io_uring_refused as _io_uring_refused

from .peers import make_server, servers
from .server import ServerError

REPO = Path(__file__).resolve().parents[3]
#: The servers counted by default (uvloop's loop is C: its count would say little about ours).
SERVERS = ("bench-epoll", "bench-io_uring", "asyncio")
#: The committed baseline the gate compares with.
BASELINE = REPO / "benchmarks" / "results" / "instructions-baseline.json"
#: The gate's bound: instructions per request more than this fraction above the baseline.
GATE_LIMIT = 0.02
#: Defaults: requests counted, keep-alive connections they rotate over, warm-up requests.
REQUESTS, CONNECTIONS, WARMUP = 1000, 8, 200
REQUEST = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
#: Knobs this measure sets unless the environment does (module docstring).
DEFAULT_KNOBS = {
    "CWIST_HTTP_KEEP_ALIVE_TIMEOUT": "0",
    "CWIST_REACTOR_TAIL_US": "1",
    "CWIST_REACTOR_ROUND_BUDGET_US": "0",
}

#: Components of a request: (name, the C functions it is the inclusive cost of, as a regular
#: expression on callgrind's function names).  A call into one of them from a function outside
#: every component counts for it (:func:`attribute`).
COMPONENTS: tuple[tuple[str, str], ...] = (
    ("backend wait", r"select_epoll_poll|UringApiRing_wait"),
    ("arm", r"select_epoll_(register|modify|unregister)|UringApiRing_prepare_\w+|fcntl_fcntl"),
    ("recv", r"sock_recv(_into)?"),
    ("HTTP parse", r"__pyx_pw_9httptools_6parser_6parser_10HttpParser_\d+feed_data"),
    ("send", r"sock_send(all)?"),
    ("clock", r"time_(monotonic|perf_counter)(_ns)?"),
)


#: The rows of the whole table (:meth:`Count.split`): the parts of a request, then what is left.
ROWS = (
    "reactor round",
    "dispatch walk",
    "backend wait/report",
    "arm",
    "HTTP parse",
    "route",
    "send",
    "recv",
    "connection",
    "clock",
    "other",
)
#: The row each C component of :data:`COMPONENTS` is part of.
C_ROW = {
    "backend wait": "backend wait/report",
    "arm": "arm",
    "recv": "recv",
    "HTTP parse": "HTTP parse",
    "send": "send",
    "clock": "clock",
}
#: Python code -> row, by (file path part, names, row); the first match wins.  A name is a
#: qualified name (``Reactor._arm``), a class (``Due.``: its methods) or a method of any class
#: (``rearm``); no names: every function of the file.  Row None: code that runs inside httptools'
#: ``feed_data`` (its callbacks), whose instructions callgrind's HTTP parse row holds.
PYTHON_ROWS: tuple[tuple[str, tuple[str, ...], str | None], ...] = (
    (
        "tailreactor/reactor.py",
        ("Reactor._dispatch", "Reactor._between", "Reactor._harvest", "Due."),
        "dispatch walk",
    ),
    ("tailreactor/reactor.py", ("Reactor.arm", "Reactor.arm_recv", "Reactor._arm"), "arm"),
    ("tailreactor/dispatch.py", (), "dispatch walk"),
    ("tailreactor/backends/", ("rearm", "arm", "arm_recv", "_register", "_operation"), "arm"),
    ("tailreactor/backends/", (), "backend wait/report"),
    (
        "tailreactor/http/request.py",
        ("on_message_begin", "on_url", "on_header", "on_headers_complete", "on_body", "on_message_complete"),
        None,
    ),
    ("tailreactor/http/request.py", (), "HTTP parse"),
    ("tailreactor/http/routes.py", (), "route"),
    ("tailreactor/http/connection.py", ("Connection._send",), "send"),
    ("tailreactor/http/", (), "connection"),
    ("tailreactor/", (), "reactor round"),  # the round, posts, timers, interrupts
    ("peers/asyncio_server.py", (), "connection"),
    ("asyncio/selector_events.py", ("_SelectorSocketTransport.write", "_SelectorTransport.write"), "send"),
    ("asyncio/selector_events.py", ("BaseSelectorEventLoop._process_events",), "dispatch walk"),
    ("asyncio/selector_events.py", (), "connection"),  # the transport's read path
    ("asyncio/transports.py", (), "connection"),
    ("asyncio/events.py", ("Handle._run",), "dispatch walk"),
    ("asyncio/base_events.py", ("BaseEventLoop._add_callback",), "dispatch walk"),
    ("asyncio/", (), "reactor round"),
    ("/selectors.py", (), "backend wait/report"),
)


def python_component(filename: str, qualname: str) -> str | None:
    """The row (:data:`ROWS`) a Python function's bytecodes belong to (:data:`PYTHON_ROWS`), or None
    for the parser's callbacks (inside callgrind's HTTP parse row); ``other`` when nothing matches."""
    path = filename.replace(os.sep, "/")
    for part, prefixes, row in PYTHON_ROWS:
        if part in path:
            if not prefixes:
                return row
            method = qualname.rsplit(".", 1)[-1]
            for name in prefixes:
                if (
                    qualname == name
                    or (name.endswith(".") and qualname.startswith(name))
                    or ("." not in name and method == name)
                ):
                    return row
    return "other"


def bytecode_shares(
    name: str, *, cycles: int = 200, env: Mapping[str, str] | None = None
) -> dict[str, float]:
    """Fractions of the Python bytecodes server ``name`` runs per request outside the parser, by row.

    Counted by ``benchmarks/bytecodes.py`` in this process, one client (one request per round, as
    the count), with the count's knobs (:data:`DEFAULT_KNOBS`) and a clock that moves 2 us per read,
    so that every event has aged by its delivery as under callgrind at ``CWIST_REACTOR_TAIL_US=1``.
    Raises :class:`MeasureError` when the server cannot run here.
    """
    import importlib.util

    spec = importlib.util.spec_from_file_location("_tailjob_bytecodes", REPO / "benchmarks" / "bytecodes.py")
    assert spec is not None and spec.loader is not None
    bytecodes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bytecodes)
    ambient = {**DEFAULT_KNOBS, **(os.environ if env is None else env)}
    try:
        counts, _requests = bytecodes.measure(name, 1, cycles, 2, env=ambient)
    except Exception as exc:  # noqa: BLE001 (io_uring unavailable, a bad knob: one line)
        raise MeasureError(f"{name}: bytecodes: {exc}") from None
    by_row: dict[str, int] = {}
    for (filename, qualname), n in counts.items():
        row = python_component(filename, qualname)
        if row is not None:
            by_row[row] = by_row.get(row, 0) + n
    total = sum(by_row.values())
    return {row: n / total for row, n in by_row.items()} if total else {}


class MeasureError(RuntimeError):
    """A count could not be taken (one line, for the job to print)."""


@dataclass(frozen=True)
class Count:
    """One server's count: ``instructions`` over ``requests``, and per component (instructions)."""

    server: str
    requests: int
    instructions: int
    components: dict[str, int] = field(default_factory=dict)

    @property
    def per_request(self) -> float:
        return self.instructions / self.requests

    def table(self) -> dict[str, float]:
        """Instructions per request by component, the rest as ``python``, in :data:`COMPONENTS` order."""
        rows = {name: self.components.get(name, 0) / self.requests for name, _ in COMPONENTS}
        rows["python"] = (self.instructions - sum(self.components.values())) / self.requests
        return rows

    def split(self, shares: Mapping[str, float]) -> dict[str, float]:
        """Instructions per request by :data:`ROWS`: each C component in its row, and the
        ``python`` row spread over the rows by ``shares`` (:func:`bytecode_shares`; what they
        leave goes to ``other``).  An estimate for the Python part: a bytecode's cost varies."""
        table = self.table()
        python = table.pop("python")
        rows = dict.fromkeys(ROWS, 0.0)
        for comp, value in table.items():
            rows[C_ROW[comp]] += value
        for row, share in shares.items():
            rows[row] += python * share
        rows["other"] += python * (1 - sum(shares.values()))
        return rows


@dataclass(frozen=True)
class Verdict:
    server: str
    base: float
    now: float
    verdict: str  # gain, regression, equivalent

    @property
    def change(self) -> float:
        return self.now / self.base - 1


def missing_tool() -> str | None:
    """One line naming what this measure needs and how to install it, or None."""
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            return f"{tool} is not on PATH (install it: apt-get install valgrind)"
    return None


def peer_of(name: str):
    """The --peers entry of a server name of :data:`SERVERS` (``bench-<backend>`` or a peer's key)."""
    key = "tailreactor-" + name.split("-", 1)[1] if name.startswith("bench-") else name
    for p in servers(nginx=None):
        if p.key == key:
            return p
    raise ValueError(f"server {name!r}: accepted {', '.join(SERVERS)}")


class Client:
    """``connections`` keep-alive connections, one request in flight in all (module docstring)."""

    def __init__(self, port: int, connections: int):
        self.socks = [socket.create_connection(("127.0.0.1", port), timeout=120) for _ in range(connections)]
        self.sent = 0

    def request(self) -> None:
        sock = self.socks[self.sent % len(self.socks)]
        self.sent += 1
        sock.sendall(REQUEST)
        data = b""
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                raise MeasureError("the server closed a keep-alive connection")
            data += chunk
            head, sep, body = data.partition(b"\r\n\r\n")
            if sep:
                m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
                if len(body) >= (int(m[1]) if m else 0):
                    if not head.startswith(b"HTTP/1.1 200"):
                        raise MeasureError(f"the server answered {head.splitlines()[0]!r}")
                    return

    def close(self) -> None:
        for s in self.socks:
            s.close()


def _control(option: str, pid: int) -> None:
    subprocess.run(["callgrind_control", option, str(pid)], check=True, capture_output=True, timeout=120)


def count(
    name: str,
    *,
    requests: int = REQUESTS,
    connections: int = CONNECTIONS,
    warmup: int = WARMUP,
    env: Mapping[str, str] | None = None,
) -> Count:
    """Count server ``name`` over ``requests`` requests (module docstring).  Raises :class:`MeasureError`."""
    ambient = {**DEFAULT_KNOBS, **(os.environ if env is None else env), "PYTHONHASHSEED": "0"}
    with tempfile.TemporaryDirectory(prefix="instructions-") as tmp:
        out = Path(tmp) / "callgrind.out"
        server = make_server(peer_of(name), ambient=ambient, host="127.0.0.1", cpus=None, nginx=None)
        server.run_under = [
            "valgrind",
            "--tool=callgrind",
            "--dump-instr=no",
            "--dump-line=no",
            f"--callgrind-out-file={out}",
        ]
        server.start_timeout_s = 300.0  # Python starts slowly under valgrind
        try:
            server.start()
        except ServerError as exc:
            raise MeasureError(f"{name}: {exc}") from None
        try:
            assert server.port is not None  # start() chose it
            client = Client(server.port, connections)
            try:
                for _ in range(warmup):
                    client.request()
                _control("--zero", server.pid)
                for _ in range(requests):
                    client.request()
                _control("--dump", server.pid)
            finally:
                client.close()
        except (OSError, subprocess.SubprocessError) as exc:
            raise MeasureError(f"{name}: {exc}") from None
        finally:
            # The dump is written: no need for a clean exit (under valgrind a server waiting
            # in io_uring_enter does not see SIGTERM in time).
            server.stop(timeout_s=2.0)
        dumps = sorted(Path(tmp).glob("callgrind.out.*"))  # the explicit dump, not the exit one
        if not dumps:
            raise MeasureError(f"{name}: callgrind wrote no dump file")
        total, parts = attribute(dumps[0])
        return Count(name, requests, total, parts)


_FN = re.compile(r"^(?:c?fn)=\((\d+)\)(?: (.*))?$")


def attribute(dump: Path) -> tuple[int, dict[str, int]]:
    """(total, instructions by component) of one callgrind dump (``--dump-instr=no``).

    A component's cost is the inclusive cost of the calls into one of its
    functions made from a function outside every component: a component's
    own calls (into itself, or into another component) are already in that
    cost.  Callgrind records caller/callee pairs, not whole stacks, so a
    component function reached *through* an outside function called by
    another component (say, the clock read by a Python callback of the HTTP
    parser) would count twice; on the request path measured here none is
    (the parser's callbacks read no clock, send nothing), and
    :meth:`Count.table` would show it as a negative ``python`` row.
    """
    patterns = [(comp, re.compile(rx)) for comp, rx in COMPONENTS]
    owner: dict[str, str | None] = {}  # function name -> its component, or None

    def component_of(fname: str) -> str | None:
        if fname not in owner:
            base = fname.split("'")[0]  # callgrind appends 'N to recursion levels
            owner[fname] = next((comp for comp, rx in patterns if rx.fullmatch(base)), None)
        return owner[fname]

    names: dict[str, str] = {}
    total = 0
    parts = {comp: 0 for comp, _ in COMPONENTS}
    current = None  # the component of the function whose lines follow, or None
    callee = None  # the component of the call whose cost line follows
    pending_call = False
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith("summary:") or line.startswith("totals:"):
            total = int(line.split()[1])
            continue
        if line.startswith(("fn=", "cfn=")):
            m = _FN.match(line)
            if m:
                ident, name = m.groups()
                if name is not None:
                    names[ident] = name
                fname = names.get(ident, "")
            else:
                fname = line.split("=", 1)[1]
            comp = component_of(fname)
            if line[0] == "f":
                current = comp
            else:
                callee = comp
            continue
        if line.startswith("calls="):
            pending_call = True
            continue
        if not line or not (line[0].isdigit() or line[0] in "+-*"):
            continue
        fields = line.split()
        cost = int(fields[1]) if len(fields) > 1 else 0
        if pending_call:
            pending_call = False
            if callee is not None and current is None:
                parts[callee] += cost
    return total, parts


def load_baseline(path: Path = BASELINE) -> dict[str, float]:
    """Server -> instructions per request of the committed baseline; {} when there is none."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    return {k: float(v["per_request"]) for k, v in data.get("servers", {}).items()}


def baseline_requests(path: Path = BASELINE) -> set[int]:
    """The request counts the baseline's servers were counted over (empty when it does not say)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return set()
    return {int(v["requests"]) for v in data.get("servers", {}).values() if "requests" in v}


def write_baseline(
    counts: list[Count],
    path: Path = BASELINE,
    *,
    commit: str = "",
    shares: Mapping[str, Mapping[str, float]] | None = None,
) -> None:
    """Write the counts as JSON: per server its total, its C table and, with ``shares``, its rows."""
    servers: dict[str, dict] = {}
    for c in counts:
        entry: dict = {
            "per_request": round(c.per_request, 1),
            "requests": c.requests,
            "table": {k: round(v, 1) for k, v in c.table().items()},
        }
        if shares is not None and c.server in shares:
            entry["rows"] = {k: round(v, 1) for k, v in c.split(shares[c.server]).items()}
        servers[c.server] = entry
    data = {
        "what": "callgrind instructions per request (scripts/ci/tailjob/instructions.py)",
        "commit": commit,
        "servers": servers,
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data) + "\n")
    tmp.replace(path)


def compare(counts: list[Count], baseline: Mapping[str, float], limit: float = GATE_LIMIT) -> list[Verdict]:
    """A verdict per counted server the baseline has (module docstring, "Gate")."""
    out = []
    for c in counts:
        base = baseline.get(c.server)
        if base is None:
            continue
        change = round(c.per_request / base - 1, 9)  # exactly +2 % is within the bound
        verdict = "regression" if change > limit else "gain" if change < -limit else "equivalent"
        out.append(Verdict(c.server, base, c.per_request, verdict))
    return out


def render(counts: list[Count], shares: Mapping[str, Mapping[str, float]] | None = None) -> str:
    """A Markdown table: instructions per request by component, one column per server.

    Without ``shares``: callgrind's C components and the ``python`` rest.  With ``shares``
    (server -> :func:`bytecode_shares`): every row of :data:`ROWS` (:meth:`Count.split`).
    """
    cols = [c.server for c in counts]
    lines = ["| component | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    if shares is None:
        tables = [c.table() for c in counts]
        names = [name for name, _ in COMPONENTS] + ["python"]
    else:
        tables = [c.split(shares.get(c.server, {})) for c in counts]
        names = list(ROWS)
    for row in names:
        lines.append(f"| {row} | " + " | ".join(f"{t[row]:,.0f}" for t in tables) + " |")
    lines.append("| **total** | " + " | ".join(f"**{c.per_request:,.0f}**" for c in counts) + " |")
    return "\n".join(lines)


# -- the job's hook: ``tail_latency.py --tier instructions`` ----------------------------------

PROG = "tail_latency"


def _requests(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        import argparse

        raise argparse.ArgumentTypeError(f"{text!r}: accepted a positive integer (default {REQUESTS})")
    return int(text)


def add_options(parser) -> None:
    """The tier's options (the job's ``--tier``, :mod:`tailjob.options`, selects it); shared with the job's ``--gate``, ``--backend``, ``--out``."""
    g = parser.add_argument_group("instruction tier (--tier instructions)")
    g.add_argument(
        "--server",
        action="append",
        choices=SERVERS,
        help="with --tier instructions: a server to count (repeatable; default: all, or the "
        "bench server on --backend and asyncio)",
    )
    g.add_argument(
        "--requests",
        type=_requests,
        default=REQUESTS,
        help=f"with --tier instructions: requests counted per server ({REQUESTS})",
    )
    g.add_argument(
        "--baseline",
        type=Path,
        default=BASELINE,
        help="with --tier instructions: the baseline JSON (default: "
        "benchmarks/results/instructions-baseline.json)",
    )
    g.add_argument(
        "--write-baseline",
        action="store_true",
        help="with --tier instructions: store this count as the baseline",
    )


def _fail(message: str, code: int) -> int:
    import sys

    print(f"{PROG}: error: {message}", file=sys.stderr)
    return code


def tier_options_given(args) -> bool:
    """Whether an option of this tier was given (with ``--tier wall`` that is an error)."""
    return bool(args.server or args.write_baseline or args.requests != REQUESTS or args.baseline != BASELINE)


def main_tier(args) -> int:
    """Count every server, print the table and the verdicts, write ``<out>/results/<stem>-instructions.*``.

    Exit 0, or 1 with ``--gate`` and a ``regression``; 2 for a bad option; 3 for a missing tool
    or kernel feature, or when a count fails (one line).
    """
    import sys
    from datetime import datetime, timezone

    if args.tier != "instructions":
        given = next(
            name
            for flag, name in (
                (args.server, "--server"),
                (args.write_baseline, "--write-baseline"),
                (args.requests != REQUESTS, "--requests"),
                (True, "--baseline"),
            )
            if flag
        )
        return _fail(f"{given} applies to --tier instructions", 2)
    if args.write_baseline and args.gate:
        return _fail(
            "--write-baseline stores this count; --gate compares it with the stored one: choose one", 2
        )
    for flag, name in (
        (args.peers, "--peers"),
        (args.calibrate is not None, "--calibrate"),
        (args.ab, "--ab"),
        (args.a is not None or args.b is not None, "--a/--b"),
    ):
        if flag:
            return _fail(f"{name} applies to --tier wall, not to --tier instructions", 2)
    baseline = load_baseline(args.baseline)
    if args.gate and not baseline:
        return _fail(
            f"--baseline {args.baseline}: no baseline there to gate on (write one with --write-baseline)", 2
        )
    counted = baseline_requests(args.baseline)
    if baseline and counted and counted != {args.requests}:
        # Per-request figures of different counts differ by up to 0.5 % (warm-up, the
        # interpreter's caches): a verdict compares equal counts.
        if args.gate:
            return _fail(
                f"--requests {args.requests}: the baseline counted "
                f"{', '.join(map(str, sorted(counted)))} requests per server; gate on the same count",
                2,
            )
        baseline = {}
    chosen = list(
        args.server or [s for s in SERVERS if not args.backend or s in (f"bench-{args.backend}", "asyncio")]
    )
    missing = missing_tool()
    if missing:
        return _fail(f"--tier instructions needs callgrind: {missing}", 3)
    if "bench-io_uring" in chosen:
        refused = _io_uring_refused()
        if refused is not None:
            if args.server or args.backend == "io_uring":
                return _fail(f"io_uring asked for but unavailable here: {refused}", 3)
            print(f"{PROG}: bench-io_uring skipped: {refused}", file=sys.stderr, flush=True)
            chosen.remove("bench-io_uring")
    counts = []
    for name in chosen:
        try:
            c = count(name, requests=args.requests)
        except MeasureError as exc:
            return _fail(str(exc), 3)
        print(
            f"{name}: {c.per_request:,.0f} instructions/request ({c.instructions:,} over "
            f"{c.requests:,} requests)",
            flush=True,
        )
        counts.append(c)
    print()
    print(render(counts))
    # The whole table: the python row split by each server's bytecodes (a few seconds each).
    shares: dict[str, dict[str, float]] = {}
    for c in counts:
        try:
            shares[c.server] = bytecode_shares(c.server)
        except MeasureError as exc:
            print(f"{PROG}: no split of the python row for {exc}", file=sys.stderr, flush=True)
    if shares:
        print()
        print(
            "By part of the request (C components by callgrind; the python row split by bytecodes, "
            "benchmarks/bytecodes.py):"
        )
        print()
        print(render(counts, shares))
    verdicts = compare(counts, baseline)
    if verdicts:
        print()
        print(f"Against {args.baseline.name} (a change over +/-{GATE_LIMIT:.0%} is a regression/gain):")
        for v in verdicts:
            print(f"- {v.server}: {v.base:,.0f} -> {v.now:,.0f} ({v.change:+.2%}): {v.verdict}")
    stem = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-instructions"
    results = args.out / "results"
    results.mkdir(parents=True, exist_ok=True)
    commit = _commit()
    whole = f"\n\nBy part (the python row split by bytecodes):\n\n{render(counts, shares)}" if shares else ""
    (results / f"{stem}.md").write_text(
        f"Instructions per request, commit {commit or 'unknown'}, "
        f"{args.requests} requests per server\n\n{render(counts)}{whole}\n"
    )
    write_baseline(counts, results / f"{stem}.json", commit=commit, shares=shares)
    print(f"\nFiles:\n- {results / (stem + '.md')}\n- {results / (stem + '.json')}")
    if args.write_baseline:
        write_baseline(counts, args.baseline, commit=commit, shares=shares)
        print(f"- {args.baseline} (the new baseline)")
    if args.gate and any(v.verdict == "regression" for v in verdicts):
        return _fail("--gate: instructions per request regressed (see the verdicts above)", 1)
    return 0


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except OSError:
        return ""
    return out.stdout.strip()
