"""/health states, start-up time, graceful drain on SIGTERM/SIGINT, second signal, drain timeout."""
import json
import signal
import subprocess
import time

from conftest import BIN


def test_health_answers_json_within_a_second_with_no_model(start_server):
    # The first answer comes within a second of the start, model or not ("loading" while the
    # default model loads); then the model is ready. (The load itself is not timed here: under
    # ASan on a busy machine the start plus the load can take more than a second.)
    t0 = time.monotonic()
    srv = start_server(wait_ready=False)
    status, doc = srv.json("GET", "/health")
    assert time.monotonic() - t0 < 1.0
    assert (status, doc) in ((200, {"status": "ok"}), (503, {"status": "loading"}))
    assert srv.wait_health(timeout=10.0) == (200, {"status": "ok"})


def test_health_says_loading_until_ready(start_server):
    srv = start_server("--debug-ready-delay", "600ms", wait_ready=False)
    status, headers, body = srv.request("GET", "/health")
    assert status == 503 and json.loads(body) == {"status": "loading"}
    assert headers["content-type"] == "application/json"
    deadline = time.monotonic() + 5
    while srv.json("GET", "/health")[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert srv.json("GET", "/health") == (200, {"status": "ok"})


def test_health_never_needs_the_api_key(start_server):
    srv = start_server("--api-key", "secret")
    assert srv.json("GET", "/health") == (200, {"status": "ok"})


def test_drain_finishes_in_flight_then_exits_0(start_server):
    srv = start_server("--debug-endpoints", "--drain-timeout", "20s")
    idle = srv.socket()
    idle.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert idle.recv(4096).endswith(b'{"status":"ok"}')
    stream = srv.conn()
    stream.request("GET", "/debug/stream?n=8&interval_ms=100")
    r = stream.getresponse()
    srv.wait_stat("requests_inflight", 2)
    srv.signal(signal.SIGTERM)
    srv.wait_log("draining")
    # a kept-alive connection between requests is closed at once (gracefully: a FIN, no answer
    # owed), so that its client sees the close before it sends and goes elsewhere
    idle.settimeout(2)
    assert idle.recv(4096) == b""
    idle.close()
    # new connections are refused
    try:
        srv.request("GET", "/health", timeout=1)
        refused = False
    except OSError:
        refused = True
    assert refused
    # the in-flight stream runs to its end
    assert r.read().count(b"data: ") == 8
    assert srv.proc.wait(5) == 0
    assert "drained: exiting" in srv.log()


def test_drain_answers_a_connection_that_was_silent_when_it_began(start_server):
    """A client that connected just before the drain and sends its request during it gets an
    answer (served as before the drain: /health says draining), not a closed connection; one that
    never sends is closed about a second into the drain, and the server then exits 0 (it does not
    wait --idle-timeout)."""
    from conftest import read_until_close
    srv = start_server("--debug-endpoints", "--drain-timeout", "20s", "--idle-timeout", "60s")
    late, silent = srv.socket(), srv.socket()
    srv.wait_stat("connections_open", 2)
    t0 = time.monotonic()
    srv.signal(signal.SIGTERM)
    srv.wait_log("draining")
    time.sleep(0.3)
    late.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    head = read_until_close(late).split(b"\r\n")
    assert head[0] == b"HTTP/1.1 503 Service Unavailable" and b"Connection: close" in head, head
    assert read_until_close(silent) == b""  # closed by the server, unanswered: it asked nothing
    assert srv.proc.wait(5) == 0
    assert 0.9 < time.monotonic() - t0 < 4, time.monotonic() - t0
    assert "drained: exiting" in srv.log()


def test_drain_timeout_cancels_and_exits_0(start_server):
    srv = start_server("--debug-endpoints", "--drain-timeout", "300ms")
    s = srv.socket()
    s.sendall(b"GET /debug/stream?n=100000&interval_ms=50 HTTP/1.1\r\nHost: x\r\n\r\n")
    srv.wait_stat("requests_inflight", 2)
    t0 = time.monotonic()
    srv.signal(signal.SIGINT)
    assert srv.proc.wait(5) == 0
    assert 0.25 < time.monotonic() - t0 < 3.0
    assert "drain timeout: cancelling 1 request(s)" in srv.log()
    s.close()


def test_second_signal_exits_at_once(start_server):
    srv = start_server("--debug-endpoints", "--drain-timeout", "60s")
    s = srv.socket()
    s.sendall(b"GET /debug/stream?n=100000&interval_ms=50 HTTP/1.1\r\nHost: x\r\n\r\n")
    srv.wait_stat("requests_inflight", 2)
    srv.signal(signal.SIGTERM)
    srv.wait_log("draining")
    t0 = time.monotonic()
    srv.signal(signal.SIGTERM)
    srv.expected_status = 1
    assert srv.proc.wait(5) == 1
    assert time.monotonic() - t0 < 2.0
    assert "exiting at once" in srv.log()
    s.close()


def test_address_in_use_fails_with_status_1(start_server):
    srv = start_server()
    p = subprocess.run([BIN, "--port", str(srv.port)], capture_output=True, text=True, timeout=10)
    assert p.returncode == 1
    assert "cannot listen" in p.stderr and str(srv.port) in p.stderr


def test_serve_subcommand():
    p = subprocess.Popen([BIN, "serve", "--port", "0"], stderr=subprocess.PIPE, text=True)
    line = p.stderr.readline()
    assert "listening on 127.0.0.1:" in line
    p.send_signal(signal.SIGTERM)
    p.stderr.read()
    assert p.wait(10) == 0
