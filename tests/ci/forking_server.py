"""A server command for the job's tests: the parent forks a child that does all the work, then waits.

    forking_server.py PORT US      the child serves HTTP/1.1 on 127.0.0.1:PORT, spending US
                                   microseconds of CPU on each request (200, empty body, keep-alive),
                                   plus CWIST_BENCH_DELAY_US as the bench server does (--calibrate)
    forking_server.py PORT US:STATUS
                                   the same, answering every request with STATUS
    FORKING_EXIT_AFTER=N           the child exits with status 5 after N requests, the parent with it
    FORKING_NO_KEEP_ALIVE=1        the child answers `Connection: close` and closes every connection
    forking_server.py PORT silent PIDFILE
                                   the child listens but never answers; the parent writes its pid

The child binds the port, so only a process below the one the job started listens there.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer


class Busy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    cpu_s = 0.0
    status = 200
    served = 0

    def do_GET(self):
        start = time.process_time()
        while time.process_time() - start < self.cpu_s:  # CPU, not a sleep: the work to be counted
            pass
        self.send_response(self.status)
        self.send_header("Content-Length", "0")
        if os.environ.get("FORKING_NO_KEEP_ALIVE"):
            self.send_header("Connection", "close")  # http.server closes the connection after it
        self.end_headers()
        Busy.served += 1
        if Busy.served == int(os.environ.get("FORKING_EXIT_AFTER") or 0):
            self.wfile.flush()
            os._exit(5)

    def log_message(self, *args):
        pass


def main() -> None:
    port, mode = int(sys.argv[1]), sys.argv[2]
    if mode == "silent":
        with open(sys.argv[3], "w") as f:
            f.write(str(os.getpid()))
    child = os.fork()
    if child:
        _, status = os.waitpid(child, 0)
        sys.exit(os.waitstatus_to_exitcode(status) if os.environ.get("FORKING_EXIT_AFTER") else 0)
    if mode == "silent":
        s = socket.socket()
        s.bind(("127.0.0.1", port))
        s.listen()
        while True:
            s.accept()  # accepted and never answered
    us, _, status = mode.partition(":")
    Busy.cpu_s = (int(us) + int(os.environ.get("CWIST_BENCH_DELAY_US") or 0)) / 1e6
    Busy.status = int(status or 200)
    HTTPServer(("127.0.0.1", port), Busy).serve_forever()


if __name__ == "__main__":
    main()
