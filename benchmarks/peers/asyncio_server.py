"""Peer server for comparisons: asyncio.Protocol + httptools, same routes and bytes as tailreactor-bench.

Role
----
The baseline of issue 9: what a user gets by writing the bench app on asyncio
(or uvloop with ``--uvloop``) instead of on our reactor.  Answers are byte-for-byte the
bench server's (``tailreactor.http.routes.respond``), so wrk measures the event
loops, not different responses.  One process, one loop.

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

import httptools

from tailreactor.http import routes


class HttpProtocol(asyncio.Protocol):
    """Parse with httptools; answer every complete request at once, coalesced per data_received."""

    __slots__ = ("transport", "parser", "target", "out", "close_after")

    def connection_made(self, transport):
        self.transport = transport
        self.parser = httptools.HttpRequestParser(self)
        self.target = b""
        self.out = bytearray()
        self.close_after = False
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def on_url(self, url):
        self.target += url

    def on_message_complete(self):
        keep_alive = self.parser.should_keep_alive()
        self.out += routes.respond(self.parser.get_method(), self.target, keep_alive, None)
        self.target = b""
        if not keep_alive:
            self.close_after = True

    def data_received(self, data):
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.out += routes.BAD_REQUEST
            self.close_after = True
        if self.out:
            self.transport.write(bytes(self.out))
            self.out.clear()
        if self.close_after:
            self.transport.close()


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
        loop.create_server(HttpProtocol, args.host, args.port, reuse_address=True, backlog=4096))
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
