"""The instruction tier: user-space instructions per request, counted by callgrind, split by component.

CPU time per request on a shared machine moves by 20 % from run to run; the instructions a server
executes for a fixed sequence of requests do not.  This measure starts one server of the
``peers`` comparison under ``valgrind --tool=callgrind``, sends it a fixed number of keep-alive
``GET /`` requests from this process, and divides the instructions counted by the requests.
What makes the count repeat (the same count twice within 0.5 %):

* **One request in flight**, on ``connections`` keep-alive connections in turn: every round of the
  server carries exactly one request however slow valgrind makes it (wrk's batches depend on
  timing), so the round's fixed cost is charged in full to each request.
* **The window**: the counters are zeroed (``callgrind_control --zero``) after a warm-up, while the
  server waits, and dumped after the last answer; only the server's re-arm and next wait race
  (under 0.1 % at the default count).
* **No timers, fixed hashing, no path chosen by the wall clock** (:data:`DEFAULT_KNOBS`, unless
  set): ``CWIST_HTTP_KEEP_ALIVE_TIMEOUT=0``, ``PYTHONHASHSEED=0``, ``CWIST_REACTOR_TAIL_US=1``
  (every event has aged by its delivery, so each round takes the age-based path) and
  ``CWIST_REACTOR_ROUND_BUDGET_US=0`` (io_uring's mid-round submit fires by wall time).

It counts every user-space instruction of the server process (interpreter, httptools, uring-api,
libc), none of the kernel's: io_uring's saving in system calls shows in CPU time, not here.  The
split by component: :mod:`tailjob.parts`.

Gate: :func:`compare` puts each server's count beside a baseline (:data:`BASELINE`, written by
``--write-baseline``): above :data:`GATE_LIMIT` (+2 %) a ``regression``, below -2 % a ``gain``,
else ``equivalent``.  The count is deterministic: one count per server is the verdict.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from . import PROG, REPO
from . import fail as _fail
from .outputs import files_text, write_files
from .parts import C_ROW, ROWS, python_component, shares_by_row  # noqa: F401
from .peers import make_server, servers
from .plan import PlanError, Unavailable, without_refused_io_uring
from .server import ServerError

#: The servers counted by default (uvloop's loop is C: its count would say little about ours).
SERVERS = ("bench-epoll", "bench-io_uring", "asyncio")
BASELINE = REPO / "benchmarks" / "results" / "instructions-baseline.json"
GATE_LIMIT = 0.02  # the gate's bound above (and below) the baseline
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


def bytecode_shares(
    name: str, *, cycles: int = 200, env: Mapping[str, str] | None = None
) -> dict[str, float]:
    """Fractions of the Python bytecodes server ``name`` runs per request outside the parser, by row.

    Counted by ``benchmarks/bytecodes.py --json`` (a process of its own), one client (one request
    per round, as the count), with the count's knobs (:data:`DEFAULT_KNOBS`) and a clock that moves
    2 us per read, so that every event has aged by its delivery as under callgrind at
    ``CWIST_REACTOR_TAIL_US=1``.  Raises :class:`MeasureError` when the server cannot run here.
    """
    script = str(REPO / "benchmarks" / "bytecodes.py")
    argv = [sys.executable, script, "--json", "--server", name, "--clients", "1", "--clock-step-us", "2"]
    ambient = {**DEFAULT_KNOBS, **(os.environ if env is None else env)}
    done = subprocess.run(
        [*argv, "--cycles", str(cycles)],
        capture_output=True,
        text=True,
        env=ambient,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:  # io_uring unavailable, a bad knob: its one line
        raise MeasureError(f"{name}: bytecodes: {(done.stderr.strip().splitlines() or ['failed'])[-1]}")
    return shares_by_row({(f, q): n for f, q, n in json.loads(done.stdout)["counts"]})


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
    """The peers entry of a server name of :data:`SERVERS` (``bench-<backend>`` or a peer's key)."""
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


def _servers_of(path: Path) -> dict[str, dict]:
    try:
        return json.loads(path.read_text()).get("servers", {})
    except FileNotFoundError:
        return {}


def load_baseline(path: Path = BASELINE) -> dict[str, float]:
    """Server -> instructions per request of the committed baseline; {} when there is none."""
    return {k: float(v["per_request"]) for k, v in _servers_of(path).items()}


def baseline_requests(path: Path = BASELINE) -> set[int]:
    """The request counts the baseline's servers were counted over (empty when it does not say)."""
    return {int(v["requests"]) for v in _servers_of(path).values() if "requests" in v}


def baseline_document(
    counts: list[Count], *, commit: str = "", shares: Mapping[str, Mapping[str, float]] | None = None
) -> str:
    """The counts as JSON: per server its total, its C table and, with ``shares``, its rows."""
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
    return json.dumps(data) + "\n"


def write_baseline(
    counts: list[Count],
    path: Path = BASELINE,
    *,
    commit: str = "",
    shares: Mapping[str, Mapping[str, float]] | None = None,
) -> None:
    """Write :func:`baseline_document` to ``path`` (whole: a reader never sees half of it)."""
    from .outputs import write_atomic

    write_atomic(path, baseline_document(counts, commit=commit, shares=shares))


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


# -- the job's hook: ``tail_latency count`` ----------------------------------


@dataclass(frozen=True)
class CountPlan:
    """What ``count`` counts: ``server`` (None: all, or the bench server on ``backend`` and asyncio),
    ``requests`` per server, the ``baseline`` to compare with (and ``write_baseline`` to store this
    count there instead), ``gate`` (exit 1 on a regression), ``out`` (``<out>/results/``)."""

    out: Path
    server: list | None = None
    requests: int = REQUESTS
    baseline: Path = BASELINE
    write_baseline: bool = False
    backend: str | None = None
    gate: bool = False


def _checked(plan: CountPlan) -> tuple[dict[str, float], list[str]]:
    """(the baseline to compare with, the servers to count), or :class:`PlanError` (one line)."""
    if plan.write_baseline and plan.gate:
        raise PlanError(
            "--write-baseline stores this count; --gate compares it with the stored one: choose one"
        )
    baseline = load_baseline(plan.baseline)
    if plan.gate and not baseline:
        raise PlanError(
            f"--baseline {plan.baseline}: no baseline there to gate on (write one with --write-baseline)"
        )
    counted = baseline_requests(plan.baseline)
    if baseline and counted and counted != {plan.requests}:
        # Per-request figures of different counts differ by up to 0.5 % (warm-up, the
        # interpreter's caches): a verdict compares equal counts.
        if plan.gate:
            raise PlanError(
                f"--requests {plan.requests}: the baseline counted "
                f"{', '.join(map(str, sorted(counted)))} requests per server; gate on the same count"
            )
        baseline = {}
    chosen = list(
        plan.server or [s for s in SERVERS if not plan.backend or s in (f"bench-{plan.backend}", "asyncio")]
    )
    missing = missing_tool()
    if missing:
        raise Unavailable(f"count needs callgrind: {missing}")
    on = [s for s in chosen if s == "bench-io_uring"]
    asked = bool(plan.server) or plan.backend == "io_uring"
    return baseline, without_refused_io_uring(chosen, on, asked=asked, measuring="counting")


def _shares(counts: list[Count]) -> dict[str, dict[str, float]]:
    """The python row of each server split by its bytecodes (a few seconds each), where it can be."""
    shares: dict[str, dict[str, float]] = {}
    for c in counts:
        try:
            shares[c.server] = bytecode_shares(c.server)
        except MeasureError as exc:
            print(f"{PROG}: no split of the python row for {exc}", file=sys.stderr, flush=True)
    return shares


def main_tier(plan: CountPlan) -> int:
    """Count every server, print the table and the verdicts, write ``<out>/results/<stem>-instructions.*``.

    Exit 0, or 1 with ``--gate`` and a ``regression``; 2 for a bad option; 3 for a missing tool
    or kernel feature, or when a count fails (one line).
    """
    try:
        baseline, chosen = _checked(plan)
    except PlanError as e:
        return _fail(str(e), 2)
    except Unavailable as e:  # valgrind, io_uring asked for
        return _fail(str(e), 3)
    counts = []
    for name in chosen:
        try:
            c = count(name, requests=plan.requests)
        except MeasureError as exc:
            return _fail(str(exc), 3)
        print(
            f"{name}: {c.per_request:,.0f} instructions/request ({c.instructions:,} over "
            f"{c.requests:,} requests)",
            flush=True,
        )
        counts.append(c)
    print(f"\n{render(counts)}")
    shares = _shares(counts)
    if shares:
        print(
            "\nBy part of the request (C components by callgrind; the python row split by bytecodes, "
            f"benchmarks/bytecodes.py):\n\n{render(counts, shares)}"
        )
    verdicts = compare(counts, baseline)
    if verdicts:
        print()
        print(f"Against {plan.baseline.name} (a change over +/-{GATE_LIMIT:.0%} is a regression/gain):")
        for v in verdicts:
            print(f"- {v.server}: {v.base:,.0f} -> {v.now:,.0f} ({v.change:+.2%}): {v.verdict}")
    _write(plan, counts, shares)
    if plan.gate and any(v.verdict == "regression" for v in verdicts):
        return _fail("--gate: instructions per request regressed (see the verdicts above)", 1)
    return 0


def _write(plan: CountPlan, counts: list[Count], shares: dict[str, dict[str, float]]) -> None:
    """The count's report and JSON under ``<out>/results/`` (and the new baseline), the file list."""
    from datetime import datetime, timezone

    stem = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-instructions"
    commit = _commit()
    whole = f"\n\nBy part (the python row split by bytecodes):\n\n{render(counts, shares)}" if shares else ""
    md = f"Instructions per request, commit {commit or 'unknown'}, {plan.requests} requests per server\n\n"
    doc = baseline_document(counts, commit=commit, shares=shares)
    paths = write_files(plan.out / "results", stem, {".md": f"{md}{render(counts)}{whole}\n", ".json": doc})
    notes = []
    if plan.write_baseline:
        write_baseline(counts, plan.baseline, commit=commit, shares=shares)
        notes.append(f"{plan.baseline} (the new baseline)")
    print("\n" + files_text(paths, notes=notes))


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
