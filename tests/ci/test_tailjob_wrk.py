"""The wrk output parser, on outputs recorded from real wrk runs (fixtures/wrk/)."""

from __future__ import annotations

import pytest
from tailjob_testdata import FIXTURES

from tailjob import wrk
from tailjob.wrk import PERCENTILES, WrkOutputError, parse_wrk_output, wrk_command


def load(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_normal_run():
    r = parse_wrk_output(load("normal.txt"))
    assert r.requests == 32144
    assert r.duration_us == 2014401
    assert r.rps == pytest.approx(32144 / 2.014401)
    assert r.text_rps == 15957.10
    assert r.latency_samples == 37568  # more than requests: wrk 4's synthetic samples
    assert r.latency_us == {"min": 170, "max": 8098, "mean": 2152.630, "stdev": 1504.797}
    assert [p.p for p in r.percentiles] == list(PERCENTILES)
    assert r.percentile(50).us == 1450 and r.percentile(50).samples == 18784
    assert r.percentile(99.99).us == 8000 and r.percentile(99.99).samples == 4
    assert r.percentile(99.999).us == 8098 and r.percentile(99.999).samples == 1
    assert r.socket_errors == 0 and r.non_2xx == 0
    assert r.errors == {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0}


def test_percentiles_and_spectrum_are_ordered():
    r = parse_wrk_output(load("normal.txt"))
    values = [p.us for p in r.percentiles]
    assert values == sorted(values)
    assert [p.samples for p in r.percentiles] == sorted((p.samples for p in r.percentiles), reverse=True)
    ps = [p for p, _ in r.spectrum]
    assert ps[0] == 0 and ps[-1] == pytest.approx(99.999)
    assert [us for _, us in r.spectrum] == sorted(us for _, us in r.spectrum)


def test_socket_errors_are_read_from_the_metrics_line_and_match_wrks_text():
    r = parse_wrk_output(load("socket-errors.txt"))
    assert r.errors["read"] == 640 and r.errors["timeout"] == 16
    assert r.socket_errors == 656
    assert r.non_2xx == 0


def test_non_2xx_responses():
    r = parse_wrk_output(load("non-2xx.txt"))
    assert r.non_2xx == r.requests == 18207
    assert r.socket_errors == 0


def test_a_run_without_responses_has_no_latencies():
    r = parse_wrk_output(load("no-responses.txt"))
    assert r.requests == 0 and r.rps == 0
    assert r.latency_samples == 0
    assert r.percentile(99).us is None
    assert r.errors["read"] == 6357


def test_output_without_the_metrics_line_is_a_clear_error():
    text = load("normal.txt").split("----")[0]
    with pytest.raises(WrkOutputError, match="no TAILREACTOR_METRICS line"):
        parse_wrk_output(text)


def test_a_truncated_metrics_line_is_a_clear_error():
    text = load("normal.txt")
    cut = text[: text.index('"spectrum"')]
    with pytest.raises(WrkOutputError, match="TAILREACTOR_METRICS line is not valid JSON"):
        parse_wrk_output(cut)


def test_disagreement_between_wrks_text_and_the_metrics_line_is_an_error():
    text = load("socket-errors.txt").replace(
        "read 640, write 0, timeout 16\n", "read 641, write 0, timeout 16\n", 1
    )
    with pytest.raises(WrkOutputError, match="read"):
        parse_wrk_output(text)


def test_wrk_command_line():
    cmd = wrk_command(
        "http://127.0.0.1:3000/",
        threads=2,
        connections=64,
        duration_s=3,
        script="scripts/ci/tailjob/tail_latency.lua",
    )
    assert cmd == [
        "wrk",
        "-t2",
        "-c64",
        "-d3s",
        "-s",
        "scripts/ci/tailjob/tail_latency.lua",
        "http://127.0.0.1:3000/",
    ]
    pinned = wrk_command(
        "http://127.0.0.1:3000/", threads=1, connections=64, duration_s=3, script="x.lua", cpus="1"
    )
    assert pinned[:3] == ["taskset", "-c", "1"]


def _with_histogram(buckets) -> str:
    """normal.txt with a ``histogram`` field in its metrics line (what tail_latency.lua prints with ffi)."""
    import json

    lines = load("normal.txt").splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("TAILREACTOR_METRICS "))
    m = json.loads(lines[i][len("TAILREACTOR_METRICS ") :])
    m["histogram"] = buckets
    lines[i] = "TAILREACTOR_METRICS " + json.dumps(m)
    return "\n".join(lines) + "\n"


def test_the_histogram_buckets_become_an_encoded_hdrhistogram():
    from tailjob import pooled

    assert parse_wrk_output(load("normal.txt")).histogram is None  # recorded before the buckets were printed
    r = parse_wrk_output(_with_histogram([[170, 3], [1450, 5], [8098, 1]]))
    h = pooled.decode(r.histogram)
    assert h.get_total_count() == 9
    assert h.get_value_at_percentile(50) == 1450 and h.get_max_value() == pytest.approx(8098, rel=1e-3)
    assert r.as_dict()["histogram"] == r.histogram


@pytest.mark.parametrize("buckets", [[[170, -1]], [["x", 1]], [[170]]])
def test_a_mangled_histogram_is_an_error_not_a_silent_gap(buckets):
    with pytest.raises(WrkOutputError, match="lacks or mangles"):
        parse_wrk_output(_with_histogram(buckets))


def test_a_missing_wrk_is_named_with_how_to_install_it(tmp_path):
    from tailjob.wrk import wrk_version

    with pytest.raises(FileNotFoundError) as info:
        wrk_version(str(tmp_path / "wrk"))
    assert "not found; install it: scripts/bootstrap.sh --wrk" in str(info.value)
    assert "apt-get install wrk" in str(info.value)


# -- the capacity run sends what the load client sends (issue 30 item 3) -----------------------
def _recording_server():
    """A stdlib HTTP server on 127.0.0.1 that answers 200 and records every request path."""
    import http.server
    import threading

    paths: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):  # http.server's name
            paths.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, paths


@pytest.mark.wrk
@pytest.mark.parametrize("path, expected", [("/", r"/"), ("/user/", r"/user/\d+")])
def test_tail_latency_lua_sends_path_then_seq_when_the_url_has_a_prefix(path, expected):
    """wrk with tail_latency.lua: the URL's path as is for ``/``; ``<path><seq>`` (a per-thread count)
    for a prefix such as ``/user/`` -- the load client's request, so a capacity run measures it."""
    import re
    import subprocess

    from tailjob import measure

    srv, paths = _recording_server()
    try:
        argv = wrk.wrk_command(
            f"http://127.0.0.1:{srv.server_address[1]}{path}",
            threads=1,
            connections=1,
            duration_s=1,
            script=str(measure.SCRIPT),
        )
        out = subprocess.run(
            argv, capture_output=True, text=True, timeout=300, env=wrk.wrk_env(), check=False
        )
    finally:
        srv.shutdown()
    assert out.returncode == 0, out.stderr
    assert wrk.parse_wrk_output(out.stdout).requests > 0
    assert paths and all(re.fullmatch(expected, p) for p in paths), sorted(set(paths))[:5]
    if path != "/":
        assert len(set(paths)) == len(paths)  # one seq per request
