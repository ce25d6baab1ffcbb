"""One HTTP/1.x connection: parse into a buffered pipeline, serve it in batches.

Role
----
The per-connection state machine of the bench server, on one reactor thread.
Reading and serving are two separate steps:

1. **Parse.** One ``recv`` per read-readiness -- or, with RX-uring, one
   receive the kernel completes into the connection's own buffer (below);
   everything received goes to :class:`~tailreactor.http.request.RequestPipeline`
   (the base class, shared with the asyncio/uvloop peers), which queues
   every complete request in ``_pipeline``, a FIFO of ``(method, target,
   keep_alive)`` -- the *buffered pipeline* -- and a request the parser
   rejects as ``(None, answer_bytes, False)``: its error answer, in order
   behind the requests received before it.
2. **Serve.** A *pass* answers requests from the front of the pipeline into
   one output buffer, then sends that buffer with one ``send`` (coalesced
   output: one syscall for a whole pipelined batch).

Reading: readiness + ``recv``, or RX-uring (``CWIST_RX_URING``, CWIST PR #187)
------------------------------------------------------------------------------
Where the reactor's backend has a receive operation (io_uring) and
``CWIST_RX_URING`` is not ``0``, the connection arms ``Reactor.arm_recv``
into a buffer of its own (:data:`RX_BYTES`): the completion is the readiness
and the data at once, so a request costs no ``recv`` syscall.  A receive that
fills the buffer is followed by one ``recv`` of the rest into the shared
buffer, so a long pipeline is parsed as one readiness read would parse it.  A
receive that fails with ``-EAGAIN`` switches that connection to readiness +
``recv`` for good (CWIST's per-connection "prefers poll" flag).  Other backends read on
readiness into the listener's shared buffer (:data:`RECV_BYTES`).  Everything
after the bytes arrive (:meth:`Connection._received`) is the same.

The batch rules of a pass (CWIST ``app.c``; knobs in :mod:`tailreactor.config`)
------------------------------------------------------------------------------
* A pass serves at most ``CWIST_HTTP_BATCH`` requests.
* After every ``CWIST_HTTP_YIELD_BATCH`` requests with more still queued, the
  pass stops early.  Whenever requests remain queued at the end of a pass, the
  output is sent and a *continuation* (the next pass) is ``post``-ed, so other
  ready connections run first.  While a continuation is pending the fd is not
  armed for read: the pipeline must drain before more input is parsed.
  (CWIST breaks when ``served + 1`` is a multiple of the yield batch; we break
  after ``served`` is, which is what the knob's documentation says.)
* **Late bypass**: when the pass runs inside a callback the reactor
  dispatched because its event aged past ``CWIST_REACTOR_TAIL_US``
  (``reactor.dispatch_late()``), the pass does not yield every YIELD_BATCH: the
  connection already waited too long, so it gets its whole batch now.  It
  still stops at ``CWIST_HTTP_BATCH``.

What the connection waits for next (exactly one, see :meth:`Connection._next`)
-------------------------------------------------------------------------------
* output left after a partial ``send``: armed for WRITE, and nothing else --
  no serving, no reading -- until it drains.  This is what bounds memory when
  a client pipelines without reading: its requests stay in the kernel;
* the last answer said ``Connection: close``: graceful close;
* requests still queued: a posted continuation;
* the peer closed its side and nothing is queued: close;
* the server is stopping (:meth:`Connection.drain`): graceful close;
* otherwise: armed for READ.

Errors
------
What a request must be, and the answer when it is not (400, 414, 431, 505,
``100 Continue``), is :mod:`tailreactor.http.request`.  Every error answer
says ``Connection: close``, follows the answers to the requests before it,
and the connection then closes.  A reset or any socket error closes the
connection at once.  Nothing a client sends can raise out of a callback.

Timeouts (on the reactor clock, so tests advance a ManualClock)
---------------------------------------------------------------
Each connection has one reactor timer, re-armed lazily: a read or a send only
stores the round's stamp in ``_last_ns``; the timer, when it fires, either
finds its deadline moved and re-arms, or acts.  So the hot path does no timer
work, and an idle connection costs one timer firing per timeout period.

* **Idle** (``CWIST_HTTP_KEEP_ALIVE_TIMEOUT`` seconds, CWIST's default 15; 0 =
  never): no byte received and no output drained for that long.  With no
  request in progress the connection is closed gracefully, without an answer
  (RFC 9112 9.5); in the middle of a request it gets ``408`` first; while
  output it cannot send is pending (a client that does not read) it is closed
  at once.
* **Head** (:data:`HEADERS_TIMEOUT_US`): a request head must be complete this
  long after the read that brought its first byte, however steadily its bytes
  trickle in (slowloris).  Then ``408``.

Limits that bound a connection's memory
---------------------------------------
* Output: at most one pass of answers (``CWIST_HTTP_BATCH`` of them) waits in
  ``_out`` beyond what the kernel's send buffer took; while any waits, the
  connection neither reads nor serves.
* Header section: the callbacks see whole header fields only; a field still
  arriving sits in httptools' own buffer.  So the bytes of a head still
  incomplete after a read are counted too, and a head that has taken more
  than :data:`MAX_HEAD_BYTES` gets 431.
* Bodies are never stored (the bench routes ignore them).

An fd closed behind the server's back
-------------------------------------
If something else closes a connection's fd, the server cannot tell until the
number is reused.  The listener detects reuse when it accepts a socket whose
fd is still in its table and calls :meth:`Connection.abandon` on the old one:
its events are disarmed and its socket object detached, so it never closes
the new connection's fd.  See the backend docstrings for what each kernel
interface does with the armed, closed fd.

Closing
-------
:meth:`Connection.close` always disarms the fd before closing it (a recycled
fd number must not inherit a stale arming).  After a ``Connection: close``
answer the close is *graceful* (RFC 9112 9.6): shut down the write side, then
read and discard until the client closes or :data:`LINGER_US` passes.
Closing at once with unread input would make the kernel send RST, which can
destroy the answer still on its way to the client.

Draining (server shutdown)
--------------------------
:meth:`Connection.drain` stops reading new requests: a connection waiting for
input closes gracefully now; one with answers queued or being sent finishes
them (and the requests already parsed) first, then closes gracefully.
"""

from __future__ import annotations

import errno
import socket
import time
from dataclasses import dataclass

from ..backends import READ, WRITE
from ..timers import Timer
from . import routes
from .request import (  # noqa: F401 -- the limits are re-exported: tests and docs name them here
    HEAD,
    IDLE,
    MAX_HEAD_BYTES,
    MAX_HEADER_BYTES,
    MAX_HEADERS,
    MAX_TARGET_BYTES,
    RECV_BYTES,
    RequestPipeline,
)
from .routes import BAD_REQUEST, SLOW_PREFIX, respond, service_ns

#: Bytes of a connection's own RX-uring buffer (``CWIST_RX_URING``): a receive
#: in flight needs a buffer of its own, and an idle keep-alive connection
#: always has one in flight, so this costs RX_BYTES per connection (2 MiB at
#: 1024 connections).  8 KiB made the 1024-connection memory test fail its
#: bound (tests/test_reliability_leaks.py); wrk's requests are about 40
#: bytes, and a longer head simply arrives in several receives.  io_uring's
#: provided buffers (the kernel picks a buffer at completion) would make the
#: cost per receive completed instead of per connection.
RX_BYTES = 2048
#: A request head must be complete this long after its first byte arrived
#: (slowloris); then 408.  CWIST's http.h gives its header read the same
#: total budget, 120 s (a compile-time constant there, not a variable).
HEADERS_TIMEOUT_US = 120_000_000
#: How long a graceful close waits for the client to close, in microseconds.
LINGER_US = 2_000_000


@dataclass(slots=True)
class ConnStats:
    """Plain-int counters of one connection (tests and debugging read them).

    ``reads``/``bytes_in``: ``recv`` calls that returned data, and their bytes;
    ``requests``: final answers produced (error answers included, ``100
    Continue`` not); ``passes``: serving passes;
    ``max_pass``: most answers in one pass; ``late_passes``: passes run with
    ``dispatch_late()`` true; ``continuations``: passes posted to run later;
    ``partial_sends``: sends that left output behind (then armed for WRITE).
    """

    reads: int = 0
    bytes_in: int = 0
    requests: int = 0
    passes: int = 0
    max_pass: int = 0
    late_passes: int = 0
    continuations: int = 0
    partial_sends: int = 0


def busy_wait_ns(ns: int) -> None:
    """Spin for ``ns`` nanoseconds of real time (``CWIST_BENCH_DELAY_US``).

    Uses ``time.perf_counter_ns``, never the reactor clock: under a test's
    ManualClock a spin on the reactor clock would never end.
    """
    end = time.perf_counter_ns() + ns
    while time.perf_counter_ns() < end:
        pass


def _bench_work(listener, target: bytes) -> None:
    """The busy-waits the bench knobs give one request to ``target`` (``listener.bench_work``)."""
    if listener.delay_ns:
        busy_wait_ns(listener.delay_ns)
    if listener.slow_ns and target.startswith(SLOW_PREFIX):
        busy_wait_ns(listener.slow_ns)
    if listener.service_route and (cost_ns := service_ns(target)):
        busy_wait_ns(cost_ns)  # the cost a traffic class's request names (/service/<us>/)


class Connection(RequestPipeline):
    """An accepted socket and its parse/serve state.  Created by the Listener.

    ``fd``, ``peer`` (address tuple), ``stats`` (:class:`ConnStats`) and
    ``closed`` are public; everything else belongs to the state machine.
    """

    def __init__(self, listener, sock: socket.socket, peer):
        self.sock = sock
        self.fd = sock.fileno()
        self.peer = peer
        self.stats = ConnStats()
        self.closed = False
        self._listener = listener
        self._reactor = listener.reactor
        self._init_request()
        self._served = 0  # requests the last pass served: the hint of the next read arming
        self._out = bytearray()  # answered, not yet sent
        self._closing = False  # the last answer said Connection: close
        self._peer_eof = False  # the client shut down its write side
        self._draining = False  # the server is stopping: read no new requests
        self._linger: Timer | None = None  # timer bounding a graceful close
        # Timeouts: one lazily re-armed timer (module docstring).
        self._last_ns = self._reactor.clock()  # last progress: bytes in, or output drained
        self._deadline: Timer | None = None
        # The read callbacks, bound once: re-armed after every request.
        self._read_cb = self._on_readable
        self._recv_cb = self._on_received
        # RX-uring: arm a receive into our own buffer instead of a readiness
        # poll (module docstring, "Reading").
        self._rx = self._reactor.rx_supported
        if self._rx:
            self._rx_view = memoryview(bytearray(RX_BYTES))

    def start(self) -> None:
        self._arm_read()
        if self._listener.keep_alive_ns:
            self._deadline = self._reactor.timer(self._on_deadline)
            self._deadline.arm_at_ns(self._last_ns + self._listener.keep_alive_ns)

    @property
    def backlog_bytes(self) -> int:
        """Answers produced and not yet accepted by the kernel, in bytes."""
        return len(self._out)

    # -- reading -------------------------------------------------------------------
    def _arm_read(self) -> None:
        """Wait for the next bytes: a receive (RX-uring) or read readiness."""
        if self._rx:
            self._reactor.arm_recv(self.fd, self._rx_view, self._recv_cb)
        else:
            self._reactor.arm(self.fd, READ, self._read_cb)

    def _on_readable(self, event) -> None:
        """Read readiness: one ``recv`` into the listener's shared buffer."""
        listener = self._listener
        try:
            n = self.sock.recv_into(listener.recv_buffer)
        except (BlockingIOError, InterruptedError):
            self._reactor.arm(self.fd, READ, self._read_cb)  # nothing after all
            return
        except OSError:
            self.close()  # ECONNRESET and friends: nobody left to answer
            return
        self._received(n, listener.recv_view, event.ready_ns)

    def _on_received(self, event) -> None:
        """A receive completed (RX-uring): the kernel already put the bytes in our buffer."""
        n = event.result
        if n < 0:
            if n == -errno.EAGAIN:
                # CWIST's learn flag: this connection prefers readiness + recv.
                self._rx = False
                self._reactor.arm(self.fd, READ, self._read_cb)
            else:
                self.close()  # -ECONNRESET and friends
            return
        view = self._rx_view
        if n < len(view):
            self._received(n, view, event.ready_ns)
            return
        # Rare: the buffer filled, so more may be queued.  Parse this part, then
        # read the rest into the listener's buffer, as the one readiness read of
        # RECV_BYTES would have (the pipeline rules see what has arrived).
        stats = self.stats
        stats.reads += 1
        stats.bytes_in += n
        self._parse(view[:n], event.ready_ns)
        listener = self._listener
        try:
            more = self.sock.recv_into(listener.recv_buffer)
        except (BlockingIOError, InterruptedError):
            more = -1  # nothing more queued now
        except OSError:
            self.close()
            return
        if more >= 0:
            self._received(more, listener.recv_view, event.ready_ns)  # more bytes, or EOF
            return
        self._last_ns = event.ready_ns  # nothing more queued: serve what arrived
        if self._pipeline:
            self._serve(self._reactor.dispatch_late())
        else:
            self._next()

    def _received(self, n: int, buffer: memoryview, now_ns: int) -> None:
        """``n`` bytes at the start of ``buffer`` arrived (0: EOF): parse, then serve or wait."""
        self._last_ns = now_ns
        if n == 0:
            self._peer_eof = True
        else:
            stats = self.stats
            stats.reads += 1
            stats.bytes_in += n
            self._parse(buffer[:n], now_ns)
        if self._pipeline:
            self._serve(self._reactor.dispatch_late())
        else:
            self._next()  # a partial request, or EOF: nothing to answer yet

    def _head_began(self, now_ns: int) -> None:
        """A head is still incomplete after its first read: start the head deadline (slowloris)."""
        due = now_ns + self._listener.headers_timeout_ns
        if self._deadline is None:
            self._deadline = self._reactor.timer(self._on_deadline)
        if not self._deadline.armed or self._deadline.deadline_ns > due:
            self._deadline.arm_at_ns(due)

    # -- serving ---------------------------------------------------------------------
    def _serve(self, late: bool) -> None:
        """One pass over the buffered pipeline (see the module docstring), then :meth:`_next`."""
        listener = self._listener
        pipeline, out = self._pipeline, self._out
        batch, yield_every, bench_work = listener.batch, listener.yield_batch, listener.bench_work
        probe = self._reactor.probe
        served = 0
        while pipeline and served < batch:
            method, target, keep_alive = pipeline.popleft()
            if method is None:
                out += target  # an answer queued by the parser: an error (closes) or 100 Continue
                if keep_alive:
                    continue  # interim: not a request served
            else:
                answer = respond(method, target, keep_alive, probe)
                out += answer
                if answer is BAD_REQUEST:
                    keep_alive = False  # no path we serve: that answer says close
            if bench_work:  # a bench knob gives requests a cost (off: nothing per request)
                _bench_work(listener, target)
            served += 1
            if not keep_alive:
                self._closing = True
                pipeline.clear()  # requests after a closing one are never answered
                break
            if not late and served % yield_every == 0 and pipeline:
                break  # yield: the rest runs in a continuation
        self._served = served
        stats = self.stats
        stats.requests += served
        stats.passes += 1
        if served > stats.max_pass:
            stats.max_pass = served
        if late:
            stats.late_passes += 1
        self._next()

    def _continue(self, _data) -> None:
        """A posted continuation: the next pass over what is still queued."""
        if not self.closed:
            self._serve(False)

    def _next(self) -> None:
        """Send pending output, then arm/post/close: what this connection waits for next."""
        if self._out and not self._send():
            if not self.closed:
                self._reactor.arm(self.fd, WRITE, self._on_writable)
            return
        if self._closing:
            self._close_gracefully()
        elif self._pipeline:
            self.stats.continuations += 1
            self._reactor.post(self._continue)
        elif self._peer_eof:
            self.close()
        elif self._draining:
            self._close_gracefully()  # everything received is answered and sent
        # Wait for the next request (as _arm_read, inlined: once per request).  The
        # event's hint is the requests this pass served: what a size-aware dispatch
        # policy expects of the next (tailreactor/policies/shortest.py).
        elif self._rx:
            self._reactor.arm_recv(self.fd, self._rx_view, self._recv_cb).hint = self._served
        else:
            self._reactor.arm(self.fd, READ, self._read_cb).hint = self._served

    # -- writing ---------------------------------------------------------------------
    def _send(self) -> bool:
        """One ``send`` of the pending output; True when all of it went out.

        Closes the connection on a socket error (and returns False).
        """
        try:
            n = self.sock.send(self._out)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError:
            self.close()  # EPIPE, ECONNRESET: the client is gone
            return False
        del self._out[:n]
        if self._out:
            self.stats.partial_sends += 1
            return False
        return True

    def _on_writable(self, event) -> None:
        self._last_ns = event.ready_ns
        if self._out and not self._send():
            if not self.closed:
                self._reactor.arm(self.fd, WRITE, self._on_writable)
            return
        if self._pipeline and not self._closing:
            self._serve(self._reactor.dispatch_late())  # a readiness callback: serve a pass
        else:
            self._next()

    # -- timeouts ----------------------------------------------------------------------
    def _due_ns(self) -> int | None:
        """The earliest deadline in force now, or None (see the module docstring)."""
        due = None
        keep_alive_ns = self._listener.keep_alive_ns
        if keep_alive_ns:
            due = self._last_ns + keep_alive_ns
        if self._phase == HEAD and self._head_started_ns is not None:
            head_due = self._head_started_ns + self._listener.headers_timeout_ns
            due = head_due if due is None else min(due, head_due)
        return due

    def _on_deadline(self, timer) -> None:
        if self.closed or self._closing:
            return  # closing has its own bound (LINGER_US)
        now = self._reactor.clock()
        if self._pipeline:
            # Requests queued, a continuation pending: busy, not idle.
            timer.arm_at_ns(now + (self._listener.keep_alive_ns or self._listener.headers_timeout_ns))
            return
        due = self._due_ns()
        if due is None:
            return
        if now < due:
            timer.arm_at_ns(due)  # progress since the timer was armed: move it
            return
        self._time_out()

    def _time_out(self) -> None:
        if self._out:
            self.close()  # it does not read what we send: nothing graceful is possible
        elif self._phase != IDLE:
            # Mid-request (a head or body still arriving): say why (RFC 9110 15.5.9).
            self._reactor.disarm(self.fd, READ)
            self._out += routes.REQUEST_TIMEOUT
            self.stats.requests += 1
            self._closing = True
            self._next()
        else:
            self._close_gracefully()  # an idle keep-alive connection (RFC 9112 9.5)

    # -- closing ---------------------------------------------------------------------
    def drain(self) -> None:
        """Server shutdown: read no new requests; finish what is in progress, then close.

        A connection waiting for input closes gracefully now; one with answers
        queued or being sent closes once they are sent (:meth:`_next`).
        """
        if self.closed or self._draining:
            return
        self._draining = True
        ev = self._reactor.armed(self.fd, READ)
        if ev is not None and (ev.callback == self._read_cb or ev.callback == self._recv_cb):
            self._close_gracefully()

    def _close_gracefully(self) -> None:
        """Half-close, then wait (bounded) for the client to close; see the module docstring."""
        if self._peer_eof:
            self.close()
            return
        self._closing = True
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self.close()
            return
        self._linger = self._reactor.call_later_us(LINGER_US, self._on_linger_timeout)
        self._reactor.arm(self.fd, READ, self._on_linger_readable)

    def _on_linger_readable(self, event) -> None:
        try:
            n = self.sock.recv_into(self._listener.recv_buffer)
        except (BlockingIOError, InterruptedError):
            n = -1
        except OSError:
            n = 0
        if n == 0:
            self.close()  # the client closed too (or reset): done
        else:
            self._reactor.arm(self.fd, READ, self._on_linger_readable)  # discard and wait on

    def _on_linger_timeout(self, timer) -> None:
        self.close()

    def close(self) -> None:
        """Disarm, then close the socket, and leave the listener's table.  Idempotent."""
        if self.closed:
            return
        self._release()
        self._listener.forget(self)  # before close: the fd number is then free for reuse
        try:
            self.sock.close()
        except OSError:
            pass  # EBADF: someone else closed our fd; it is gone either way

    def abandon(self) -> None:
        """Our fd was closed behind our back and its number now names another socket.

        Disarm the stale events (on io_uring this cancels a poll that still
        holds the old socket open) and detach the socket object without
        closing the fd, which is no longer ours.  The listener calls this.
        """
        if self.closed:
            return
        self._release()
        self.sock.detach()

    def _release(self) -> None:
        self.closed = True
        self._reactor.disarm(self.fd)
        for timer in (self._linger, self._deadline):
            if timer is not None:
                timer.cancel()
        self._pipeline.clear()
