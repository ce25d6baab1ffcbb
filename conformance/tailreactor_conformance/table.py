"""The per-clause pass/fail table (rich), from the plugin's summary dict.

Role
----
Turns ``{"clauses": {id: {backend: {"status": ...}}}}`` into one table: a row
per clause, a column per backend under test, then the failing tests of each
failing clause, each with the first ``E`` line of pytest's report (why it
failed), and the skip reasons (said once: pytest's short summary lists
failures and errors only).  Also renders the registry alone (``--list``).

What a user copies stays whole: a backend's name is never folded (the table
grows wider than the terminal instead), and a test id or a skip reason is one
line that only the terminal may wrap (``-k`` takes its name, the part after ``::``).
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from .clauses import CLAUSES, clause

__all__ = ["render", "render_registry", "capability_text"]

_STYLE = {"pass": "green", "FAIL": "bold red", "skip": "yellow", "not run": "dim"}


def _console(out, width: int, color: bool) -> Console:
    return Console(
        file=out,
        width=max(width, 100),
        force_terminal=color,
        no_color=not color,
        highlight=False,
        soft_wrap=False,
    )


def render(summary: dict, out, *, width: int = 120, color: bool = False) -> None:
    """Write the clause x backend table of ``summary`` (see ``plugin.summary``) to ``out``."""
    console = _console(out, width, color)
    backends = summary["backends"]
    console.print(
        f"[bold]tailreactor conformance[/]: reactor {summary['reactor']}, "
        f"profile {summary['profile']}, seed {summary['seed']}"
    )
    table = _clause_table(summary)
    # As wide as the table is (wider than the terminal when the backends' names need it):
    # never a name folded or cut.
    needs = Measurement.get(console, console.options.update_width(10_000), table).maximum
    console.width = max(console.width, needs)
    console.print(table)
    _failing(console, summary)
    _crashed(console, summary.get("crashed") or [])
    _not_run(console, summary)
    out_of_fds = (summary.get("out_of_fds") or {}).get("tests") or []
    if out_of_fds:
        limit = summary["out_of_fds"].get("nofile_soft_limit")
        console.print(
            "[bold red]out of file descriptors[/]: "
            + escape(
                f"{len(out_of_fds)} failing test(s) found the process had no fd left (EMFILE; "
                f"RLIMIT_NOFILE soft limit {limit or 'unlimited'}), the first {out_of_fds[0]}: a "
                f"backend that leaks fds (B14) fails every later test that needs one, whatever its clause"
            )
        )
    skipped = [
        (cid, b, cells[b].get("skip_reasons") or [])
        for cid, cells in summary["clauses"].items()
        for b in backends
        if cells[b]["status"] == "skip"
    ]
    if skipped:
        console.print("[yellow]skipped clauses[/]")
        for cid, b, reasons in skipped:
            console.print(Text(f"  {cid} on {b}: " + ("; ".join(reasons) or "skipped")), soft_wrap=True)
    _skipped_tests(console, summary)


def _skipped_tests(console, summary: dict) -> None:
    """The tests that skipped in a clause that ran (the reasons are said here alone: pytest's
    short summary leaves skips out)."""
    partly = [
        (cid, b, cells[b])
        for cid, cells in summary["clauses"].items()
        for b in summary["backends"]
        if cells[b]["status"] in ("pass", "FAIL") and cells[b].get("skips")
    ]
    if partly:
        console.print("[yellow]skipped tests in clauses that ran[/]")
        for cid, b, cell in partly:
            reasons = "; ".join(cell.get("skip_reasons") or []) or "skipped"
            console.print(Text(f"  {cid} on {b}: {len(cell['skips'])} test(s): {reasons}"), soft_wrap=True)


def _crashed(console, crashed: list[dict]) -> None:
    """The tests whose worker process died, and how to see what the library printed: those the
    watchdog ended (a call into the library that never returned) apart, its line quoted."""
    hung = [c for c in crashed if c.get("hung")]
    signalled = [c for c in crashed if not c.get("hung")]
    if hung:
        console.print(
            "[bold red]hung[/]: "
            + escape(
                f"{len(hung)} test(s) did not return from a call into the library within the "
                "watchdog's limit (the wait's timeout, or the liveness bound with no limit, plus a "
                "grace; any other call the grace); the watchdog ended their worker process. Its line, and the test alone, "
                "in-process:"
            )
        )
        for c in hung:
            console.print(Text(f"  {c['clause']} on {c['backend']}: {c['test']}"), soft_wrap=True)
            console.print(
                Text(f"      watchdog ({c['hung']['limit_s']:g} s): {c['hung']['watchdog']}"), soft_wrap=True
            )
            console.print(Text(f"      {c['rerun']}"), soft_wrap=True)
    if signalled:
        console.print(
            "[bold red]crashed[/]: "
            + escape(
                f"{len(signalled)} test(s) ended their worker process (a signal: an abort or a fault "
                "in the code under test); what the library printed (an assertion's message) went "
                "with the process's captured output. To see it, run the test alone, in-process, "
                "output shown (a library that aborts without a message shows nothing more there: "
                "run that line under gdb for a backtrace, as docs/en/conformance.md shows):"
            )
        )
        for c in signalled:
            where = ", crashed in teardown (tr_backend_close?)" if c.get("phase") == "teardown" else ""
            console.print(Text(f"  {c['clause']} on {c['backend']}{where}: {c['test']}"), soft_wrap=True)
            console.print(Text(f"      {c['rerun']}"), soft_wrap=True)


def _not_run(console, summary: dict) -> None:
    """Why clauses show ``not run`` when pytest-xdist stopped after too many crashed workers."""
    down = summary.get("workers_crashed") or {}
    count, most = down.get("count") or 0, down.get("max_restart")
    if not count or most is None or count <= most:
        return
    ids = [
        cid
        for cid, cells in summary["clauses"].items()
        if any(cells[b]["status"] == "not run" for b in summary["backends"])
    ]
    console.print(
        "[bold red]not run[/]: "
        + escape(
            f"{count} worker process(es) crashed, more than pytest-xdist replaces (--max-worker-restart "
            f"{most}: 4 per worker by default), so it stopped the run and dropped every test not run "
            "yet: "
            + (
                f"clauses {', '.join(ids)} show not run, and others may have run only in part"
                if ids
                else "each clause ran, some only in part"
            )
            + ". Fix the crashes above first, or run the rest: add -- --max-worker-restart=1000 to the command."
        )
    )


def capability_text(caps) -> str:
    """``ordered, batch <= 16`` / ``unordered, no batch cap``; a string is shown as is."""
    if not isinstance(caps, dict):
        return str(caps or "-")
    order = "ordered" if caps["ordered"] else "unordered"
    cap = "no batch cap" if caps["max_batch"] is None else f"batch <= {caps['max_batch']}"
    return f"{order}, {cap}"


def _clause_table(summary: dict) -> Table:
    """The clause x backend table: a row of declared capabilities, then a row per clause."""
    backends = summary["backends"]
    table = Table()
    table.add_column("clause", no_wrap=True)
    table.add_column("requirement", min_width=24)
    for b in backends:
        table.add_column(b, no_wrap=True, min_width=len(b))
    caps = summary.get("capabilities") or {}
    table.add_row(
        "caps",
        "declared capabilities",
        *[f"[dim]{capability_text(caps.get(b))}[/]" for b in backends],
        end_section=True,
    )
    for cid, cells in summary["clauses"].items():
        row = [cid, clause(cid).title]
        for b in backends:
            st = cells[b]["status"]
            shown = (
                f"{st} (hung)"
                if cells[b].get("hung")
                else f"{st} (crashed)"
                if cells[b].get("crashed")
                else st
            )
            row.append(f"[{_STYLE[st]}]{shown}[/]")
        table.add_row(*row)
    return table


def _failing(console, summary: dict) -> None:
    """Each failing clause on each backend, with its text and the failing tests' ids (whole: copyable)."""
    backends = summary["backends"]
    failing = [
        (cid, b, cells[b]["failures"])
        for cid, cells in summary["clauses"].items()
        for b in backends
        if cells[b]["status"] == "FAIL"
    ]
    if failing:
        console.print("[bold red]failing clauses[/]")
        for cid, b, nodeids in failing:
            # One line, as the ids below: folded by the terminal, never broken with a trailing space.
            console.print(Text(f"  {cid} on {b}: {clause(cid).text}"), soft_wrap=True)
            reasons = summary["clauses"][cid][b].get("reasons") or {}
            for nodeid in nodeids:
                console.print(Text(f"      {nodeid}"), soft_wrap=True)
                if reasons.get(nodeid):  # the first E line of pytest's report: why it failed
                    console.print(Text(f"          {reasons[nodeid]}"), soft_wrap=True)
    else:
        console.print("[green]no clause failed[/]")


def render_registry(out, *, width: int = 120, color: bool = False) -> None:
    """Write every registered clause: id, requirement, source."""
    console = _console(out, width, color)
    table = Table(title="tailreactor conformance clauses", title_justify="left")
    table.add_column("clause", no_wrap=True)
    table.add_column("requirement", overflow="fold", ratio=3)
    table.add_column("source", overflow="fold", ratio=2)
    for c in CLAUSES:
        table.add_row(c.id, c.text, c.source)
    console.print(table)
