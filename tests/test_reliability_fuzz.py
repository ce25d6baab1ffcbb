"""Issue 8: fuzz the bench server with random and mutated requests (Hypothesis).

Property, for every input, on epoll and io_uring: the client sends the input,
half-closes, and reads until the server closes.  The server

* answers or closes -- never hangs (every read is bounded by IO_TIMEOUT_S);
* answers only in well-formed HTTP/1.1 (the whole byte stream parses as
  responses, none cut short) with a status from :data:`ALLOWED`, and an error
  answer is the last one and says ``Connection: close``;
* ends the connection with FIN, not RST (it read everything before closing);
* never crashes: the reactor's ``callback_errors`` counter stays 0;
* keeps serving a second, well-behaved connection opened before the input.

Inputs are mutations of valid requests and of every fixture in
``fixtures/http/`` (byte flips, truncation, duplicated slices, random header
fields, huge numbers, random splices), plus raw random bytes.  An input that
ever breaks the property goes into ``fixtures/http/`` and
``bad-inputs.json`` (see the fixtures README), where
``tests/test_http.py::test_bad_input_fixture`` replays it on every run.
"""

from __future__ import annotations

import json
import re
import socket

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from http_helpers import (
    FIXTURES,
    ServerThread,
    connect,
    get,
    parse_responses,
    read_responses,
    read_to_eof_raw,
    wait_for,
)

BACKENDS = [
    "epoll",
    pytest.param("io_uring", marks=pytest.mark.io_uring),
]  # as tests/conftest.py (not importable by name: tests/ci has one too)
ALLOWED = {100, 200, 400, 404, 405, 408, 414, 431, 505}

VALID = [
    get("/"),
    get("/user/42"),
    get("/plaintext", version="1.0", headers="Connection: keep-alive\r\n"),
    get("http://t/plaintext?x=1"),
    b"POST /user HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello",
    b"POST /user HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5;e=1\r\nhello\r\n0\r\nT: 1\r\n\r\n",
    b"POST /user HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc",
    get("/user/1") + get("/user/2") + get("/plaintext", headers="Connection: close\r\n"),
]
FIXTURE_INPUTS = [
    (FIXTURES / c["file"]).read_bytes() for c in json.loads((FIXTURES / "bad-inputs.json").read_text())
]
SEEDS = VALID + FIXTURE_INPUTS

TOKEN = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-!#$%&'*+.^_`|~",
    min_size=1,
    max_size=20,
).map(str.encode)
HUGE = [
    b"99999999999999999999999999",
    b"18446744073709551616",
    b"18446744073709551615",
    b"9223372036854775807",
    b"-1",
    b"0" * 300 + b"1",
    b"ffffffffffffffffffff",
]


@st.composite
def mutated(draw) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "truncate", "duplicate", "header", "huge", "splice"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "flip" and data:
            data[at] ^= draw(st.integers(1, 255))
        elif op == "truncate":
            del data[at:]
        elif op == "duplicate":
            end = draw(st.integers(at, len(data)))
            data[end:end] = data[at:end] * draw(st.integers(1, 50))
        elif op == "header":
            line_end = data.find(b"\r\n")
            pos = line_end + 2 if line_end >= 0 else len(data)
            name = draw(st.one_of(TOKEN, st.binary(min_size=1, max_size=20)))
            value = draw(st.one_of(st.binary(max_size=40), st.sampled_from(HUGE)))
            data[pos:pos] = name + b": " + value + b"\r\n"
        elif op == "huge":
            digits = list(re.finditer(rb"[0-9a-fA-F]+", bytes(data)))
            if digits:
                m = draw(st.sampled_from(digits))
                data[m.start() : m.end()] = draw(st.sampled_from(HUGE))
        elif op == "splice":
            end = draw(st.integers(at, min(len(data), at + 16)))
            data[at:end] = draw(st.binary(max_size=16))
    return bytes(data)


INPUTS = st.one_of(mutated(), st.binary(min_size=1, max_size=600))


@pytest.fixture(scope="module", params=BACKENDS)
def fuzz_server(request):
    with ServerThread(request.param) as srv:
        yield srv


def check_one(srv, raw: bytes) -> None:
    with connect(srv.port) as bystander, connect(srv.port) as c:
        try:
            c.sendall(raw)
            c.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server closed first: what it sent is still checked below
        data, ending = read_to_eof_raw(c)
        responses, cut_short = parse_responses(data)
        statuses = [r.status for r in responses]
        assert not cut_short, (raw, data)
        assert set(statuses) <= ALLOWED, (raw, statuses)
        assert ending == "eof", (raw, data)
        for r in responses[:-1]:
            assert r.status < 400 or r.status == 404 or r.status == 405, (raw, statuses)
        if responses and responses[-1].status in (400, 408, 414, 431, 505):
            assert responses[-1].headers.get("connection") == "close", (raw, data)
        bystander.sendall(get("/user/still-here"))
        assert read_responses(bystander, 1)[0].body == b"still-here", raw
    # The server thread closes its ends once it reads the clients' EOF: wait for that here, so the
    # per-test descriptor check does not race it (it once caught a server end still open).
    assert wait_for(lambda: not srv.listener.connections), (
        raw,
        "the server kept a closed client's connection",
    )
    assert srv.reactor.counters.callback_errors == 0, raw


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=INPUTS)
def test_server_answers_or_closes_and_keeps_serving(fuzz_server, raw):
    check_one(fuzz_server, raw)


@pytest.mark.parametrize("raw", SEEDS, ids=[f"seed{i}" for i in range(len(SEEDS))])
def test_every_seed_passes_the_property_unmutated(fuzz_server, raw):
    check_one(fuzz_server, raw)
