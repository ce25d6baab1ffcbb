"""The listening socket: accept connections and own them until they close.

Role
----
One :class:`Listener` per reactor (per worker process).  It binds a
non-blocking TCP socket with ``SO_REUSEADDR`` and ``SO_REUSEPORT`` (so N
worker processes can each own a listener on the same port and the kernel
spreads connections over them), accepts in a bounded loop per readiness, and
keeps the table of live :class:`~tailreactor.http.connection.Connection`
objects so shutdown can close them all.

It also holds what every connection of this reactor shares: the knob values
read once (``batch``, ``yield_batch``, ``delay_ns``, ``slow_ns``, ``service_route``
and ``bench_work``, whether any of those three is on, ``keep_alive_ns``), the head deadline (``headers_timeout_ns``, from
:data:`~tailreactor.http.connection.HEADERS_TIMEOUT_US`) and one receive
buffer (callbacks run one at a time on the reactor thread, and the parser
copies what it keeps, so one buffer serves every connection).

Accept loop
-----------
At most :data:`ACCEPTS_PER_CALLBACK` accepts per readiness, then re-arm: a
burst of connections must not starve the connections already being served.
Accepted sockets get ``TCP_NODELAY`` (responses are small and must not wait
for Nagle).

Out of descriptors (EMFILE/ENFILE)
----------------------------------
The pending connection stays in the kernel's backlog, so the listener stays
readable: re-arming at once would spin at 100% CPU.  Instead the listener is
left unarmed and a reactor timer re-arms it after :data:`ACCEPT_BACKOFF_US`.
The first time this happens a warning is logged (once per listener: under
sustained overload a log line per back-off would be its own problem).

An injected stall (test knobs)
------------------------------
With ``CWIST_BENCH_STALL_US`` and ``CWIST_BENCH_STALL_EVERY_MS`` both set, a
reactor timer busy-waits the stall's length once per period (start to start),
blocking every connection at once, as a slow callback or a page fault would.
It is how the tail-latency job checks that its open-loop load sees a stall.

A recycled fd number
--------------------
If an accepted socket's fd is still in the table, the connection there had
its fd closed behind its back (not by :meth:`Connection.close`, which leaves
the table first).  It is abandoned -- disarmed, its socket object detached so
it cannot close the newcomer's fd -- and a warning is logged once.

Stopping
--------
:meth:`Listener.drain` (graceful: listening socket first, then every
connection finishes what it has) and :meth:`Listener.close` (at once).
"""

from __future__ import annotations

import errno
import logging
import socket

from ..backends import READ
from ..timers import Timer
from .connection import HEADERS_TIMEOUT_US, RECV_BYTES, Connection, busy_wait_ns

log = logging.getLogger("tailreactor.http")

#: Most connections accepted per readiness callback.
ACCEPTS_PER_CALLBACK = 64
#: Pause before accepting again after EMFILE/ENFILE, in microseconds.
ACCEPT_BACKOFF_US = 100_000
#: listen(2) backlog; the kernel caps it at net.core.somaxconn.
BACKLOG = 4096

_OUT_OF_FDS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class ListenerStats:
    """``accepts``: connections accepted; ``accept_callbacks``: readiness
    callbacks of the listening socket; ``accept_backoffs``: EMFILE/ENFILE pauses;
    ``stalls``: injected stalls run (``CWIST_BENCH_STALL_US``)."""

    __slots__ = ("accepts", "accept_callbacks", "accept_backoffs", "stalls")

    def __init__(self):
        self.accepts = self.accept_callbacks = self.accept_backoffs = self.stalls = 0


class Listener:
    """Listen on ``host:port`` (``port`` 0 picks a free one) and serve the bench routes.

    Binds and arms at construction; raises ``OSError`` from bind/listen (e.g.
    ``EADDRINUSE``).  ``port`` is the bound port; ``connections`` maps fd to
    :class:`Connection`; ``stats`` is a :class:`ListenerStats`.  Reactor
    thread only.
    """

    def __init__(self, reactor, host: str = "127.0.0.1", port: int = 3000, *, backlog: int = BACKLOG):
        self.reactor = reactor
        cfg = reactor.config
        self.batch = cfg.http_batch
        self.yield_batch = cfg.http_yield_batch
        self.delay_ns = cfg.bench_delay_us * 1000
        self.slow_ns = cfg.bench_slow_us * 1000
        self.service_route = cfg.bench_service_route  # GET /service/<us>/<id> busy-waits <us>
        # One of the three above is on: a request may cost a busy-wait (Connection._bench_work).
        self.bench_work = bool(self.delay_ns or self.slow_ns or self.service_route)
        self.keep_alive_ns = cfg.http_keep_alive_timeout_s * 1_000_000_000  # 0: never
        self.headers_timeout_ns = HEADERS_TIMEOUT_US * 1000
        self.recv_buffer = bytearray(RECV_BYTES)
        self.recv_view = memoryview(self.recv_buffer)
        self.connections: dict[int, Connection] = {}
        self.stats = ListenerStats()
        self.closed = False  # not accepting any more (drain or close)
        self._warned_out_of_fds = False
        self._warned_fd_reuse = False
        self._on_drained = None  # set by drain(): called when the last connection leaves

        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            self.sock.bind((host, port))
            self.sock.listen(backlog)
            self.sock.setblocking(False)
        except OSError:
            self.sock.close()
            raise
        self.fd = self.sock.fileno()
        self.host, self.port = self.sock.getsockname()[:2]
        self._backoff = reactor.timer(self._on_backoff_over)
        # The injected stall (test knobs): a timer that blocks the whole loop once per period.
        self._stall: Timer | None = None
        if cfg.bench_stall_us and cfg.bench_stall_every_ms:
            self._stall_ns = cfg.bench_stall_us * 1000
            self._stall_every_ns = cfg.bench_stall_every_ms * 1_000_000
            self._stall_due_ns = reactor.clock() + self._stall_every_ns
            self._stall = reactor.timer(self._on_stall)
            self._stall.arm_at_ns(self._stall_due_ns)
        reactor.arm(self.fd, READ, self._on_acceptable)

    def _on_acceptable(self, event) -> None:
        self.stats.accept_callbacks += 1
        for _ in range(ACCEPTS_PER_CALLBACK):
            try:
                sock, peer = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                break  # backlog empty
            except OSError as exc:
                if exc.errno in _OUT_OF_FDS:
                    self._back_off(exc)
                    return  # not re-armed: the back-off timer does it
                # ECONNABORTED and the like: that client gave up; take the next.
                log.debug("accept on fd %d failed: %s", self.fd, exc)
                continue
            self._adopt(sock, peer)
        self.reactor.arm(self.fd, READ, self._on_acceptable)

    def _adopt(self, sock: socket.socket, peer) -> None:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Connection(self, sock, peer)
        stale = self.connections.get(conn.fd)
        if stale is not None:
            self._abandon(stale)
        self.connections[conn.fd] = conn
        self.stats.accepts += 1
        conn.start()

    def _back_off(self, exc: OSError) -> None:
        self.stats.accept_backoffs += 1
        if not self._warned_out_of_fds:
            self._warned_out_of_fds = True
            log.warning(
                "accept on %s:%d: %s (%s); pausing accepts for %d us at a time "
                "(logged once; raise RLIMIT_NOFILE or use fewer connections)",
                self.host,
                self.port,
                errno.errorcode.get(exc.errno or 0, exc.errno),
                exc.strerror,
                ACCEPT_BACKOFF_US,
            )
        self._backoff.arm_us(ACCEPT_BACKOFF_US)

    def _on_stall(self, timer) -> None:
        """Block the loop for the stall's length; the next is due one period after this one was.

        If that time has already passed (the stall, or the loop before it, took
        longer than the period), the next is due at once: it runs in the next
        round, and missed periods are not made up.
        """
        busy_wait_ns(self._stall_ns)
        self.stats.stalls += 1
        self._stall_due_ns = max(self._stall_due_ns + self._stall_every_ns, self.reactor.clock())
        timer.arm_at_ns(self._stall_due_ns)

    def _on_backoff_over(self, timer) -> None:
        if not self.closed:
            self.reactor.arm(self.fd, READ, self._on_acceptable)

    def _abandon(self, stale: Connection) -> None:
        if not self._warned_fd_reuse:
            self._warned_fd_reuse = True
            log.warning(
                "fd %d was closed behind the server's back while connection %s used it; "
                "that connection is abandoned (logged once)",
                stale.fd,
                stale.peer,
            )
        stale.abandon()

    def forget(self, conn: Connection) -> None:
        """Called by a connection as it closes."""
        if self.connections.get(conn.fd) is conn:
            del self.connections[conn.fd]
            if self._on_drained is not None and not self.connections:
                self._on_drained()

    def _stop_accepting(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._backoff.cancel()
        if self._stall is not None:
            self._stall.cancel()
        self.reactor.disarm(self.fd)
        # io_uring: the pending POLL_ADD holds the listening socket open until
        # its cancel reaches the kernel (normally with the next wait); until
        # then connections would still land in the backlog, then be reset.
        # Submit the cancel now so the close below really stops accepting.
        self._submit_cancels()
        self.sock.close()

    def _submit_cancels(self) -> None:
        """Make queued disarms reach the kernel now (io_uring; a no-op on epoll)."""
        self.reactor.flush()  # 0 and no error once the reactor is closed: every poll is gone

    def drain(self, on_drained) -> bool:
        """Graceful stop: close the listening socket, then let every connection finish.

        Each connection answers what it has already received and sends it,
        then closes (:meth:`Connection.drain`).  ``on_drained()`` runs once the
        last one has left.  Returns False if none was left to wait for (then
        ``on_drained`` is not called).
        """
        self._stop_accepting()
        for conn in list(self.connections.values()):
            conn.drain()
        if not self.connections:
            return False
        self._on_drained = on_drained  # after the loop: connections that closed at once do not count
        return True

    def close(self) -> None:
        """Stop accepting first, then close every connection at once.  Idempotent."""
        self._stop_accepting()
        self._on_drained = None
        for conn in list(self.connections.values()):
            conn.close()
        # io_uring: a connection's pending poll holds its socket open until the
        # cancel is submitted; submit them all now so every client sees the close
        # now, not at the reactor's next wait (which may never come).
        self._submit_cancels()
