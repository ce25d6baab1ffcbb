"""The clause registry: every numbered requirement the conformance suite checks.

Role
----
One table, one row per clause: an id (``B`` backend, ``R`` reactor, ``H``
HTTP), one sentence of required behaviour, and its source.  Every conformance
test carries ``@pytest.mark.clause("B1")`` naming exactly one row, so the
pass/fail table the runner prints is generated from the tests, never kept by
hand, and ``docs/en/conformance-reference.md`` lists the same rows.

Sources are of three kinds, named at the start of ``source``:

* ``CWIST`` -- behaviour of the C framework this project mirrors (its reactor,
  its tests ``test_reactor_*.c``, its HTTP handler ``app.c``);
* ``kernel`` -- a Linux man page (epoll_ctl(2), poll(2), io_uring_enter(2));
* ``design`` -- a decision of this project (the backend contract in
  ``tailreactor/backends/base.py``, issue 3 for age-based dispatch).

Levels: a ``backend`` clause is checked on the backend object itself (tokens
in, ``(token, revents)`` out) and, where it says so, through a reactor; a
``reactor`` clause is checked through ``Reactor`` (or the third-party reactor
given with ``--reactor``) on the backend under test.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Clause", "CLAUSES", "AREAS", "clause", "UnknownClause"]


class UnknownClause(KeyError):
    """A clause id that is not in :data:`CLAUSES`."""

    def __str__(self) -> str:
        return f"unknown conformance clause {self.args[0]!r}: accepted {', '.join(c.id for c in CLAUSES)}"


@dataclass(frozen=True)
class Clause:
    """One requirement: ``id`` (``B1``...), ``title`` (a few words for the
    table), ``text`` (the one-sentence requirement), ``source``, ``level``
    (``backend``, ``reactor`` or ``http``)."""

    id: str
    title: str
    text: str
    source: str
    level: str

    @property
    def area(self) -> str:
        return AREAS[self.id[0]]


#: Area names by id prefix, in table order.
AREAS = {"B": "backend", "R": "reactor", "H": "http"}

CLAUSES: tuple[Clause, ...] = (
    # -- backend -------------------------------------------------------------
    Clause(
        "B1",
        "one-shot, exactly once",
        "An armed token is reported exactly once per arming and never again until it is armed "
        "again, even while its fd stays ready, and only by the backend it was armed on, also while "
        "another backend is open or waits at the same time on another thread.",
        "CWIST one-shot model (multishot rejected); kernel epoll_ctl(2) EPOLLONESHOT, "
        "io_uring_enter(2) IORING_OP_POLL_ADD",
        "backend",
    ),
    Clause(
        "B2",
        "readiness present at arm",
        "Readiness that already exists when an fd is armed (data already buffered, a send buffer "
        "already writable) is reported.",
        "CWIST re-arm after a partial read must see the rest; kernel epoll_ctl(2) "
        "(EPOLL_CTL_MOD re-checks readiness), io_uring_enter(2) POLL_ADD",
        "backend",
    ),
    Clause(
        "B3",
        "disarm",
        "After disarm(fd, direction) returns, that direction's token is never reported, even if "
        "the fd became ready before the disarm (also a report collected or held over from a full "
        "batch), and the other direction stays armed.",
        "CWIST cwist_reactor_del (ASYNC_CANCEL; the -ECANCELED completion only frees the slot)",
        "backend",
    ),
    Clause(
        "B4",
        "disarm inside a batch",
        "An event already in the batch being dispatched never runs if an earlier callback of the "
        "same batch disarmed its fd, or disarmed and closed it (reactor level).",
        "design (events are CANCELLED, the round skips them); CWIST slot state",
        "reactor",
    ),
    Clause(
        "B5",
        "fd-number reuse",
        "When an fd is disarmed, closed and its number reused (also inside one batch), an event "
        "of the old registration is never reported to, or run for, the new one; an arming of an "
        "fd closed without disarm is dropped, or reported once (with ERR, or with its own file's "
        "readiness where a dup keeps that file open), never for the file that reuses its number "
        "and never to a later arming of that number.",
        "CWIST (multishot poll rejected because it fires into a recycled slot); the reference's "
        "io_uring uses one only inside an arming (to wait for room after the peer's half-close), "
        "keyed by that arming and cancelled when it ends",
        "backend",
    ),
    Clause(
        "B6",
        "EOF, HUP and ERR",
        "End of file, hang-up and error conditions are reported to an armed READ token (ERR and "
        "HUP also to an armed WRITE token), so the read callback sees EOF.",
        "kernel poll(2), epoll_ctl(2): POLLHUP and POLLERR are always reported",
        "backend",
    ),
    Clause(
        "B7",
        "wake and signals",
        "wake() from another thread ends a blocking wait(None), and a wake made while no wait is "
        "running makes the next wait return instead of being lost; a signal whose handler returns "
        "does not end wait(None), one whose handler raises does, and the backend changes no signal "
        "handler, ignored signal or signal mask of the process.",
        "CWIST stop and post write the wake fd (PR #37 wake fix, test_reactor_wake.c); design "
        "(signal handlers and the mask are the process's; PEP 475 retries EINTR)",
        "backend",
    ),
    Clause(
        "B8",
        "wait timeout",
        "wait(timeout_s) with nothing armed ready returns no earlier than timeout_s seconds, also "
        "for a fraction of a millisecond or of a microsecond and when a disarmed fd is ready, "
        "measured with a monotonic clock around the call (a C backend's in C, around the library's "
        "call alone); wait(0) polls: it never blocks. Any timeout up to 2**63 ns is accepted (a "
        "backend may clamp it to what its poller takes).",
        "kernel epoll_wait(2), io_uring_enter(2) IORING_ENTER_EXT_ARG timeout",
        "backend",
    ),
    Clause(
        "B9",
        "readiness order",
        "A backend that declares ordered reports tokens in the order their readiness arose (arm "
        "order for fds already ready when armed), so equal ages and TAIL_US=0 dispatch first-come "
        "first-served; a backend that does not declare it skips this clause, and the reactor then "
        "promises what base.py says (every event runs, aged events still first, oldest first).",
        "design (ties keep backend order); kernel epoll(7) ready list, io_uring CQ ring order",
        "backend",
    ),
    Clause(
        "B10",
        "bounded batches, no starvation",
        "A backend may bound one wait's batch, but every ready armed token is reported within a "
        "bounded number of waits even while other tokens are re-armed and ready again; a backend "
        "that declares max_batch=N never returns more than N reports from one wait.",
        "design (backend contract); CWIST epoll_wait with 1024 events",
        "backend",
    ),
    Clause(
        "B11",
        ">= 1024 fds armed at once",
        "At least 1024 fds can be armed at the same time, and each is reported exactly once.",
        "CWIST (epoll_wait batches of 1024 events, C1M mode)",
        "backend",
    ),
    Clause(
        "B12",
        "re-arm inside dispatch",
        "An fd re-armed from inside dispatch (after its report, before the next wait) is "
        "reported again by a later wait, and the re-arm of one direction leaves the other "
        "direction's arming as it was; through the reactor its new callback runs in a later "
        "round.",
        "CWIST deferred re-arms (one io_uring_enter per round)",
        "backend",
    ),
    Clause(
        "B13",
        "use after close",
        "After close(), arm, disarm and wait raise RuntimeError and close() and wake() again do "
        "nothing; "
        "after Reactor.close(), arm and run_once raise RuntimeError.",
        "design (backend contract, Reactor.close)",
        "backend",
    ),
    Clause(
        "B14",
        "no fd leak",
        "Arm, report and disarm cycles cost no file descriptor, and close() releases every fd "
        "the backend opened.",
        "design (a long-running server arms millions of times)",
        "backend",
    ),
    Clause(
        "B15",
        "no spurious reports",
        "A READ token is reported only if its fd had data, EOF or error at some moment since it "
        "was armed, and a WRITE token only if its send buffer had room, also while the other "
        "direction of the same fd is armed and ready, and also when it replaced a token whose "
        "report the backend had caught already (a report may be stale: callbacks still handle "
        "EAGAIN).",
        "kernel poll(2) readiness semantics; io_uring_enter(2) POLL_ADD completes with the mask "
        "seen at wake-up",
        "backend",
    ),
    Clause(
        "B16",
        "closed fd rejected",
        "Arming an fd that is not open raises OSError with errno EBADF, and a refused arm changes "
        "no arming (its token is never reported). A backend may skip the check in rearm (called "
        "only from the fd's own callback), and in arm for a direction that is armed or that the "
        "latest wait reported where the closed fd still fails later: a later wait reports the new "
        "token once with ERR.",
        "design (backend contract); kernel epoll_ctl(2) EBADF",
        "backend",
    ),
    Clause(
        "B17",
        "receive arming (optional)",
        "A backend with arm_recv(fd, buffer, token) receives into buffer once per arming and "
        "reports (token, bytes), 0 at EOF, or -errno; it is the fd's READ direction, so disarm "
        "cancels it (never reported, and once the cancel is processed it takes no bytes) and "
        "arming READ replaces it. Bytes already queued or arriving before a replaced or disarmed "
        "receive's cancel is processed may be taken by it and are lost with it. Backends without "
        "arm_recv skip this clause.",
        "CWIST PR #187 RX-uring (CWIST_RX_URING); io_uring_enter(2) IORING_OP_RECV",
        "backend",
    ),
    # -- reactor -------------------------------------------------------------
    Clause(
        "R1",
        "timer order",
        "Timers due in the same pass fire in deadline order, ties in arm order (a re-arm is an arm).",
        "CWIST test_reactor_timer.c (40, 10, 30, 5, 20 ms fire sorted)",
        "reactor",
    ),
    Clause(
        "R2",
        "timers never early",
        "A timer never fires before the reactor clock reaches its deadline.",
        "CWIST test_reactor_timer.c",
        "reactor",
    ),
    Clause(
        "R3",
        "timer cancel",
        "A cancelled timer never fires, also when an earlier callback of the same pass cancels "
        "it, and reports not armed.",
        "CWIST test_reactor_timer.c (cwist_reactor_timer_cancel)",
        "reactor",
    ),
    Clause(
        "R4",
        "timer re-arm replaces",
        "Re-arming an armed timer replaces its deadline: it fires once, at the new deadline.",
        "CWIST test_reactor_timer.c (1 ms re-armed to 50 ms)",
        "reactor",
    ),
    Clause(
        "R5",
        "one pass, timers armed before it",
        "A timer pass fires only timers armed before it started, so a timer that re-arms itself "
        "with delay 0 fires once per round.",
        "CWIST timer heap (each pass fires only timers armed at its start)",
        "reactor",
    ),
    Clause(
        "R6",
        "posts FIFO, exactly once",
        "Posts run on the reactor thread, oldest first, each exactly once.",
        "CWIST test_reactor_wake.c (64 chained posts)",
        "reactor",
    ),
    Clause(
        "R7",
        "posts from 8 threads",
        "Posts made from 8 threads at once all run exactly once, each thread's in its order, "
        "and wake a reactor blocked in run().",
        "CWIST test_reactor_wake.c (foreign posts, Treiber stack)",
        "reactor",
    ),
    Clause(
        "R8",
        "stop from another thread",
        "stop() called from another thread makes a blocked run() return.",
        "CWIST cwist_reactor_stop (writes the wake fd)",
        "reactor",
    ),
    Clause(
        "R9",
        "callback exceptions",
        "An exception in an I/O, timer or posted callback is logged with its traceback and "
        "counted in callback_errors, and the loop goes on with the next callback.",
        "design (a Python exception must not end the loop)",
        "reactor",
    ),
    Clause(
        "R10",
        "age-based order",
        "With CWIST_REACTOR_TAIL_US=T > 0, before each delivery the oldest remaining event of "
        "the batch runs next if its age is >= T (round-start scan and per-delivery check), "
        "else the next event in backend order runs.",
        "CWIST PR #375 (age-based dispatch); design (issue 3)",
        "reactor",
    ),
    Clause(
        "R11",
        "dispatch_late and tail_elevations",
        "dispatch_late() is true exactly during the callback of an event run because it aged "
        "past TAIL_US, and tail_elevations counts those callbacks.",
        "CWIST PR #375 (cwist_reactor_dispatch_late, tail_elevations)",
        "reactor",
    ),
    Clause(
        "R12",
        "TAIL_US=0",
        "With CWIST_REACTOR_TAIL_US=0 dispatch order is the backend's order (readiness order "
        "only on a backend that declares ordered), nothing is elevated and dispatch_late() stays "
        "false, however old the events are.",
        "CWIST PR #375 (0 disables)",
        "reactor",
    ),
    Clause(
        "R13",
        "AGE_FROM=ready",
        "With CWIST_REACTOR_AGE_FROM=ready age counts from when the reactor first saw the event "
        "ready: an event armed long ago but ready only now is not aged, an event carried over "
        "from a round cut short keeps the time that round saw it ready, and ties keep backend "
        "order.",
        "design (issue 3)",
        "reactor",
    ),
    Clause(
        "R14",
        "round budget",
        "Once a round has run longer than CWIST_REACTOR_ROUND_BUDGET_US with re-arms queued, "
        "the reactor submits them (backend.flush()) before the next callback; with 0 it never "
        "flushes mid-round.",
        "CWIST round-budget flush (flush_deferred)",
        "reactor",
    ),
    Clause(
        "R15",
        "drain chunk",
        "With CWIST_REACTOR_DRAIN_CHUNK=N the reactor runs the queued posts after every N-th "
        "callback of a batch (after callbacks N, 2N, ...), so a post made by a callback runs "
        "after at most N-1 more callbacks; with 0 posts run only at the next round start.",
        "CWIST PR #70, test_reactor_drain_chunk.c",
        "reactor",
    ),
    Clause(
        "R16",
        "probe counts",
        "With a latency probe the reactor reports one dispatch per I/O callback (elevated ones "
        "flagged), one post per post run, one round per round, and finish(counters) once at "
        "close.",
        "CWIST PR #186 latency probe; design (probe interface)",
        "reactor",
    ),
    Clause(
        "R17",
        "a self-re-posting post cannot starve I/O",
        "A post that re-posts itself forever cannot starve I/O or timers: ready I/O and due "
        "timers run in the next round.",
        "CWIST post drain (the stack is taken once per drain)",
        "reactor",
    ),
    Clause(
        "R18",
        "I/O re-arm replaces",
        "Arming a direction that is already armed replaces the earlier event, also one already "
        "in the batch being dispatched: only the latest callback runs, once.",
        "design (Reactor.arm); CWIST cwist_reactor_mod",
        "reactor",
    ),
    Clause(
        "R19",
        "close drains posts",
        "Reactor.close() runs the posts still queued, exactly once, before releasing the backend.",
        "CWIST cwist_reactor_destroy (drains posts a last time)",
        "reactor",
    ),
    Clause(
        "R20",
        "agrees with the model",
        "Over random programs of arm, disarm, write, read, close, timer, cancel, clock, post and "
        "run steps, every delivery, timer and post agrees with a small pure model.",
        "design (the model in tailreactor_conformance.model)",
        "reactor",
    ),
    Clause(
        "R21",
        "an escaping exception loses nothing",
        "An exception that is not an Exception (KeyboardInterrupt, SystemExit) raised by an I/O, "
        "timer or posted callback propagates out of run_once(); every other callback that round "
        "had taken (the rest of the batch, of the timer pass, of the post drain) runs in a later "
        "round, exactly once, in the order it would have run; and the round, with every callback "
        "that ran, the one that raised included, is counted and probed like any other.  The I/O "
        "events a round's wait reaped are kept the same way when a signal handler raises after "
        "that wait returned, at a clock read or a backend call of the round.",
        "design (a loop must not lose events); asyncio base_events _run_once (the rest stays "
        "in its ready queue)",
        "reactor",
    ),
    Clause(
        "R22",
        "a round is not re-entrant",
        "run_once() or run() called from inside a round (an I/O, timer or posted callback, also a "
        "post that close() drains) raises RuntimeError at once and runs nothing; the round it was "
        "called from goes on unchanged.",
        'design; asyncio BaseEventLoop.run_forever ("This event loop is already running")',
        "reactor",
    ),
    Clause(
        "R23",
        "harvest joins the round (optional)",
        "With CWIST_REACTOR_HARVEST_US=H > 0 on a backend with harvest(), once a round has run H "
        "and again every H after, before the next callback the reactor takes the events ready "
        "then, stamps them ready at that clock value and runs them in the same round: with "
        "TAIL_US on, one already aged runs before every event of the round not yet aged; with "
        "TAIL_US=0 they follow the round's events in backend order; with H=0 nothing joins a "
        "round after its wait. Backends without harvest() skip this clause.",
        "design (issue 24, beyond CWIST); kernel epoll_wait(2) timeout 0, io_uring CQ ring peek",
        "reactor",
    ),
    Clause(
        "R24",
        "a harvesting round ends",
        "Harvesting adds at most as many events to a round as its wait returned, so a round "
        "whose callbacks keep events ready still ends; a timer that becomes due during it fires "
        "at the next round's start, before that round's I/O, and posts run as without it.",
        "design (issue 24)",
        "reactor",
    ),
    Clause(
        "R25",
        "harvest loses and duplicates nothing",
        "Every event a harvest takes runs exactly once: it is not reported again by the next "
        "wait, and events ready beyond the harvest's bound run in a later round.",
        "design (issue 24); backend contract (one-shot)",
        "reactor",
    ),
    Clause(
        "R26",
        "each policy's order",
        "Under each dispatch policy (CWIST_REACTOR_POLICY backend, age, oldest, lifo, shortest, "
        "or one given with --policy that names a model), every round delivers its events in the "
        "order, and with the dispatch_late() flags, of that policy's model: the rule its module "
        "states first, applied before each delivery to the events remaining.",
        "design (issue 40; tailreactor/policies, tailreactor_conformance.model.POLICY_MODELS)",
        "reactor",
    ),
    Clause(
        "R27",
        "every event of a round runs in it, whatever the policy",
        "Whatever the policy gives, each event of a round's batch runs in that round exactly "
        "once: one the policy never gives runs all the same, one it gives twice runs once, one "
        "disarmed by an earlier callback never runs; so under every policy an event ready and "
        "armed waits no more rounds than the backend takes to report it (B10).",
        "design (issue 40: what the reactor keeps whatever the policy)",
        "reactor",
    ),
    # -- HTTP ----------------------------------------------------------------
    Clause(
        "H1",
        "fairness across connections",
        "A request on a second connection is answered before 256 requests pipelined earlier on "
        "a first connection have all been served.",
        "CWIST test_http_fairness (docs/http-reactor-fairness.md)",
        "http",
    ),
    Clause(
        "H2",
        "at most CWIST_HTTP_BATCH per callback",
        "No callback serves more than CWIST_HTTP_BATCH requests, and a connection that is not "
        "late yields every CWIST_HTTP_YIELD_BATCH requests.",
        "CWIST app.c (batch and yield_batch)",
        "http",
    ),
    Clause(
        "H3",
        "responses in order",
        "Every pipelined request gets exactly one response, in request order.",
        "CWIST test_http_fairness; RFC 9112 9.3.2 pipelining",
        "http",
    ),
    Clause(
        "H4",
        "late bypass",
        "When dispatch_late() is true the handler serves its buffered pipeline, up to "
        "CWIST_HTTP_BATCH, in one callback without posting a continuation.",
        "CWIST PR #375 (late bypass); design (issue 3)",
        "http",
    ),
)

_BY_ID = {c.id: c for c in CLAUSES}


def clause(clause_id: str) -> Clause:
    """The registry row for ``clause_id``; raises :class:`UnknownClause`."""
    try:
        return _BY_ID[clause_id]
    except KeyError:
        raise UnknownClause(clause_id) from None
