"""``tailreactor-bench``: the bench HTTP server as a command (processes, signals, limits).

Role
----
Everything that belongs to the *process* rather than to a connection::

    tailreactor-bench [--host H] [--port P] [--workers N]     (default 127.0.0.1:3000)

1. Parse arguments, then every ``CWIST_*`` knob (:func:`tailreactor.config.load`).
   A bad value exits 2 with one line naming the knob, no traceback.
2. Raise the soft ``RLIMIT_NOFILE`` to the hard limit, so ``wrk -c1024`` works.
3. ``--workers 1`` (or ``CWIST_WORKERS=1``) serves in this process.  ``N > 1``
   forks N workers; each builds its own Reactor (``Reactor(worker=i)``) and its
   own ``SO_REUSEPORT`` listener on the same port, so the kernel spreads new
   connections over them (CWIST's ``CWIST_WORKERS`` model).  The parent only
   forwards signals and waits.  On io_uring each worker needs a ring, and for
   a user other than root the rings share one locked-memory limit
   (``RLIMIT_MEMLOCK``, see ``CWIST_URING_ENTRIES``): the parent first opens
   N rings at once.  If they do not fit, ``auto`` runs every worker on epoll
   with one line naming the limit and how to raise it; an explicit
   ``io_uring`` exits 2 with that line.
4. Print one start line on stderr once every worker listens, e.g.
   ``tailreactor-bench: listening on 127.0.0.1:3000, backend io_uring, workers 1, pid 42``
   (the backend the workers actually run: with ``auto`` that may be epoll).
5. SIGINT or SIGTERM stops cleanly (:func:`drain`): the listening socket
   closes first; every connection answers the requests it has already
   received, sends what it has produced, and closes; connections waiting for
   a request close at once.  This lasts at most :data:`SHUTDOWN_GRACE_US`
   (a second signal cuts it short); whatever is left is then closed.  The
   reactor closes last (writing the probe report if one is on); exit 0.

Exit codes: 0 stopped by a signal; 1 a worker failed or the port cannot be
bound; 2 bad arguments, a bad knob value, or a backend that cannot start
(``CWIST_REACTOR_BACKEND=io_uring`` where io_uring is unavailable).

Signals, safely
---------------
A Python signal handler runs between two bytecodes of whatever the main
thread is doing -- possibly in the middle of a round, inside the backend.
Calling ``reactor.stop()`` from there would re-enter the backend (wake).  So
the handler does nothing; ``signal.set_wakeup_fd`` makes the C-level handler
write the signal number to a pipe whose read end is armed in the reactor, and
the stop happens in an ordinary reactor callback.  (Both backends retry a
wait interrupted by a signal, PEP 475; the pipe is what ends it.)
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import logging
import os
import resource
import signal
import socket
import sys

from .. import config as _config
from ..backends import READ, IoUringBackend, IoUringUnavailable, UnknownBackend, create_backend
from ..backends.io_uring import memlock_hint
from ..reactor import Reactor
from .listener import Listener

PROG = "tailreactor-bench"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
#: Longest a stop waits for connections to finish, in microseconds.  Above
#: LINGER_US (2 s), so a graceful close that waits for a slow client still fits.
SHUTDOWN_GRACE_US = 5_000_000

log = logging.getLogger("tailreactor.http")


class SetupError(Exception):
    """A start-up failure with its one-line message and exit code."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


# -- arguments, config, limits ------------------------------------------------
def _int_in(lo: int, hi: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{value} is out of range: accepted {lo} to {hi}")
        return value

    return parse


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description="CWIST's bench HTTP app on the tailreactor Reactor.")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument(
        "--port",
        type=_int_in(0, 65535),
        default=3000,
        help="TCP port (default 3000; 0 picks a free port, printed at start)",
    )
    p.add_argument(
        "--workers",
        type=_int_in(1, 1024),
        default=None,
        help="worker processes sharing the port with SO_REUSEPORT (default CWIST_WORKERS, 1)",
    )
    return p.parse_args(argv)


def raise_nofile_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit; return the (soft, hard) in force.

    An unlimited hard limit is capped at ``/proc/sys/fs/nr_open`` (the kernel
    refuses more).  Failure is logged, not fatal: the server still runs.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:
            with open("/proc/sys/fs/nr_open") as f:
                target = int(f.read())
        except (OSError, ValueError):
            target = 1 << 20
    if soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("cannot raise RLIMIT_NOFILE from %d to %d: %s", soft, target, exc)
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def _backend_error(cfg: _config.Config, exc: Exception | str) -> SetupError:
    return SetupError(f"CWIST_REACTOR_BACKEND={cfg.backend} cannot start: {exc}", EXIT_USAGE)


# -- one worker: reactor + listener until a stop signal --------------------------
class StopOnSignal:
    """Stop ``reactor`` on SIGINT/SIGTERM through a wakeup pipe (module docstring).

    Stays armed: the first signal ends serving, a second one ends the drain.
    """

    def __init__(self, reactor: Reactor):
        self.reactor = reactor
        self._r, self._w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._old_wakeup = signal.set_wakeup_fd(self._w, warn_on_full_buffer=False)
        self._old = {s: signal.signal(s, _do_nothing) for s in STOP_SIGNALS}
        reactor.arm(self._r, READ, self._on_signal)

    def _on_signal(self, event) -> None:
        try:
            os.read(self._r, 64)
        except BlockingIOError:
            pass
        self.reactor.arm(self._r, READ, self._on_signal)
        self.reactor.stop()

    def close(self) -> None:
        self.reactor.disarm(self._r)
        signal.set_wakeup_fd(self._old_wakeup)
        for s, handler in self._old.items():
            signal.signal(s, handler)
        os.close(self._r)
        os.close(self._w)


def _do_nothing(signum, frame) -> None:
    """Python-level handler: the wakeup fd carries the signal to the reactor."""


def drain(reactor: Reactor, listener: Listener, grace_us: int = SHUTDOWN_GRACE_US) -> int:
    """The second phase of a stop; returns how many connections it had to cut off.

    Call after ``reactor.run()`` returned.  :meth:`Listener.drain` closes the
    listening socket and asks each connection to finish; the reactor then
    runs until the last connection has closed, ``grace_us`` passes (a reactor
    timer), or ``reactor.stop()`` is called again (a second signal).  The
    caller then closes the listener, which cuts off what is left.
    """
    if not listener.drain(reactor.stop):
        return 0
    started_ns = reactor.clock()
    deadline = reactor.call_later_us(grace_us, lambda timer: reactor.stop())
    try:
        reactor.run()
    finally:
        deadline.cancel()
    left = len(listener.connections)
    if left:
        waited_ms = (reactor.clock() - started_ns) // 1_000_000  # a second signal may end it early
        log.warning(
            "stopping: %d connection(s) still busy after %d ms (grace %d ms); closing them",
            left,
            waited_ms,
            grace_us // 1000,
        )
    return left


def serve(cfg: _config.Config, host: str, port: int, *, worker: int = 0, on_ready=None) -> int:
    """Serve until SIGINT/SIGTERM; return the exit code.  Main thread only.

    ``on_ready(listener, reactor)`` runs once the listener is armed.  Raises
    :class:`SetupError` if the backend cannot start or the port cannot be bound.
    """
    try:
        reactor = Reactor(config=cfg, worker=worker)
    except (IoUringUnavailable, UnknownBackend) as exc:
        raise _backend_error(cfg, exc) from None
    if cfg.rx_uring == "1" and not reactor.rx_supported and worker == 0:
        log.warning(
            "CWIST_RX_URING=1, but the %s backend has no receive operation: "
            "connections read on readiness + recv",
            reactor.backend_name,
        )
    try:
        try:
            listener = Listener(reactor, host, port)
        except OSError as exc:
            raise SetupError(f"cannot listen on {host}:{port}: {exc.strerror or exc}", EXIT_FAILED) from None
        stopper = StopOnSignal(reactor)
        try:
            if on_ready is not None:
                on_ready(listener, reactor)
            reactor.run()  # until the first SIGINT/SIGTERM
            drain(reactor, listener)
        finally:
            stopper.close()
            listener.close()  # the listening socket first (if drain did not), then what is left
    finally:
        reactor.close()
    return EXIT_OK


def _announce(host: str, port: int, backend: str, workers: int) -> None:
    print(
        f"{PROG}: listening on {host}:{port}, backend {backend}, workers {workers}, pid {os.getpid()}",
        file=sys.stderr,
        flush=True,
    )


def check_port_free(host: str, port: int) -> None:
    """Raise :class:`SetupError` (exit 1) if another socket already listens on ``host:port``.

    Our listeners set ``SO_REUSEPORT`` so that our own workers can share the
    port -- which would also let a second, unrelated ``tailreactor-bench``
    silently join the group and take half the load.  A bind *without*
    ``SO_REUSEPORT`` fails with EADDRINUSE whenever anything listens there, so
    one such bind (then close) before our own tells the two cases apart.
    Port 0 asks for a free port: nothing to check.
    """
    if port == 0:
        return
    probe = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
    except OSError as exc:
        raise SetupError(f"cannot listen on {host}:{port}: {exc.strerror or exc}", EXIT_FAILED) from None
    finally:
        probe.close()


_PR_SET_PDEATHSIG = 1


def rings_refused(entries: int, n: int) -> str | None:
    """None if ``n`` io_uring rings of ``entries`` can be open at once here, else why not.

    They are opened together and closed again: the locked memory they need is
    charged to one per-user limit, so one ring fitting says nothing about n.
    """
    held = []
    try:
        for _ in range(n):
            held.append(IoUringBackend(entries))
    except IoUringUnavailable as exc:
        if exc.errno != errno.ENOMEM or not held:
            return exc.reason
        return f"{n} workers need {n} io_uring rings and only {len(held)} fit: {memlock_hint(entries)}"
    finally:
        for backend in held:
            backend.close()
    return None


# -- N workers: fork, forward signals, wait ----------------------------------------
def run_workers(cfg: _config.Config, host: str, port: int, n: int) -> int:
    """Fork ``n`` workers serving ``host:port``; return the exit code.

    The parent first proves the backend starts (so a bad backend fails once,
    with exit 2, not once per worker) and binds a placeholder ``SO_REUSEPORT``
    socket, which resolves ``--port 0`` to one port for every worker and
    reports EADDRINUSE before forking.  It never listens on it.  Workers
    report readiness through a pipe; the start line is printed after all of
    them listen.
    """
    cfg = _workers_backend(cfg, n)
    placeholder = _placeholder(host, port)
    port = placeholder.getsockname()[1]

    parent_pid = os.getpid()
    ready_r, ready_w = os.pipe()
    children: dict[int, int] = {}  # pid -> worker index
    stop_requested = False

    def forward(signum, frame):
        nonlocal stop_requested
        stop_requested = True
        _signal_all(children, signum)

    # Block the stop signals across fork: a child must not run the parent's
    # forwarding handler before installing its own.
    old = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        for i in range(n):
            pid = os.fork()
            if pid == 0:  # the worker
                os.close(ready_r)
                placeholder.close()
                os._exit(_worker_main(cfg, host, port, i, ready_w, parent_pid))
            children[pid] = i
        for s in STOP_SIGNALS:
            signal.signal(s, forward)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        os.close(ready_w)

    try:
        backends = _read_ready(ready_r, n)
        started = len(backends) == n
        if started:
            _announce(host, port, "/".join(sorted(set(backends))), n)
        elif not stop_requested:
            _signal_all(children, signal.SIGTERM)  # a worker failed to start: stop the others
        return _reap(children, started, lambda: stop_requested)
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        os.close(ready_r)
        placeholder.close()


def _workers_backend(cfg: _config.Config, n: int) -> _config.Config:
    """``cfg`` with the backend ``n`` workers can start, checked once here (exit 2 on a bad one).

    ``auto`` falls back to epoll, with one warning, when the memlock limit
    refuses ``n`` rings; ``io_uring`` then fails.
    """
    if cfg.backend in ("auto", "io_uring"):
        refused = rings_refused(cfg.uring_entries, n)
        if refused is not None and cfg.backend == "io_uring":
            raise _backend_error(cfg, refused)
        if refused is not None:  # one line here, not one per worker
            log.warning("CWIST_REACTOR_BACKEND=auto: every worker runs on epoll (%s)", refused)
            return cfg.replace(backend="epoll")
        return cfg
    try:
        create_backend(cfg.backend).close()
    except (IoUringUnavailable, UnknownBackend) as exc:
        raise _backend_error(cfg, exc) from None
    return cfg


def _placeholder(host: str, port: int) -> socket.socket:
    """A bound, never listening ``SO_REUSEPORT`` socket on ``host:port`` (``SetupError`` if it cannot bind)."""
    placeholder = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        placeholder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        placeholder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        placeholder.bind((host, port))
    except OSError as exc:
        placeholder.close()
        raise SetupError(f"cannot listen on {host}:{port}: {exc.strerror or exc}", EXIT_FAILED) from None
    return placeholder


def _reap(children: dict[int, int], started: bool, stop_requested) -> int:
    """Wait for every worker (``children``: pid -> index) to exit; return the parent's exit code.

    A worker that exits while the others serve is logged.  Once a stop was
    requested (``stop_requested()``, set by the parent's signal handler), an
    exit 0 or by a stop signal is clean.  If not every worker started, the
    worst start-up code (2, config or backend, over 1).
    """
    startup_code = EXIT_FAILED
    failed = False
    while children:
        pid, status = os.waitpid(-1, 0)  # retried after our handler on EINTR (PEP 475)
        worker = children.pop(pid, None)
        if worker is None:
            continue
        code = os.waitstatus_to_exitcode(status)
        if stop_requested() and (code == 0 or -code in STOP_SIGNALS):
            continue  # a clean stop
        failed = True
        if not started:
            startup_code = max(startup_code, code)  # 2 (config/backend) wins over 1
        else:
            log.warning(
                "worker %d (pid %d) exited with %s; %d still serving",
                worker,
                pid,
                f"signal {-code}" if code < 0 else f"status {code}",
                len(children),
            )
    if not started and not stop_requested():
        return startup_code
    return EXIT_FAILED if failed else EXIT_OK


def _signal_all(children: dict[int, int], signum: int) -> None:
    for pid in children:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass  # exited already; waitpid will collect it


def _read_ready(fd: int, n: int) -> list[str]:
    """Read one ``<backend>\\n`` line per worker; stop early at EOF (a worker died)."""
    data = b""
    while data.count(b"\n") < n:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return [line.decode() for line in data.splitlines()]


def _stop_with_parent(parent_pid: int) -> None:
    """Ask the kernel to send this worker SIGTERM when its parent dies (prctl PR_SET_PDEATHSIG).

    Without it a parent killed with SIGKILL (which it cannot forward) leaves its
    workers serving forever, still holding the port.  SIGTERM, not SIGKILL, so
    the worker still drains and writes its probe report.  If the parent died
    before the request took effect, stop now.  Source: prctl(2).
    """
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGTERM)  # delivered once the signal is unblocked


def _worker_main(cfg: _config.Config, host: str, port: int, index: int, ready_w: int, parent_pid: int) -> int:
    """Body of a forked worker; returns its exit code (never raises)."""

    def ready(listener, reactor):
        os.write(ready_w, f"{reactor.backend_name}\n".encode())
        os.close(ready_w)

    for s in STOP_SIGNALS:
        signal.signal(s, _do_nothing)  # until serve() installs the real path
    _stop_with_parent(parent_pid)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    try:
        return serve(cfg, host, port, worker=index, on_ready=ready)
    except SetupError as exc:
        print(f"{PROG}: worker {index}: {exc}", file=sys.stderr, flush=True)
        return exc.code
    except BaseException:
        log.exception("worker %d failed", index)
        return EXIT_FAILED


# -- entry point --------------------------------------------------------------------
def main(argv=None) -> int:
    """Console entry point (``tailreactor-bench``); returns the exit code."""
    args = parse_args(argv)  # argparse exits 2 on bad arguments
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format=f"{PROG}: %(message)s")
    try:
        cfg = _config.load()
        for line in _config.warnings():
            log.warning("%s", line)
        workers = args.workers if args.workers is not None else cfg.workers
        if cfg.latency_probe and cfg.latency_probe_file is not None and workers != cfg.workers:
            _config.check_probe_file(cfg.latency_probe_file, range(workers))  # --workers: every worker's file
        raise_nofile_limit()
        check_port_free(args.host, args.port)
        if workers == 1:

            def ready(listener, reactor):
                _announce(listener.host, listener.port, reactor.backend_name, 1)

            return serve(cfg, args.host, args.port, on_ready=ready)
        return run_workers(cfg, args.host, args.port, workers)
    except _config.ConfigError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except SetupError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return exc.code


if __name__ == "__main__":
    sys.exit(main())
