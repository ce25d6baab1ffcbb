"""Peer server for comparisons: asyncio.Protocol + httptools, same routes and bytes as tailreactor-bench.

Role
----
The baseline of issue 9: what a user gets by writing the bench app on asyncio
(or uvloop with ``--uvloop``) instead of on our reactor.  One process, one loop.

Same answers, same parsing work
-------------------------------
The protocol inherits the bench server's request side
(:class:`tailreactor.http.request.RequestPipeline`: the httptools callbacks,
the Host check, the header and target limits, 414/431/505, ``100
Continue``) and answers with the same ``routes.respond``.  So every answer,
to good and bad input alike, is byte-for-byte the bench server's
(``tests/test_peers_parity.py``), and wrk measures the event loops, not two
different HTTP apps.  It feeds the parser at most ``RECV_BYTES`` at a time,
as the bench server reads, because the 431 bound on a head still arriving
counts whole reads.  One answer still depends on where a read ends: an
``Expect: 100-continue`` head ending exactly at the end of a read gets a
``100 Continue`` even when its content came in the same write.  After an answer that says ``Connection: close`` the
close is graceful, as the bench server's: shut down the write side, discard
input until the client closes or ``LINGER_S`` passes.

What the peers leave out, and why: the bench server's serving rules
(``CWIST_HTTP_BATCH``/``YIELD_BATCH`` passes, continuations), its idle and
head timeouts, its per-connection counters and the latency probe.  Those are
what our reactor and its bench app exist to study; a user choosing asyncio
would write them again.  Nor do they stop reading a client that does not
read its answers (the bench server's back-pressure).  Under wrk (one request per read) the pass rules cost
one pass per request in the bench server and nothing here.

Usage: ``python benchmarks/peers/asyncio_server.py [--host H] [--port P] [--uvloop]``;
prints one start line to stderr and stops on SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import sys

from tailreactor.http import routes
from tailreactor.http.request import RECV_BYTES, RequestPipeline

#: How long a graceful close waits for the client to close, in seconds (the bench server's LINGER_US).
LINGER_S = 2.0


class HttpProtocol(asyncio.Protocol, RequestPipeline):
    """Parse into the buffered pipeline; answer all of it at once, one write per data_received."""

    def connection_made(self, transport):
        self.transport = transport
        self._init_request()
        self.closing = False
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data):
        if self.closing:
            return  # after a closing answer: discard until the client closes
        pipeline = self._pipeline
        if len(data) <= RECV_BYTES:
            self._parse(data, 0)
        else:
            # asyncio and uvloop hand over up to 256 KiB at once; the bench server reads at most
            # RECV_BYTES.  The 431 bound on a head still arriving counts whole reads
            # (request.MAX_HEAD_BYTES allows one read of earlier requests), so feed the parser
            # read-sized pieces: a long pipeline is then never taken for one oversized head.
            view = memoryview(data)
            for start in range(0, len(data), RECV_BYTES):
                self._parse(view[start : start + RECV_BYTES], 0)
                if pipeline and not pipeline[-1][2]:
                    break  # a closing answer (or a parse error): the rest is never answered
        if not pipeline:
            return  # a request still arriving
        answers = []
        while pipeline:
            method, target, keep_alive = pipeline.popleft()
            if method is None:
                answers.append(target)  # an answer queued by the parser: an error, or 100 Continue
            else:
                answer = routes.respond(method, target, keep_alive, None)
                answers.append(answer)
                if answer is routes.BAD_REQUEST:
                    keep_alive = False
            if not keep_alive:
                pipeline.clear()  # requests after a closing answer are never answered
                self.closing = True
        self.transport.write(answers[0] if len(answers) == 1 else b"".join(answers))
        if self.closing:
            self.transport.write_eof()  # graceful: half-close, then wait for the client
            asyncio.get_running_loop().call_later(LINGER_S, self.transport.close)

    def eof_received(self):
        return False  # the client closed: the transport closes once its output is sent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=3000)
    ap.add_argument("--uvloop", action="store_true", help="run on uvloop instead of asyncio's loop")
    args = ap.parse_args(argv)
    if args.uvloop:
        import uvloop

        loop = uvloop.new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    server = loop.run_until_complete(
        loop.create_server(HttpProtocol, args.host, args.port, reuse_address=True, backlog=4096)
    )
    port = server.sockets[0].getsockname()[1]
    kind = "uvloop" if args.uvloop else "asyncio"
    print(f"{kind}-peer: listening on {args.host}:{port}, pid {os.getpid()}", file=sys.stderr, flush=True)
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, loop.stop)
    try:
        loop.run_forever()
    finally:
        server.close()
        loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
