"""Backend clause B6, EOF, HUP and ERR, checked on the backend object itself: a peer's close,
a pipe's hang-up, an error and a reset reach the armed token.
"""

from __future__ import annotations

import os
import socket
import time

import pytest

from tailreactor.backends import READ, WRITE
from tailreactor.backends.base import SATISFIES
from tailreactor_conformance.harness import (
    LIVENESS_S,
    revents_named,
    shown,
)


# -- B6 ------------------------------------------------------------------------
def _reported_once(b, token, direction):
    got = []
    deadline = time.monotonic() + LIVENESS_S
    while not got and time.monotonic() < deadline:
        got = b.wait(0.01)
    got += b.wait(0)
    name = "READ" if direction == READ else "WRITE"
    assert [tok for tok, _ in got] == [token], (
        f"reported {shown(got)}: expected {token!r} once, the {name} arming of an fd whose HUP or ERR "
        "came with no IN or OUT (a hang-up or an error satisfies whichever direction is armed)"
    )
    revents = got[0][1]
    assert revents & SATISFIES[direction], f"revents {revents_named(revents)} do not satisfy {name}"


@pytest.mark.clause("B6")
def test_peer_close_reaches_the_read_token(make_backend, pairs):
    b = make_backend()
    (p,) = pairs(1)
    b.arm(p.fd, READ, "eof")
    b.flush()
    p.peer.close()
    _reported_once(b, "eof", READ)
    assert p.ours.recv(1) == b""


@pytest.mark.clause("B6")
def test_pipe_hangup_without_data_reaches_the_read_token(make_backend):
    b = make_backend()
    r, w = os.pipe()
    try:
        b.arm(r, READ, "hup")
        b.flush()
        os.close(w)  # POLLHUP alone: no POLLIN on a pipe whose writers are gone
        w = -1
        _reported_once(b, "hup", READ)
        b.disarm(r, READ)
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


@pytest.mark.clause("B6")
def test_error_without_room_reaches_the_write_token(make_backend):
    b = make_backend()
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        while True:  # fill the pipe: POLLOUT is gone
            try:
                os.write(w, b"\0" * 65536)
            except BlockingIOError:
                break
        os.close(r)  # no reader left: POLLERR alone
        r = -1
        b.arm(w, WRITE, "err")
        _reported_once(b, "err", WRITE)
        b.disarm(w, WRITE)
    finally:
        os.close(w)
        if r >= 0:
            os.close(r)


@pytest.mark.clause("B6")
def test_reset_by_peer_reaches_the_read_token(make_backend):
    b = make_backend()
    with socket.create_server(("127.0.0.1", 0)) as srv:
        cli = socket.create_connection(srv.getsockname(), timeout=LIVENESS_S)
        acc, _ = srv.accept()
        with cli:
            cli.setblocking(False)
            b.arm(cli.fileno(), READ, "reset")
            b.flush()
            acc.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
            acc.close()  # linger 0: RST, the client socket gets ECONNRESET
            _reported_once(b, "reset", READ)
            b.disarm(cli.fileno(), READ)
