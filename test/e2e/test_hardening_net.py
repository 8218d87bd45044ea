"""Hostile or careless clients and operators at the HTTP layer: what each one costs the server is
bounded, and every other client goes on being served.

Each test names what it guards: queued output per connection, authentication before the body,
request-head timeouts and the /health reserve, strict chunked framing, trailers, the 405/HEAD
order, a blank --api-key, --model that is no regular file, and the signals."""
import os
import signal
import socket
import subprocess
import threading
import time

from conftest import BIN, ROOT, parse_responses, read_until_close


def run(*args, timeout=10):
    return subprocess.run([BIN, "--port", "0"] + list(args), capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


# Freed memory a sanitizer build keeps aside (its quarantine) counts in RSS: small for the tests
# that measure memory, so that they judge what the server holds.
SMALL_QUARANTINE = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:quarantine_size_mb=4"}


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(next(line for line in f if line.startswith("VmRSS")).split()[1])


# --- a blank --api-key ---------------------------------------------------------------------------

def test_blank_api_key_refuses_to_start():
    for value in ("", ",", " , "):
        p = run("--api-key", value)
        assert p.returncode == 2, (value, p.returncode, p.stderr)
        assert "empty value for api-key" in p.stderr, (value, p.stderr)
    p = subprocess.run([BIN, "--port", "0"], capture_output=True, text=True, timeout=10,
                       env=dict(os.environ, UVLM_API_KEY=" "), stdin=subprocess.DEVNULL)
    assert p.returncode == 2 and "UVLM_API_KEY" in p.stderr, p.stderr


# --- --model that is no regular file; signals ----------------------------------------------------

def test_model_that_is_not_a_regular_file_exits_2_before_listening(tmp_path):
    fifo = str(tmp_path / "model.fifo")
    os.mkfifo(fifo)
    for path in (fifo, str(tmp_path), "/dev/zero", "/dev/null"):
        t0 = time.monotonic()
        p = run("--model", path)
        assert p.returncode == 2, (path, p.returncode, p.stderr)
        assert "not a regular file" in p.stderr and path in p.stderr, (path, p.stderr)
        assert "listening on" not in p.stderr, p.stderr  # refused before the listener opened
        assert time.monotonic() - t0 < 5


def test_sighup_drains_like_sigterm(start_server):
    srv = start_server("--debug-endpoints", "--drain-timeout", "20s")
    c = srv.conn()
    c.request("GET", "/debug/stream?n=6&interval_ms=100")
    r = c.getresponse()
    srv.wait_stat("requests_inflight", 2)
    srv.signal(signal.SIGHUP)
    srv.wait_log("Hangup: draining")
    assert r.read().count(b"data: ") == 6  # the stream in flight runs to its end
    assert srv.proc.wait(5) == 0
    assert "drained: exiting" in srv.log()


def test_sigusr1_and_sigusr2_are_ignored(start_server):
    srv = start_server()
    for sig, name in ((signal.SIGUSR1, "User defined signal 1"), (signal.SIGUSR2, "User defined signal 2")):
        srv.signal(sig)
        srv.wait_log(name + ": ignored")
    assert srv.json("GET", "/health") == (200, {"status": "ok"})


# --- authentication before the body, 405 and HEAD, trailers, chunked framing ----------------------

def read_response(s, timeout=5.0):
    """One response (Content-Length framed) from a raw socket: (status, headers, body, raw head)."""
    s.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        b = s.recv(65536)
        if not b:
            break
        data += b
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
    n = int(headers.get("content-length", 0))
    while len(rest) < n:
        b = s.recv(65536)
        if not b:
            break
        rest += b
    return int(lines[0].split()[1]), headers, rest[:n], head


def test_request_without_key_is_refused_before_its_body(start_server):
    srv = start_server("--api-key", "k", "--debug-endpoints")
    # the head alone, with Expect: 100-continue: 401 at once, never "100 Continue"
    s = srv.socket()
    s.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Length: 3000000\r\nExpect: 100-continue\r\n\r\n")
    status, headers, body, head = read_response(s, timeout=3)
    assert status == 401 and headers["www-authenticate"] == "Bearer" and headers["connection"] == "close", head
    assert b"100 Continue" not in head
    s.close()
    # the head and a little of a large body, no Expect: 401 without waiting for the rest
    s = srv.socket()
    s.sendall(b"POST /debug/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3000000\r\n\r\n" + b"x" * 1000)
    assert read_response(s, timeout=3)[0] == 401
    s.close()
    # with the key: 100 Continue, then the body is read and served
    s = srv.socket()
    s.sendall(b"POST /debug/echo HTTP/1.1\r\nHost: x\r\nX-Api-Key: k\r\nContent-Length: 4\r\n"
              b"Expect: 100-continue\r\n\r\n")
    assert s.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
    s.sendall(b"body")
    status, _, body, _ = read_response(s)
    assert (status, body) == (200, b"body")
    s.close()


def test_bodies_without_key_cost_no_memory(start_server):
    """Eight clients without the key each send all but the last byte of a 3 MiB body and wait:
    none of it is kept while they hold their connections (each is answered 401 at its head)."""
    srv = start_server("--api-key", "k", env=SMALL_QUARANTINE)
    before = rss_kib(srv.proc.pid)
    body = b"{" + b" " * (3 << 20) + b"}"

    def send(s):
        try:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
                      + body[:-1])
        except OSError:
            pass  # answered 401 and closed: the rest of the body is not wanted

    socks = [srv.socket(timeout=10) for _ in range(8)]
    threads = [threading.Thread(target=send, args=(s,)) for s in socks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    time.sleep(0.3)
    grown = rss_kib(srv.proc.pid) - before
    statuses = []
    for s in socks:
        s.settimeout(3)
        data = read_until_close(s)
        statuses.append(int(data.split(b" ", 2)[1]) if data else None)
        s.close()
    assert grown < 8 * 1024, grown  # KiB; the eight bodies are 24 MiB
    assert statuses == [401] * 8, statuses
    assert srv.json("GET", "/health")[0] == 200


def test_405_and_404_need_the_key_and_head_answers_like_get(start_server):
    srv = start_server("--api-key", "k", "--debug-endpoints")
    for method, path in (("GET", "/debug/echo"), ("DELETE", "/v1/models"), ("GET", "/no/such/path")):
        status, headers, _ = srv.request(method, path)
        assert status == 401 and "allow" not in headers, (method, path, status)
    key = {"X-Api-Key": "k"}
    assert srv.request("GET", "/debug/echo", headers=key)[0] == 405
    assert srv.request("GET", "/no/such/path", headers=key)[0] == 404
    # HEAD of a GET route: GET's status and headers, no body (the connection stays usable)
    c = srv.conn()
    for path, headers in (("/health", {}), ("/v1/models", key)):
        c.request("GET", path, headers=headers)
        got = c.getresponse()
        body = got.read()
        c.request("HEAD", path, headers=headers)
        head = c.getresponse()
        assert head.status == 200 and head.read() == b"", path
        assert int(head.getheader("Content-Length")) == len(body), path
        assert head.getheader("Content-Type") == got.getheader("Content-Type")
    c.close()
    raw = srv.raw(b"HEAD /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert raw.endswith(b"\r\n\r\n") and b" 200 " in raw.split(b"\r\n")[0], raw  # nothing after the head
    status, _, _ = srv.request("HEAD", "/v1/models")
    assert status == 401


def test_api_key_in_a_trailer_authenticates_nothing(start_server):
    srv = start_server("--api-key", "k")
    for trailer in (b"X-Api-Key: k", b"Authorization: Bearer k"):
        data = srv.raw(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                       b"Connection: close\r\n\r\n13\r\n{\"content\":\"hello\"}\r\n0\r\n" + trailer + b"\r\n\r\n")
        assert parse_responses(data)[0][0] == 401, data
    data = srv.raw(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nX-Api-Key: k\r\nTransfer-Encoding: chunked\r\n"
                   b"Connection: close\r\n\r\n13\r\n{\"content\":\"hello\"}\r\n0\r\nX-Other: t\r\n\r\n")
    assert parse_responses(data)[0][0] == 200, data


def test_chunk_data_not_followed_by_crlf_is_400(start_server):
    srv = start_server()
    data = srv.raw(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"10\r\n{\"content\":\"ab\"}XY0\r\n\r\n")
    status, headers, body = parse_responses(data)[0]
    assert status == 400 and headers["connection"] == "close", data
    data = srv.raw(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                   b"10\r\n{\"content\":\"ab\"}\r\n0\r\n\r\n")
    assert parse_responses(data)[0][0] == 200, data


# --- queued output per connection -----------------------------------------------------------------

def test_pipelined_requests_never_read_are_paused_not_buffered(start_server):
    """A client pipelines 400,000 requests (401s: no key) and reads nothing: the server stops
    reading it once its answers pile up, holds little memory, and serves everyone else; when the
    client reads again, its requests are answered again."""
    srv = start_server("--api-key", "k", "--debug-endpoints", env=SMALL_QUARANTINE)
    before = rss_kib(srv.proc.pid)
    one = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
    s = srv.socket(timeout=3)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        sent, block = 0, one * 4000
        try:
            while sent < 400000:
                s.sendall(block)
                sent += 4000
        except socket.timeout:
            pass  # the server stopped reading: TCP pushes back
        assert sent < 400000, "the server read all %d requests without their answers being read" % sent
        grown = rss_kib(srv.proc.pid) - before
        assert grown < 24 * 1024, grown  # KiB
        t0 = time.monotonic()
        assert srv.json("GET", "/health") == (200, {"status": "ok"})
        assert time.monotonic() - t0 < 1.0
        # reading resumes the answers: more arrive than the socket buffers held when it paused
        s.settimeout(2)
        got = 0
        try:
            while got < 20 << 20:
                b = s.recv(1 << 20)
                if not b:
                    break
                got += len(b)
        except socket.timeout:
            pass
        assert got > 8 << 20, got  # answers to ~40,000 requests, far beyond any buffer
        assert rss_kib(srv.proc.pid) - before < 24 * 1024
    finally:
        s.close()


# --- slowloris: request-head timeout, /health beyond --max-connections ----------------------------

def test_slow_heads_get_408_at_the_header_timeout_and_health_stays_answered(start_server):
    """Clients take every --max-connections place with request heads that never finish: /health
    is still answered (a reserve beyond the limit serves it), anything else gets 503, and the slow
    heads are answered 408 at --header-timeout, long before --read-timeout."""
    srv = start_server("--max-connections", "8", "--header-timeout", "1s", "--read-timeout", "30s",
                       "--api-key", "k")
    time.sleep(0.2)  # wait_health's connection is closed
    slow = [srv.socket(timeout=10) for _ in range(8)]
    for s in slow:
        s.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    silent = [srv.socket(timeout=10) for _ in range(2)]  # beyond the limit, saying nothing
    time.sleep(0.1)
    t0 = time.monotonic()
    for _ in range(3):
        status, headers, _ = srv.request("GET", "/health")
        assert status == 200 and headers["connection"] == "close", status
    head = srv.raw(b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert b" 200 " in head.split(b"\r\n")[0], head
    status, headers, _ = srv.request("GET", "/v1/models", headers={"X-Api-Key": "k"})
    assert status == 503 and headers["retry-after"] == "1", status
    assert time.monotonic() - t0 < 1.0  # answered at once, not when a place frees
    for s in slow:
        status, headers, _ = parse_responses(read_until_close(s))[0]
        assert status == 408 and headers["connection"] == "close"
        s.close()
    assert time.monotonic() - t0 < 3.0  # --header-timeout (1 s), not --read-timeout (30 s)
    for s in silent:
        assert read_until_close(s) == b""  # a reserve connection that asks nothing is closed
        s.close()
    assert srv.json("GET", "/v1/models", headers={"X-Api-Key": "k"})[0] == 200  # places free again


def test_new_connection_that_sends_nothing_is_closed_at_the_header_timeout(start_server):
    srv = start_server("--header-timeout", "300ms", "--idle-timeout", "30s")
    s = srv.socket(timeout=10)
    t0 = time.monotonic()
    assert read_until_close(s) == b""
    assert 0.2 < time.monotonic() - t0 < 3.0
    s.close()
    # a kept-alive connection waits --idle-timeout between requests, not --header-timeout
    c = srv.conn()
    c.request("GET", "/health")
    c.getresponse().read()
    time.sleep(0.6)
    c.request("GET", "/health")
    assert c.getresponse().status == 200
    c.close()


# --- drain: idle connections closed, requests in the server's hands served -----------------------

def test_drain_closes_idle_connections_and_serves_requests_already_arriving(start_server):
    srv = start_server("--drain-timeout", "20s", "--debug-endpoints")
    idle = srv.socket()
    idle.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert b" 200 " in idle.recv(4096)
    fresh = srv.socket()  # connected before the drain, its request sent during it
    body = b'{"prompt":"And God said","n_predict":2}'
    partial = srv.socket()  # its request half sent when the drain begins
    partial.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body[:5])
    srv.wait_stat("connections_open", 4)  # these three and the stats request's
    t0 = time.monotonic()
    srv.signal(signal.SIGTERM)
    srv.wait_log("draining")
    idle.settimeout(2)
    assert idle.recv(4096) == b""  # closed at once, gracefully: nothing owed, nothing refused
    assert time.monotonic() - t0 < 0.8
    idle.close()
    partial.sendall(body[5:])
    fresh.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    for s in (partial, fresh):
        status, headers, answer = parse_responses(read_until_close(s))[0]
        assert status == 200 and headers["connection"] == "close", answer  # served, not 503
        s.close()
    assert srv.proc.wait(5) == 0
