"""The instruction tier (``count``): user-space instructions per request, by callgrind, by component.

CPU time per request on a shared machine moves by 20 % from run to run; the instructions a server
executes for a fixed sequence of requests do not.  :class:`CountMeasure` starts one server of the ``peers``
comparison under ``valgrind --tool=callgrind`` and sends it keep-alive ``GET /`` requests in batches
of ``in_flight`` (default **one in flight**) on ``connections`` connections in turn, one request per
connection in a batch; the next batch goes once every answer of this one is read.  A batch of more
than one is written while the server is stopped (SIGSTOP, then SIGCONT), so every round holds the
whole batch however slow valgrind is (wrk's batches depend on timing); the count says how many
backend waits it saw (:attr:`Count.waits`).  The counters are zeroed after a warm-up and dumped
after the last answer.  No timers, fixed hashing, no path chosen by the wall clock
(:data:`DEFAULT_KNOBS`: ``CWIST_REACTOR_TAIL_US=1``, every event aged by its delivery, so every round
takes the age-based path; ``ROUND_BUDGET_US=0``, io_uring's mid-round submit fires by wall time).  So
the same count repeats within 0.5 %.  It counts the server process's user space (interpreter,
httptools, uring-api, libc), not the kernel: io_uring's saved system calls show in CPU time, not here.
The split by component: :mod:`tailjob.parts`.  Two batch sizes tell a part's cost per round from its
cost per event: at ``in_flight`` N, a part that costs ``R`` per round and ``E`` per event costs
``R/N + E`` per request.

Gate (:func:`compare`): each server's count against :data:`BASELINE` (``--write-baseline``): above
+2 % (:data:`GATE_LIMIT`) a ``regression``, below -2 % a ``gain``, else ``equivalent``.
"""

from __future__ import annotations

import functools
import http.client
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from . import PROG, REPO, history
from . import fail as _fail
from .measure import JobError, RunPlan, RunRecord, Settings
from .outputs import files_text, write_atomic, write_files
from .parts import C_ROW, ROWS, python_component, shares_by_row  # noqa: F401
from .peers import make_server, servers
from .plan import (
    COUNT_BASELINE,
    COUNT_REQUESTS,
    COUNT_SERVERS,
    Leg,
    PlanError,
    Unavailable,
    without_refused_io_uring,
)
from .server import ServerError

SERVERS, BASELINE = COUNT_SERVERS, COUNT_BASELINE
GATE_LIMIT = 0.02  # the gate's bound above (and below) the baseline
#: Defaults: requests counted, keep-alive connections they rotate over, warm-up requests.
REQUESTS, CONNECTIONS, WARMUP = COUNT_REQUESTS, 8, 200
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


def bytecode_shares(name: str, *, cycles: int = 200, clients: int = 1) -> dict[str, float]:
    """Fractions of the Python bytecodes server ``name`` runs per request outside the parser, by row:
    ``benchmarks/bytecodes.py --json`` (a process of its own), ``clients`` clients each with one
    request in flight (a round holds them all, as the count's batches), the count's knobs and a
    clock that moves 2 us per read (at ``TAIL_US=1`` every event aged by its delivery, as under
    callgrind)."""
    argv = [sys.executable, str(REPO / "benchmarks" / "bytecodes.py"), "--json", "--server", name]
    argv += ["--clients", str(clients), "--clock-step-us", "2", "--cycles", str(-(-cycles // clients))]
    ambient = {**DEFAULT_KNOBS, **os.environ}
    done = subprocess.run(argv, capture_output=True, text=True, env=ambient, timeout=600, check=False)
    if done.returncode != 0:  # io_uring unavailable, a bad knob: its one line
        raise JobError(f"{name}: bytecodes: {(done.stderr.strip().splitlines() or ['failed'])[-1]}")
    return shares_by_row({(f, q): n for f, q, n in json.loads(done.stdout)["counts"]})


@dataclass(frozen=True)
class Count:
    """One server's count: ``instructions`` over ``requests``, and per component (instructions);
    ``calls`` into each component from outside every component, and the requests ``in_flight``
    per batch."""

    server: str
    requests: int
    instructions: int
    components: dict[str, int] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    in_flight: int = 1

    @property
    def waits(self) -> int:
        """The backend waits counted: one per round (io_uring's: one more per interrupted wait)."""
        return self.calls.get("backend wait", 0)

    @property
    def per_request(self) -> float:
        return self.instructions / self.requests

    def table(self) -> dict[str, float]:
        """Instructions per request by component, the rest as ``python``, in :data:`COMPONENTS` order."""
        rows = {name: self.components.get(name, 0) / self.requests for name, _ in COMPONENTS}
        rows["python"] = (self.instructions - sum(self.components.values())) / self.requests
        return rows

    def split(self, shares: Mapping[str, float]) -> dict[str, float]:
        """Instructions per request by :data:`ROWS`: each C component in its row, and the ``python``
        row spread over the rows by ``shares`` (:func:`bytecode_shares`; what they leave goes to
        ``other``).  An estimate for the Python part: a bytecode's cost varies."""
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


def _has_symbol_table(path: str) -> bool:
    """Whether the ELF file at ``path`` keeps its symbol table (``.symtab``): a stripped one does not."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:  # 64-bit ELF only; anything else: assume symbols
            return True
        (shoff,) = struct.unpack_from("<Q", head, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", head, 0x3A)
        f.seek(shoff)
        table = f.read(shentsize * shnum)
    return any(struct.unpack_from("<I", table, i * shentsize + 4)[0] == 2 for i in range(shnum))  # SHT_SYMTAB


def symbols_missing(python: str = sys.executable) -> str | None:
    """Why callgrind cannot name CPython's C functions in the servers' interpreter ``python`` (the
    file of its ``select`` module, or the interpreter where that is built in), or None.  Without
    them the C components (:data:`COMPONENTS` less httptools') read 0 and the total is not
    comparable with a baseline counted on a Python with symbols: a distribution's stripped build
    (Debian's /usr/bin/python3.11) differs by about 2 %."""
    try:
        where = subprocess.run(
            [
                python,
                "-c",
                "import os, select, sys; print(getattr(select, '__file__', '') or sys.executable)",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.strip()
        if _has_symbol_table(os.path.realpath(where)):
            return None
    except (OSError, subprocess.SubprocessError, struct.error):
        return None  # not a Python this can read: the count says what went wrong
    return (
        f"{os.path.realpath(where)} has no symbol table (a stripped build): callgrind cannot name CPython's C "
        "functions (select_epoll_poll, sock_recv, ...), so the C components read 0 and the total is not "
        "comparable with a baseline counted on a Python with symbols; make .venv with one (a source build "
        "such as pyenv's): rm -rf .venv && PYTHON=/path/to/python3 scripts/bootstrap.sh"
    )


def peer_of(name: str):
    """The peers entry of a server name of :data:`SERVERS` (``bench-<backend>`` or a peer's key)."""
    key = "tailreactor-" + name.split("-", 1)[1] if name.startswith("bench-") else name
    for p in servers(nginx=None):
        if p.key == key:
            return p
    raise ValueError(f"server {name!r}: accepted {', '.join(SERVERS)}")


def _send(conn: http.client.HTTPConnection) -> None:
    """One keep-alive ``GET /``, the same bytes every time."""
    conn.putrequest("GET", "/", skip_host=True, skip_accept_encoding=True)
    conn.putheader("Host", "127.0.0.1")
    conn.endheaders()


def _answer(conn: http.client.HTTPConnection) -> None:
    """The answer to the request ``conn`` sent, read to its end."""
    answer = conn.getresponse()
    answer.read()
    if answer.status != 200:
        raise JobError(f"the server answered {answer.status} {answer.reason}")


def _batch(pid: int, conns: list[http.client.HTTPConnection]) -> None:
    """One request on each of ``conns``, then every answer.  More than one are written while the
    server (process ``pid``, a child of this one) is stopped, so its next wait reports them all."""
    if len(conns) == 1:
        _send(conns[0])
    else:
        os.kill(pid, signal.SIGSTOP)
        try:
            _, status = os.waitpid(pid, os.WUNTRACED)  # returns once it is stopped
            if not os.WIFSTOPPED(status):
                raise JobError(f"the server exited while stopped for a batch (wait status {status})")
            for conn in conns:
                _send(conn)
        finally:
            os.kill(pid, signal.SIGCONT)
    for conn in conns:
        _answer(conn)


def _control(option: str, pid: int) -> None:
    subprocess.run(["callgrind_control", option, str(pid)], check=True, capture_output=True, timeout=120)


def count_plan(name: str, *, connections: int = CONNECTIONS) -> RunPlan:
    """The plan of counting server ``name`` (its ``arm``): requests rotate over ``leg.connections``
    (at least as many as the measure's ``in_flight``)."""
    ambient = {**DEFAULT_KNOBS, **os.environ, "PYTHONHASHSEED": "0"}
    peer = peer_of(name)
    return RunPlan(
        leg=Leg(0, None, 1, connections, 0, 1, label=name),
        arm=name,
        env=ambient,
        settings=Settings(warmup=False),
        trial=0,
        where=name,
        server=lambda e: make_server(peer, ambient=e, host="127.0.0.1", cpus=None, nginx=None),
    )


@dataclass(frozen=True)
class CountMeasure:
    """The count tier as a measure (:class:`tailjob.measure.Measure`): ``run(plan)`` counts the
    server of a :func:`count_plan` over ``requests`` after ``warmup`` (module docstring); the
    record's ``wrk`` is the :class:`Count` as a dict.  Raises :class:`JobError` (one line)."""

    requests: int = REQUESTS
    warmup: int = WARMUP
    in_flight: int = 1
    name: str = "callgrind"

    def run(self, plan: RunPlan) -> RunRecord:
        assert plan.server is not None  # count_plan's plans carry their server
        connections, n = plan.leg.connections, self.in_flight
        if connections < n:
            raise JobError(f"{plan.where}: {n} in flight need {n} connections, the plan has {connections}")
        warm = -(-self.warmup // n) * n  # the warm-up in whole batches
        with tempfile.TemporaryDirectory(prefix="instructions-") as tmp:
            server = plan.server(plan.env)
            out = f"--callgrind-out-file={Path(tmp) / 'callgrind.out'}"
            server.run_under = ["valgrind", "--tool=callgrind", "--dump-instr=no", "--dump-line=no", out]
            server.start_timeout_s = 300.0  # Python starts slowly under valgrind
            conns: list[http.client.HTTPConnection] = []
            try:
                server.start()
                assert server.port is not None  # start() chose it
                conns = [
                    http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
                    for _ in range(connections)
                ]
                for conn in conns:
                    conn.connect()
                for i in range(0, warm + self.requests, n):  # a batch, the connections in turn
                    if i == warm:
                        _control("--zero", server.pid)
                    size = min(n, warm + self.requests - i)  # the last batch may be short
                    _batch(server.pid, [conns[(i + j) % connections] for j in range(size)])
                _control("--dump", server.pid)
            except (ServerError, OSError, http.client.HTTPException, subprocess.SubprocessError) as exc:
                raise JobError(f"{plan.where}: {exc}") from None
            finally:
                # The dump is written: no need for a clean exit (under valgrind a server waiting in
                # io_uring_enter does not see SIGTERM in time).
                for conn in conns:
                    conn.close()
                server.stop(timeout_s=2.0)
            dumps = sorted(Path(tmp).glob("callgrind.out.*"))  # the explicit dump, not the exit one
            if not dumps:
                raise JobError(f"{plan.where}: callgrind wrote no dump file")
            c = Count(plan.arm, self.requests, *attribute(dumps[0]), in_flight=n)
        return RunRecord.of(plan, backend=server.backend or "?", port=server.port or 0, wrk=asdict(c))


_FN = re.compile(r"^c?fn=(?:\((\d+)\))? ?(.*)$")  # fn=(id) name, fn=(id) (named before), fn=name


@functools.cache
def _component(fname: str) -> str | None:
    base = fname.split("'")[0]  # callgrind appends 'N to recursion levels
    return next((comp for comp, rx in COMPONENTS if re.fullmatch(rx, base)), None)


def attribute(dump: Path) -> tuple[int, dict[str, int], dict[str, int]]:
    """(total, instructions by component, calls into each component) of one callgrind dump
    (``--dump-instr=no``).

    A component's cost is the inclusive cost of the calls into one of its functions made from a
    function outside every component (its own calls are in that cost).  Callgrind records
    caller/callee pairs, not stacks, so a component reached *through* an outside function called by
    another component would count twice; on the request path measured here none is (the parser's
    callbacks read no clock, send nothing), and :meth:`Count.table` would show it as a negative
    ``python`` row.
    """
    names: dict[str, str] = {}  # callgrind's ids of function names
    total, parts, calls = 0, {comp: 0 for comp, _ in COMPONENTS}, {comp: 0 for comp, _ in COMPONENTS}
    current = callee = None  # the component of the function whose lines follow; of the call's callee
    pending_call = False  # a calls= line: the next cost line is the call's inclusive cost
    made = 0  # how many calls the calls= line counted
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith(("summary:", "totals:")):
            total = int(line.split()[1])
        elif m := _FN.match(line):
            ident, name = m.groups()
            if ident is not None:
                name = names.setdefault(ident, name) if name else names.get(ident, "")
            if line[0] == "f":
                current = _component(name)
            else:
                callee = _component(name)
        elif line.startswith("calls="):
            pending_call, made = True, int(line[6:].split()[0])
        elif pending_call and (line[:1].isdigit() or line[:1] in ("+", "-", "*")):
            pending_call = False
            fields = line.split()
            if callee is not None and current is None and len(fields) > 1:
                parts[callee] += int(fields[1])
                calls[callee] += made
    return total, parts, calls


def _baseline(path: Path) -> dict[str, dict]:
    try:
        servers = json.loads(path.read_text()).get("servers", {})
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, AttributeError) as e:
        raise PlanError(f"--baseline {path}: not a baseline file (JSON): {e}") from None
    if not isinstance(servers, dict):
        raise PlanError(f"--baseline {path}: not a baseline file (JSON): 'servers' is not a table")
    return servers


def load_baseline(path: Path = BASELINE) -> dict[str, float]:
    """Server -> instructions per request of the committed baseline; {} when there is none."""
    return {k: float(v["per_request"]) for k, v in _baseline(path).items()}


def baseline_document(
    counts: list[Count], *, commit: str = "", shares: Mapping[str, Mapping[str, float]] | None = None
) -> str:
    """The counts as JSON: per server its total, its C table and, with ``shares``, its rows."""
    servers: dict[str, dict] = {}
    for c in counts:
        servers[c.server] = {
            "per_request": round(c.per_request, 1),
            "requests": c.requests,
            "in_flight": c.in_flight,
            "waits": c.waits,
            "table": {k: round(v, 1) for k, v in c.table().items()},
        }
        if shares is not None and c.server in shares:
            servers[c.server]["rows"] = {k: round(v, 1) for k, v in c.split(shares[c.server]).items()}
    what = "callgrind instructions per request (scripts/ci/tailjob/instructions.py)"
    return json.dumps({"what": what, "commit": commit, "servers": servers}) + "\n"


def compare(counts: list[Count], baseline: Mapping[str, float], limit: float = GATE_LIMIT) -> list[Verdict]:
    """A verdict per counted server the baseline has (module docstring, "Gate")."""
    out = []
    for c in counts:
        if (base := baseline.get(c.server)) is not None:
            change = round(c.per_request / base - 1, 9)  # exactly +2 % is within the bound
            verdict = "regression" if change > limit else "gain" if change < -limit else "equivalent"
            out.append(Verdict(c.server, base, c.per_request, verdict))
    return out


def render(counts: list[Count], shares: Mapping[str, Mapping[str, float]] | None = None) -> str:
    """A Markdown table of instructions per request, one column per server: by callgrind's C
    components and the ``python`` rest, or with ``shares`` (server -> :func:`bytecode_shares`) by
    every row of :data:`ROWS` (:meth:`Count.split`)."""
    if shares is None:
        tables, names = [c.table() for c in counts], [name for name, _ in COMPONENTS] + ["python"]
    else:
        tables, names = [c.split(shares.get(c.server, {})) for c in counts], list(ROWS)
    lines = ["| component | " + " | ".join(c.server for c in counts) + " |", "|---|" + "---:|" * len(counts)]
    lines += [f"| {row} | " + " | ".join(f"{t[row]:,.0f}" for t in tables) + " |" for row in names]
    lines.append("| **total** | " + " | ".join(f"**{c.per_request:,.0f}**" for c in counts) + " |")
    return "\n".join(lines)


# -- the job's hook: ``tail_latency count`` ----------------------------------


@dataclass(frozen=True)
class CountPlan:
    """What ``count`` counts: ``server`` (None: all, or the bench server on ``backend`` and asyncio),
    ``requests`` per server in batches of ``in_flight``, the ``baseline`` to compare with (and
    ``write_baseline`` to store this count there instead), ``gate`` (exit 1 on a regression), ``out``
    (``<out>/results/``)."""

    out: Path
    server: list | None = None
    requests: int = REQUESTS
    in_flight: int = 1
    baseline: Path | None = None  # None: BASELINE, compared only where the counts match
    write_baseline: bool = False
    backend: str | None = None
    gate: bool = False


def _checked(plan: CountPlan) -> tuple[dict[str, float], list[str]]:
    """(the baseline to compare with, the servers to count), or :class:`PlanError` (one line)."""
    if plan.write_baseline and plan.gate:
        raise PlanError(
            "--write-baseline stores this count; --gate compares it with the stored one: choose one"
        )
    path, named = plan.baseline or BASELINE, plan.baseline is not None
    if named and not plan.write_baseline and not path.is_file():
        raise PlanError(
            f"--baseline {path}: no such file; accepted a baseline JSON file (write one with --write-baseline)"
        )
    baseline = load_baseline(path)
    if plan.gate and not baseline:
        raise PlanError(f"--baseline {path}: no baseline there to gate on (write one with --write-baseline)")
    strict = plan.gate or named  # a baseline asked for is compared, or refused in one line
    stored = _baseline(path).values()
    # A verdict compares like counts: per-request figures of different counts differ by up to 0.5 %
    # (warm-up, the interpreter's caches), and a round's cost is shared by its batch.
    requests = {int(v["requests"]) for v in stored if "requests" in v}
    batches = {int(v.get("in_flight", 1)) for v in stored}
    for option, given, counted, what in (
        ("--requests", plan.requests, requests, "requests per server; compare the same count"),
        ("--in-flight", plan.in_flight, batches, "in flight; compare the same batch"),
    ):
        if baseline and counted and counted != {given}:
            if strict and not plan.write_baseline:
                sizes = ", ".join(map(str, sorted(counted)))
                raise PlanError(f"{option} {given}: the baseline counted {sizes} {what}")
            baseline = {}
    chosen = plan.server or [
        s for s in SERVERS if not plan.backend or s in (f"bench-{plan.backend}", "asyncio")
    ]
    if missing := missing_tool():
        raise Unavailable(f"count needs callgrind: {missing}")
    on = [s for s in chosen if s == "bench-io_uring"]
    asked = bool(plan.server) or plan.backend == "io_uring"
    return baseline, without_refused_io_uring(list(chosen), on, asked=asked, measuring="counting")


def main_tier(plan: CountPlan) -> int:
    """Count every server, print the table and the verdicts, write ``<out>/results/<stem>-instructions.*``.
    Exit 0, or 1 with ``--gate`` and a ``regression``; 2 for a bad option; 3 for a missing tool or
    kernel feature, or when a count fails (one line)."""
    stripped = symbols_missing()
    try:
        baseline, chosen = _checked(plan)
        if stripped and (plan.gate or plan.write_baseline):  # a gate on unlike counts, or a baseline
            option = "--gate" if plan.gate else "--write-baseline"  # of them, passes or fails by the build
            raise Unavailable(f"count {option}: {stripped}")
    except PlanError as e:
        return _fail(str(e), 2)
    except Unavailable as e:  # valgrind, io_uring asked for, a Python without symbols
        return _fail(str(e), 3)
    if stripped:
        print(f"Note: {stripped}.", flush=True)
        baseline = {}
    counts, measure = [], CountMeasure(plan.requests, in_flight=plan.in_flight)
    for name in chosen:
        try:
            c = Count(**measure.run(count_plan(name, connections=max(CONNECTIONS, plan.in_flight))).wrk)
        except JobError as exc:
            return _fail(str(exc), 3)
        print(
            f"{name}: {c.per_request:,.0f} instructions/request ({c.instructions:,} over {c.requests:,} "
            f"requests, {c.in_flight} in flight, {c.waits:,} backend waits)",
            flush=True,
        )
        counts.append(c)
    print(f"\n{render(counts)}")
    shares: dict[str, dict[str, float]] = {}  # the python row split by bytecodes (a few seconds each)
    for c in counts:
        try:
            shares[c.server] = bytecode_shares(c.server, clients=plan.in_flight)
        except JobError as exc:
            print(f"{PROG}: no split of the python row for {exc}", file=sys.stderr, flush=True)
    whole = f"By part of the request (C components by callgrind; the python row split by bytecodes, benchmarks/bytecodes.py):\n\n{render(counts, shares)}"
    if shares:
        print(f"\n{whole}")
    verdicts = compare(counts, baseline)
    if verdicts:
        print(
            f"\nAgainst {(plan.baseline or BASELINE).name} (a change over +/-{GATE_LIMIT:.0%} is a regression/gain):"
        )
        for v in verdicts:
            print(f"- {v.server}: {v.base:,.0f} -> {v.now:,.0f} ({v.change:+.2%}): {v.verdict}")
    _write(plan, counts, shares, stripped)
    if plan.gate and any(v.verdict == "regression" for v in verdicts):
        return _fail("--gate: instructions per request regressed (see the verdicts above)", 1)
    return 0


def _write(plan: CountPlan, counts: list[Count], shares: dict[str, dict[str, float]], stripped=None) -> None:
    """The count's report and JSON under ``<out>/results/`` (and the new baseline), the file list;
    ``stripped``: :func:`symbols_missing`'s line, said first (the count was compared with no baseline)."""
    stem = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-instructions"
    commit = history.provenance(REPO, wrk_version="-")["git_commit"]
    commit = "" if commit == "unknown" else commit[:7]
    whole = f"\n\nBy part (the python row split by bytecodes):\n\n{render(counts, shares)}" if shares else ""
    md = f"Instructions per request, commit {commit or 'unknown'}, {plan.requests} requests per server"
    md += f", {plan.in_flight} in flight (backend waits: {', '.join(f'{c.server} {c.waits:,}' for c in counts)})\n\n"
    if stripped:
        md += f"**Note:** {stripped}. This count was not compared with a baseline.\n\n"
    doc = baseline_document(counts, commit=commit, shares=shares)
    paths = write_files(plan.out / "results", stem, {".md": f"{md}{render(counts)}{whole}\n", ".json": doc})
    notes = []
    if plan.write_baseline:
        write_atomic(plan.baseline or BASELINE, doc)
        notes.append(f"{plan.baseline or BASELINE} (the new baseline)")
    print("\n" + files_text(paths, notes=notes))
