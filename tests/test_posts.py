"""Posts: FIFO, exactly once, from many threads; wake a blocked reactor; cannot starve I/O."""

from __future__ import annotations

import logging
import threading

import pytest

from tailreactor import READ


def test_fifo_exactly_once_from_8_threads(make_reactor):
    r = make_reactor()
    seen: list[tuple[int, int]] = []
    n_threads, per_thread = 8, 500
    start = threading.Barrier(n_threads)

    def producer(tid):
        start.wait()
        for i in range(per_thread):
            r.post(seen.append, (tid, i))

    threads = [threading.Thread(target=producer, args=(t,)) for t in range(n_threads)]
    for t in threads:
        t.start()
    while len(seen) < n_threads * per_thread:
        r.run_once(1.0)
    for t in threads:
        t.join()
    r.run_once(0)
    assert len(seen) == n_threads * per_thread == len(set(seen))
    for tid in range(n_threads):
        assert [i for t, i in seen if t == tid] == list(range(per_thread))
    assert r.counters.posts_run == n_threads * per_thread


def test_post_from_other_thread_wakes_blocked_run(make_reactor):
    r = make_reactor()
    ran = threading.Event()
    t = threading.Thread(target=r.run)
    t.start()
    r.post(lambda _: ran.set())
    assert ran.wait(60)
    r.stop()
    t.join(60)
    assert not t.is_alive()


def test_stop_from_other_thread_ends_blocking_run(make_reactor):
    r = make_reactor()
    started = threading.Event()
    r.post(lambda _: started.set())
    t = threading.Thread(target=r.run)
    t.start()
    assert started.wait(60)
    r.stop()
    t.join(60)
    assert not t.is_alive()


def test_self_reposting_post_cannot_starve_io(make_reactor, socketpairs):
    r = make_reactor()
    ((a, b),) = socketpairs(1)
    spins = []

    def spin(_):
        spins.append(1)
        r.post(spin)

    io = []
    r.post(spin)
    r.arm(a.fileno(), READ, lambda ev: io.append(len(spins)))
    b.send(b"x")
    for _ in range(3):
        r.run_once(1.0)
    assert io, "I/O callback never ran while a post kept re-posting itself"
    assert io[0] <= 2


def test_post_exception_is_logged_and_next_post_runs(make_reactor, caplog):
    r = make_reactor()
    out = []

    def boom(_):
        raise RuntimeError("boom")

    r.post(boom)
    r.post(out.append, 1)
    with caplog.at_level(logging.ERROR, logger="tailreactor"):
        r.run_once(0)
    assert out == [1]
    assert r.counters.callback_errors == 1
    assert "boom" in caplog.text


def test_post_requires_callable(make_reactor):
    with pytest.raises(TypeError, match="callable"):
        make_reactor().post(42)


def test_close_runs_queued_posts_once(make_reactor):
    r = make_reactor()
    out = []
    r.post(out.append, "last")
    r.close()
    r.close()
    assert out == ["last"]


def test_a_post_that_closes_the_reactor_mid_drain_runs_every_other_post_once(make_reactor):
    """close() from a post drains the posts still queued: those of the running drain
    after it and those posted meanwhile.  Each runs once, in order, and the drain that
    was running ends cleanly."""
    r = make_reactor()
    out = []

    def closer(_):
        out.append("close")
        r.post(out.append, "posted by closer")
        r.close()

    r.post(out.append, "a")
    r.post(closer)
    r.post(out.append, "b")
    r.post(out.append, "c")
    rounds = r.counters.rounds
    assert r.run_once(0) == 0  # the round ends after its posts: no wait on a released backend
    assert out == ["a", "close", "b", "c", "posted by closer"]
    assert r.counters.rounds == rounds + 1
    with pytest.raises(RuntimeError, match="closed"):
        r.run_once(0)
