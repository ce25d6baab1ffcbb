"""A signal during a wait (EINTR): the handler runs, the wait neither raises nor ends early."""

from __future__ import annotations

import signal
import threading
import time

import pytest


@pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="signals need the main thread"
)
def test_eintr_during_wait_is_retried(make_reactor):
    r = make_reactor()
    hits = []
    old = signal.signal(signal.SIGALRM, lambda *a: hits.append(1))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.02)
        start = time.monotonic()
        assert r.run_once(0.2) == 0
        elapsed = time.monotonic() - start
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert hits == [1]
    assert elapsed >= 0.2  # the wait resumed with the time left (PEP 475), it did not end at the signal
