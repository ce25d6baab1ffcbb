"""Routes of the bench app and their pre-built responses.

Role
----
Maps one parsed request (method, request-target, keep-alive) to the bytes of
its response.  The routes are those of CWIST's bench app
(``benchmarks/web-frameworks``, ``cwist_bench``) plus ``/plaintext``; every
GET route also answers HEAD (below):

======================  ========  ======================================================
path                    method    answer
======================  ========  ======================================================
``/``                   GET       200, empty body
``/user/:id``           GET       200, body is the id (bytes as sent, no decoding)
``/slow/:id``           GET       as ``/user/:id``, after ``CWIST_BENCH_SLOW_US`` (test knob)
``/service/:us/:id``    GET       as ``/user/:id``, after ``:us`` microseconds (at most
                                  1000000) when ``CWIST_BENCH_SERVICE_ROUTE=1`` (test knob)
``/user``               POST      200, empty body (a request body is discarded)
``/plaintext``          GET       200, ``Hello, World!`` (text/plain)
``/__probe``            GET       200 JSON of ``reactor.probe.snapshot()``, or 404
other paths             any       404
known path              other     405 with ``Allow`` (``GET, HEAD`` or ``POST``)
======================  ========  ======================================================

HEAD (RFC 9110 9.3.2; 9.1: a general-purpose server MUST support it) gets
exactly the head GET would get -- status, ``Content-Length`` of the body GET
would send, every other header -- and no content.  So it is answered as GET
and cut after the blank line that ends the head; the client frames the next
response by knowing it sent HEAD, and the connection goes on as after GET.

Every response exists in two forms, indexed by ``keep_alive``: ``[0]`` ends
with ``Connection: close``, ``[1]`` with ``Connection: keep-alive`` (sent on
HTTP/1.1 too: one rule instead of a per-version branch).  Fixed responses are
built once at import, so serving ``GET /`` is a dict lookup and a tuple index;
only ``/user/:id`` and ``/__probe`` format bytes per request.

No ``Date`` or ``Server`` header: the bench clients (wrk) ignore them and
the bytes per response are then what the routes need, nothing more.
"""

from __future__ import annotations

import json

import httptools

__all__ = [
    "respond",
    "service_ns",
    "BAD_REQUEST",
    "URI_TOO_LONG",
    "VERSION_NOT_SUPPORTED",
    "REQUEST_TIMEOUT",
    "HEADERS_TOO_LARGE",
    "CONTINUE",
]

_CONNECTION = (b"Connection: close\r\n", b"Connection: keep-alive\r\n")  # by keep_alive


def build(
    status: str, body: bytes = b"", content_type: str | None = None, extra: str = ""
) -> tuple[bytes, bytes]:
    """The two wire forms ``(close, keep_alive)`` of one response."""
    head = f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n"
    if content_type:
        head += f"Content-Type: {content_type}\r\n"
    head += extra
    close, keep_alive = (head.encode() + conn + b"\r\n" + body for conn in _CONNECTION)
    return close, keep_alive


OK_EMPTY = build("200 OK")
OK_PLAINTEXT = build("200 OK", b"Hello, World!", "text/plain")
NOT_FOUND = build("404 Not Found")
ALLOW_GET = build("405 Method Not Allowed", extra="Allow: GET, HEAD\r\n")
ALLOW_POST = build("405 Method Not Allowed", extra="Allow: POST\r\n")
# Errors that end the connection: only the close form is ever sent.
BAD_REQUEST = build("400 Bad Request")[0]
REQUEST_TIMEOUT = build("408 Request Timeout")[0]
URI_TOO_LONG = build("414 URI Too Long")[0]
HEADERS_TOO_LARGE = build("431 Request Header Fields Too Large")[0]
VERSION_NOT_SUPPORTED = build("505 HTTP Version Not Supported")[0]
#: The interim answer to ``Expect: 100-continue`` (RFC 9110 15.2.1): a status line and nothing else.
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_SCHEMES_SERVED = (b"http", b"https")

#: Fixed routes: path -> (the one allowed method, its response, the 405 for others).  HEAD is
#: answered as GET (see :func:`respond`).
FIXED = {
    b"/": (b"GET", OK_EMPTY, ALLOW_GET),
    b"/plaintext": (b"GET", OK_PLAINTEXT, ALLOW_GET),
    b"/user": (b"POST", OK_EMPTY, ALLOW_POST),
}
USER_PREFIX = b"/user/"
SLOW_PREFIX = b"/slow/"  # answered as /user/:id; the connection busy-waits CWIST_BENCH_SLOW_US for it
SERVICE_PREFIX = b"/service/"  # /service/<us>/<id>: answered as /user/<id>, <us> of busy-wait (a knob)
SERVICE_US_MAX = 1_000_000  # as the other bench knobs: at most 1 s per request
PROBE_PATH = b"/__probe"

_USER_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n" + _CONNECTION[0],
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n" + _CONNECTION[1],
)


def path_of(target: bytes) -> bytes | None:
    """The path of a request-target, or None when it has none we can serve.

    Origin form (``/a?b``) is the common case and costs one ``find``; absolute
    form (``http://host/a``, RFC 9112 3.2.2) goes through ``httptools.parse_url``:
    an ``http``/``https`` URI (any case) whose path is empty means ``/`` (RFC
    9110 4.2.3).  Authority form (CONNECT, ``host:port``), asterisk form
    (``*``) and other schemes name nothing this server serves: None.
    """
    if target[:1] == b"/":
        q = target.find(b"?")
        return target if q < 0 else target[:q]
    try:
        url = httptools.parse_url(target)
    except httptools.HttpParserInvalidURLError:
        return None
    if url.schema is None or url.schema.lower() not in _SCHEMES_SERVED:
        return None
    return url.path or b"/"


def service_ns(target: bytes) -> int | None:
    """The service cost a ``/service/<us>/<id>`` target asks for, in ns; None for any other target.

    A traffic class's per-request cost travels in its requests, so the server needs no table of
    classes: the load client sends ``GET /service/20/<seq>`` for a class costing 20 us.
    """
    path = path_of(target)
    if path is None or not path.startswith(SERVICE_PREFIX):
        return None
    us, sep, user_id = path[len(SERVICE_PREFIX) :].partition(b"/")
    if not (sep and user_id and b"/" not in user_id and us.isdigit() and int(us) <= SERVICE_US_MAX):
        return None
    return int(us) * 1000


def respond(method: bytes, target: bytes, keep_alive: bool, probe=None) -> bytes:
    """Response bytes for one request.

    ``keep_alive`` selects the ``Connection`` header; ``probe`` is the
    reactor's latency probe or None.  A target without a path gets
    :data:`BAD_REQUEST`, which says ``Connection: close``: the caller must
    then close the connection (it checks ``answer is BAD_REQUEST``).
    """
    if method == b"HEAD":
        answer = respond(b"GET", target, keep_alive, probe)
        end = answer.index(b"\r\n\r\n") + 4
        return answer if end == len(answer) else answer[:end]  # no body: BAD_REQUEST stays itself
    path = path_of(target)
    if path is None:
        return BAD_REQUEST
    route = FIXED.get(path)
    if route is not None:
        allowed, ok, not_allowed = route
        return ok[keep_alive] if method == allowed else not_allowed[keep_alive]
    if path.startswith((USER_PREFIX, SLOW_PREFIX)):
        user_id = path[len(USER_PREFIX) :]  # /slow/ is as long as /user/
        if user_id and b"/" not in user_id:
            if method != b"GET":
                return ALLOW_GET[keep_alive]
            return b"%sContent-Length: %d\r\n\r\n%s" % (_USER_HEAD[keep_alive], len(user_id), user_id)
    elif path.startswith(SERVICE_PREFIX) and service_ns(path) is not None:
        if method != b"GET":
            return ALLOW_GET[keep_alive]
        user_id = path.rpartition(b"/")[2]
        return b"%sContent-Length: %d\r\n\r\n%s" % (_USER_HEAD[keep_alive], len(user_id), user_id)
    elif path == PROBE_PATH:
        snapshot = getattr(probe, "snapshot", None)  # probe.py may not exist in older trees
        if snapshot is not None:
            if method != b"GET":
                return ALLOW_GET[keep_alive]
            body = json.dumps(snapshot()).encode()
            return build("200 OK", body, "application/json")[keep_alive]
    return NOT_FOUND[keep_alive]
