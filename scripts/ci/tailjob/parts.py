"""The parts of a request in the instruction tier's whole table (:meth:`tailjob.instructions.Count.split`).

Callgrind attributes instructions to C functions, not Python ones (3.11 runs Python calls inside one
``_PyEval_EvalFrameDefault``), so :data:`~tailjob.instructions.COMPONENTS` are the C functions the
parts end in (inclusive cost, Python callbacks included) and the rest, the interpreter running the
round, the dispatch, the connection and the route, is one ``python`` row callgrind cannot split.
The whole table (:data:`ROWS`) puts each C component in its row and spreads the ``python`` row over
the rows by the Python bytecodes each part runs per request (``benchmarks/bytecodes.py`` on the same
server, path and knobs, by :data:`PYTHON_ROWS`): an estimate (a call costs more than a load); the
total, the C components and the gate are exact.
"""

from __future__ import annotations

import os

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
    ("tailreactor/reactor.py", ("Reactor.arm", "Reactor.arm_recv", "Reactor._arm"), "arm"),
    ("tailreactor/dispatch.py", (), "dispatch walk"),
    ("tailreactor/policies/", (), "dispatch walk"),
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


def shares_by_row(counts) -> dict[str, float]:
    """Fractions of bytecodes by row, from ``(filename, qualname) -> bytecodes`` (the parser's own left out)."""
    by_row: dict[str, int] = {}
    for (filename, qualname), n in counts.items():
        row = python_component(filename, qualname)
        if row is not None:
            by_row[row] = by_row.get(row, 0) + n
    total = sum(by_row.values())
    return {row: n / total for row, n in by_row.items()} if total else {}
