"""The bench HTTP server: CWIST's bench app on the tailreactor Reactor.

Modules, one job each (read them in this order):

* :mod:`.routes` -- the routes and their pre-built response bytes;
* :mod:`.request` -- bytes in, the buffered pipeline out: the httptools
  callbacks and what a request must be (shared with the asyncio/uvloop peers);
* :mod:`.connection` -- one connection: parse into a buffered pipeline, serve
  it in batches (``CWIST_HTTP_BATCH``, ``CWIST_HTTP_YIELD_BATCH``, the late
  bypass), coalesced output, partial sends, graceful close;
* :mod:`.listener` -- the listening socket: bounded accept loop, EMFILE
  back-off, the table of live connections;
* :mod:`.server` -- the ``tailreactor-bench`` command: arguments, config,
  RLIMIT_NOFILE, worker processes, signals.

In-process use (tests do this)::

    reactor = Reactor("epoll")
    listener = Listener(reactor, "127.0.0.1", 0)   # listener.port is the port
    reactor.run()                                  # until reactor.stop()
"""

from .connection import Connection
from .listener import Listener

__all__ = ["Listener", "Connection"]
