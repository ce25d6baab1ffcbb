"""One HTTP/1.x connection: parse into a buffered pipeline, serve it in batches.

Role
----
The per-connection state machine of the bench server, on one reactor thread.
Reading and serving are two separate steps:

1. **Parse.** One ``recv`` per read-readiness; everything received is fed to
   ``httptools.HttpRequestParser``.  httptools cannot pause in the middle of a
   buffer, so every complete request in it lands in ``pipeline``, a FIFO of
   ``(method, target, keep_alive)`` -- the *buffered pipeline*.  A request
   the parser rejects is queued as ``(None, answer_bytes, False)``: its error
   answer, in order behind the requests received before it.
2. **Serve.** A *pass* answers requests from the front of the pipeline into
   one output buffer, then sends that buffer with one ``send`` (coalesced
   output: one syscall for a whole pipelined batch).

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
* **Late bypass** (issue 3): when the pass runs inside a callback the reactor
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
* otherwise: armed for READ.

Errors
------
A request httptools rejects gets ``400`` (``414`` for a target over
:data:`MAX_TARGET_BYTES`, ``505`` for an HTTP version other than 1.0/1.1) with
``Connection: close`` after the answers to the requests before it; then the
connection closes.  A reset or any socket error closes it at once.  Nothing a
client sends can raise out of a callback.

Closing
-------
:meth:`Connection.close` always disarms the fd before closing it (a recycled
fd number must not inherit a stale arming).  After a ``Connection: close``
answer the close is *graceful* (RFC 9112 9.6): shut down the write side, then
read and discard until the client closes or :data:`LINGER_US` passes.
Closing at once with unread input would make the kernel send RST, which can
destroy the answer still on its way to the client.
"""

from __future__ import annotations

import socket
import time
from collections import deque

import httptools

from ..backends import READ, WRITE
from . import routes

#: Longest request-target accepted; longer gets 414 (nginx's default buffer is 8 KiB too).
MAX_TARGET_BYTES = 8192
#: How long a graceful close waits for the client to close, in microseconds.
LINGER_US = 2_000_000
_VERSIONS_SERVED = ("1.0", "1.1")


class TargetTooLong(Exception):
    """Raised inside the parser's on_url callback; becomes a 414 answer."""


class ConnStats:
    """Plain-int counters of one connection (tests and debugging read them).

    ``reads``/``bytes_in``: ``recv`` calls that returned data, and their bytes;
    ``requests``: answers produced; ``passes``: serving passes;
    ``max_pass``: most answers in one pass; ``late_passes``: passes run with
    ``dispatch_late()`` true; ``continuations``: passes posted to run later;
    ``partial_sends``: sends that left output behind (then armed for WRITE).
    """

    __slots__ = ("reads", "bytes_in", "requests", "passes", "max_pass", "late_passes",
                 "continuations", "partial_sends")

    def __init__(self):
        for name in self.__slots__:
            setattr(self, name, 0)


def busy_wait_ns(ns: int) -> None:
    """Spin for ``ns`` nanoseconds of real time (``CWIST_BENCH_DELAY_US``).

    Uses ``time.perf_counter_ns``, never the reactor clock: under a test's
    ManualClock a spin on the reactor clock would never end.
    """
    end = time.perf_counter_ns() + ns
    while time.perf_counter_ns() < end:
        pass


class Connection:
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
        self._parser = httptools.HttpRequestParser(self)
        self._target = b""                 # request-target of the message being parsed
        self._pipeline: deque = deque()    # parsed, not yet answered: (method, target, keep_alive)
        self._out = bytearray()            # answered, not yet sent
        self._closing = False              # the last answer said Connection: close
        self._peer_eof = False             # the client shut down its write side
        self._linger = None                # timer bounding a graceful close

    def start(self) -> None:
        self._reactor.arm(self.fd, READ, self._on_readable)

    # -- httptools callbacks (called from feed_data) -----------------------------
    def on_message_begin(self) -> None:
        self._target = b""

    def on_url(self, fragment: bytes) -> None:
        # httptools hands the target over in pieces when it spans reads.
        self._target += fragment
        if len(self._target) > MAX_TARGET_BYTES:
            raise TargetTooLong

    def on_message_complete(self) -> None:
        parser = self._parser
        keep_alive = parser.should_keep_alive()
        # HTTP/1.1 and 1.0-with-keep-alive are the hot path; only a closing
        # request pays for the version check (0.9 and 2.0 never keep alive).
        if not keep_alive and parser.get_http_version() not in _VERSIONS_SERVED:
            self._pipeline.append((None, routes.VERSION_NOT_SUPPORTED, False))
            return
        self._pipeline.append((parser.get_method(), self._target, keep_alive))

    # -- reading -------------------------------------------------------------------
    def _on_readable(self, event) -> None:
        listener = self._listener
        try:
            n = self.sock.recv_into(listener.recv_buffer)
        except (BlockingIOError, InterruptedError):
            self._reactor.arm(self.fd, READ, self._on_readable)  # nothing after all
            return
        except OSError:
            self.close()  # ECONNRESET and friends: nobody left to answer
            return
        if n == 0:
            self._peer_eof = True
        else:
            self.stats.reads += 1
            self.stats.bytes_in += n
            self._parse(listener.recv_view[:n])
        if self._pipeline:
            self._serve(self._reactor.dispatch_late())
        else:
            self._next()  # a partial request, or EOF: nothing to answer yet

    def _parse(self, data) -> None:
        """Feed received bytes; complete requests (and a final error) go to the pipeline."""
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # The request asking to upgrade is complete and queued; we ignore
            # the Upgrade header (RFC 9110 7.8 allows that) and answer it, but
            # httptools stops parsing at an upgrade, so that answer closes.
            if self._pipeline:
                method, target, _ = self._pipeline[-1]
                self._pipeline[-1] = (method, target, False)
            else:
                self._pipeline.append((None, routes.BAD_REQUEST, False))
        except httptools.HttpParserError as exc:
            answer = routes.URI_TOO_LONG if isinstance(exc.__context__, TargetTooLong) else routes.BAD_REQUEST
            self._pipeline.append((None, answer, False))

    # -- serving ---------------------------------------------------------------------
    def _serve(self, late: bool) -> None:
        """One pass over the buffered pipeline (see the module docstring), then :meth:`_next`."""
        listener = self._listener
        pipeline, out = self._pipeline, self._out
        batch, yield_every, delay_ns = listener.batch, listener.yield_batch, listener.delay_ns
        probe = self._reactor.probe
        served = 0
        while pipeline and served < batch:
            method, target, keep_alive = pipeline.popleft()
            if method is None:
                out += target  # an error answer queued by the parser (always closes)
            else:
                out += routes.respond(method, target, keep_alive, probe)
            if delay_ns:
                busy_wait_ns(delay_ns)
            served += 1
            if not keep_alive:
                self._closing = True
                pipeline.clear()  # requests after a closing one are never answered
                break
            if not late and served % yield_every == 0 and pipeline:
                break  # yield: the rest runs in a continuation
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
        else:
            self._reactor.arm(self.fd, READ, self._on_readable)

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
        if self._out and not self._send():
            if not self.closed:
                self._reactor.arm(self.fd, WRITE, self._on_writable)
            return
        if self._pipeline and not self._closing:
            self._serve(self._reactor.dispatch_late())  # a readiness callback: serve a pass
        else:
            self._next()

    # -- closing ---------------------------------------------------------------------
    def _close_gracefully(self) -> None:
        """Half-close, then wait (bounded) for the client to close; see the module docstring."""
        if self._peer_eof:
            self.close()
            return
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
        self.closed = True
        self._reactor.disarm(self.fd)
        if self._linger is not None:
            self._linger.cancel()
        self._listener.forget(self)  # before close: the fd number is then free for reuse
        self.sock.close()
        self._pipeline.clear()
