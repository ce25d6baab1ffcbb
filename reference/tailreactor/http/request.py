"""Requests in: bytes to the buffered pipeline, with the rules a request must follow.

Role
----
The parse half of an HTTP/1.x connection, with no event loop in it.
:class:`RequestPipeline` feeds received bytes to
``httptools.HttpRequestParser`` and queues every complete request in
``_pipeline``, a FIFO of ``(method, target, keep_alive)`` -- the *buffered
pipeline* -- and every answer the parser's verdict calls for as ``(None,
answer_bytes, keep_alive)``.  httptools cannot pause in the middle of a
buffer, so one read may queue many requests.  Whoever serves the pipeline
(the bench server's :class:`~tailreactor.http.connection.Connection`, the
asyncio and uvloop peers in ``benchmarks/peers/``) pops entries from the
front and turns them into response bytes with
:func:`~tailreactor.http.routes.respond`.

Why a class of its own: the ``--peers`` comparison sets the bench server
against peers built on asyncio and uvloop, with "the same routes and responses".  The peers
inherit this class, so they answer bad input exactly as the bench server does
(``tests/test_peers_parity.py``) and do the same parsing work per request;
the comparison then measures the event loops, not two HTTP apps.  It is a
base class rather than an object the connection holds because httptools
calls these methods on every request, and an object in between would add
an attribute hop to every call.

Errors (each queued in order behind the requests received before it; all close)
----------------------------------------------------------------------------------
* ``400`` for anything httptools (llhttp) rejects.  That includes ambiguous
  framing -- Content-Length with Transfer-Encoding, two Content-Lengths, a
  Transfer-Encoding whose last coding is not chunked -- so a smuggled request
  behind one is never parsed (RFC 9112 6.1, 6.3); and an HTTP/1.1 request
  without exactly one ``Host`` field, or an HTTP/1.0 one with several (RFC
  9112 3.2).
* ``414`` for a request-target over :data:`MAX_TARGET_BYTES`.
* ``431`` for a header section over :data:`MAX_HEADER_BYTES` or
  :data:`MAX_HEADERS`, and for a head still incomplete after
  :data:`MAX_HEAD_BYTES` (a header field that never ends).
* ``505`` for an HTTP version other than 1.0/1.1.
* A request asking to ``Upgrade`` is answered (RFC 9110 7.8 lets a server
  ignore the header) and then the connection closes: httptools stops parsing
  at an upgrade.

``Expect: 100-continue`` (RFC 9110 10.1.1)
------------------------------------------
When an HTTP/1.1 head carrying it is complete and its content has not arrived
with it, ``(None, CONTINUE, True)`` is queued at once (behind the answers to
earlier requests), before any of the content is read; the final answer
follows the content.  Content that arrived with the head needs no 100 (the RFC
lets a server omit it).  HTTP/1.0 requests and other expectations are ignored.

The head deadline hook
----------------------
A server with timeouts bounds how long a head may take to arrive
(slowloris).  The first read that leaves a head incomplete calls
:meth:`RequestPipeline._head_began` with that read's time; the bench server
arms its head deadline there, the peers (which have no timeouts) do nothing.
"""

from __future__ import annotations

from collections import deque

import httptools

from . import routes

#: Longest request-target accepted; longer gets 414 (nginx's default buffer is 8 KiB too).
MAX_TARGET_BYTES = 8192
#: Most bytes of header fields in one request (each counts name + value + 4 for
#: ": " and CRLF; trailer fields count too); more gets 431.  CWIST's http.h caps
#: cumulative header bytes at 8 KiB too; browsers send 1-2 KiB, wrk ~30 bytes.
MAX_HEADER_BYTES = 8192
#: Most header fields in one request; more gets 431 (Apache's LimitRequestFields default).
MAX_HEADERS = 100
#: Bytes one read of the bench server may bring (its ``recv`` size): a
#: pipelined batch of small requests fits easily.
RECV_BYTES = 65536
#: A head still incomplete after taking more bytes than this gets 431: no
#: acceptable head is that long (target + fields + a request line's worth), and
#: a read may hold up to RECV_BYTES of earlier requests, which the count cannot
#: tell apart.  Bounds what httptools buffers for a header field still arriving.
MAX_HEAD_BYTES = MAX_TARGET_BYTES + MAX_HEADER_BYTES + RECV_BYTES
_VERSIONS_SERVED = ("1.0", "1.1")
# Where the parser is in the current request (set by the httptools callbacks).
IDLE, HEAD, BODY = 0, 1, 2


class TargetTooLong(Exception):
    """Raised inside the parser's on_url callback; becomes a 414 answer."""


class HeadersTooLarge(Exception):
    """Raised inside the parser's on_header callback; becomes a 431 answer."""


class RequestPipeline:
    """Received bytes in, the buffered pipeline out (module docstring).

    A base class: call :meth:`_init_request` from ``__init__``, feed bytes
    with :meth:`_parse`, pop ``(method, target, keep_alive)`` entries from
    ``_pipeline`` (``method`` None: ``target`` is an answer to send as is, and
    ``keep_alive`` True only for ``100 Continue``).  ``_phase`` says where the
    current request is (:data:`IDLE`, :data:`HEAD` or :data:`BODY`).
    Nothing a client sends raises out of :meth:`_parse`.
    """

    def _init_request(self) -> None:
        self._parser = httptools.HttpRequestParser(self)
        self._target = b""  # request-target of the message being parsed
        self._pipeline: deque = deque()  # parsed, not yet answered: (method, target, keep_alive)
        # Per-request parser state, reset by on_message_begin.
        self._phase = IDLE
        self._header_count = 0
        self._header_bytes = 0
        self._hosts = 0  # Host fields seen
        self._expect: bytes | None = None  # the Expect field's value, if any
        self._continue_due = False  # 100 Continue owed once this read is parsed
        self._head_wire = 0  # bytes received while this head was incomplete
        self._head_started_ns: int | None = None  # time of the read that began this head

    # -- httptools callbacks (called from feed_data) -----------------------------
    def on_message_begin(self) -> None:
        self._target = b""
        self._phase = HEAD
        self._header_count = self._header_bytes = self._hosts = self._head_wire = 0
        self._expect = self._head_started_ns = None

    def on_url(self, fragment: bytes) -> None:
        # httptools hands the target over in pieces when it spans reads.
        self._target += fragment
        if len(self._target) > MAX_TARGET_BYTES:
            raise TargetTooLong

    def on_header(self, name: bytes, value: bytes) -> None:
        # Called once per whole field (httptools joins the pieces), trailers included.
        n = len(name)
        count = self._header_count = self._header_count + 1
        size = self._header_bytes = self._header_bytes + n + len(value) + 4
        if count > MAX_HEADERS or size > MAX_HEADER_BYTES:
            raise HeadersTooLarge
        # Two fields matter; a length check first keeps the rest to one comparison.
        if n == 4 and name.lower() == b"host":
            self._hosts += 1
        elif n == 6 and name.lower() == b"expect":
            self._expect = value

    def on_headers_complete(self) -> None:
        self._phase = BODY
        if self._expect is not None:
            self._continue_due = (
                self._expect.lower() == b"100-continue" and self._parser.get_http_version() == "1.1"
            )

    def on_message_complete(self) -> None:
        self._phase = IDLE
        self._continue_due = False  # the content is here: no 100 needed
        parser = self._parser
        keep_alive = parser.should_keep_alive()
        # HTTP/1.1 and 1.0-with-keep-alive are the hot path; only a closing
        # request pays for the version check (0.9 and 2.0 never keep alive).
        if not keep_alive and parser.get_http_version() not in _VERSIONS_SERVED:
            self._pipeline.append((None, routes.VERSION_NOT_SUPPORTED, False))
            return
        if self._hosts != 1 and (self._hosts > 1 or parser.get_http_version() == "1.1"):
            self._pipeline.append((None, routes.BAD_REQUEST, False))  # RFC 9112 3.2
            return
        self._pipeline.append((parser.get_method(), self._target, keep_alive))

    # -- feeding -------------------------------------------------------------------
    def _parse(self, data, now_ns: int) -> None:
        """Feed received bytes; complete requests (and a final error) go to the pipeline.

        ``now_ns`` is the time of the read, in nanoseconds on the server's
        clock (it starts the head deadline; see :meth:`_head_began`).
        """
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
            cause = exc.__context__
            answer = (
                routes.URI_TOO_LONG
                if isinstance(cause, TargetTooLong)
                else routes.HEADERS_TOO_LARGE
                if isinstance(cause, HeadersTooLarge)
                else routes.BAD_REQUEST
            )
            self._pipeline.append((None, answer, False))
        else:
            if self._phase == HEAD:  # a head is still arriving (rare: wrk never splits one)
                self._after_partial_head(len(data), now_ns)
            elif self._continue_due:
                self._continue_due = False
                self._pipeline.append((None, routes.CONTINUE, True))  # interim: keeps the connection
            return
        self._continue_due = False  # a parse error: no 100 for a request that will never be served

    def _after_partial_head(self, n: int, now_ns: int) -> None:
        """Bound a head that is still incomplete: bytes (431), then time (:meth:`_head_began`)."""
        self._head_wire += n  # may count earlier requests of the first read: MAX_HEAD_BYTES allows for it
        if self._head_wire > MAX_HEAD_BYTES:
            self._pipeline.append((None, routes.HEADERS_TOO_LARGE, False))
            return
        if self._head_started_ns is None:
            self._head_started_ns = now_ns
            self._head_began(now_ns)

    def _head_began(self, now_ns: int) -> None:
        """The first read of a head left it incomplete, at ``now_ns``.  A server
        with a head deadline arms it here; the default does nothing."""
