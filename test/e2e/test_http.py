"""HTTP/1.1 handling: routing, keep-alive, pipelining, bodies, 100-continue, limits, bad input."""
import json
import socket
import time

from conftest import parse_responses, read_until_close


def error_of(body):
    doc = json.loads(body)
    assert set(doc) == {"error"}, doc
    assert set(doc["error"]) == {"code", "message", "type"}, doc
    return doc["error"]


def test_unknown_path_is_404_json(uvlm):
    status, headers, body = uvlm.request("GET", "/no/such/path")
    assert status == 404
    assert headers["content-type"] == "application/json"
    assert headers["date"].endswith(" GMT") and headers["server"] == "uvlm"
    err = error_of(body)
    assert err["code"] == 404 and err["type"] == "not_found_error"
    assert "/no/such/path" in err["message"]


def test_wrong_method_is_405_with_allow(uvlm):
    status, headers, body = uvlm.request("DELETE", "/health")
    assert status == 405
    assert headers["allow"] == "GET, HEAD, OPTIONS"
    assert error_of(body)["code"] == 405


def test_keep_alive_serves_several_requests_on_one_connection(uvlm):
    c = uvlm.conn()
    for _ in range(3):
        c.request("GET", "/health")
        r = c.getresponse()
        assert r.status == 200 and r.getheader("Connection") == "keep-alive"
        assert json.loads(r.read()) == {"status": "ok"}
    c.close()
    before = uvlm.stats()["connections_total"]
    c = uvlm.conn()
    for _ in range(3):
        c.request("GET", "/health")
        assert c.getresponse().read() == b'{"status":"ok"}'
    c.close()
    assert uvlm.stats()["connections_total"] == before + 2  # the one above, and this stats request


def test_pipelined_requests_answered_in_order(uvlm):
    reqs = (b"GET /debug/delay?ms=150 HTTP/1.1\r\nHost: x\r\n\r\n"
            b"POST /debug/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
            b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    got = parse_responses(uvlm.raw(reqs))
    assert [g[0] for g in got] == [200, 200, 200]
    assert json.loads(got[0][2]) == {"delayed_ms": 150}
    assert got[1][2] == b"hello"
    assert json.loads(got[2][2]) == {"status": "ok"}
    assert got[2][1]["connection"] == "close"


def test_request_split_into_single_bytes(uvlm):
    s = uvlm.socket()
    for b in b"POST /debug/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc":
        s.sendall(bytes([b]))
    got = parse_responses(read_until_close(s))
    s.close()
    assert got == [(200, got[0][1], b"abc")]


def test_chunked_request_body(uvlm):
    data = uvlm.raw(b"POST /debug/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                    b"5\r\nhello\r\n1;ext=1\r\n \r\n5\r\nworld\r\n0\r\n\r\n")
    assert parse_responses(data)[0][2] == b"hello world"


def test_expect_100_continue(uvlm):
    s = uvlm.socket()
    s.sendall(b"POST /debug/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n"
              b"Connection: close\r\n\r\n")
    assert s.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
    s.sendall(b"body")
    got = parse_responses(read_until_close(s))
    s.close()
    assert got[0][0] == 200 and got[0][2] == b"body"


def test_body_over_limit_is_413_before_any_body_byte(start_server):
    srv = start_server("--debug-endpoints", "--max-body", "1k")
    s = srv.socket()
    s.sendall(b"POST /debug/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1025\r\nExpect: 100-continue\r\n\r\n")
    got = parse_responses(read_until_close(s))
    s.close()
    assert got[0][0] == 413 and got[0][1]["connection"] == "close"
    assert error_of(got[0][2])["code"] == 413
    status, _, body = srv.request("POST", "/debug/echo", body=b"x" * 1024)
    assert status == 200 and len(body) == 1024


def test_chunked_body_over_limit_is_413(start_server):
    srv = start_server("--debug-endpoints", "--max-body", "1k")
    chunk = b"200\r\n" + b"y" * 512 + b"\r\n"
    data = srv.raw(b"POST /debug/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk * 3)
    assert parse_responses(data)[0][0] == 413


def test_headers_over_limits_are_431(start_server):
    srv = start_server("--max-header-bytes", "1k", "--max-headers", "8")
    big = srv.raw(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 2000 + b"\r\n\r\n")
    many = srv.raw(b"GET /health HTTP/1.1\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(9)) + b"\r\n")
    for data in (big, many):
        status, headers, body = parse_responses(data)[0]
        assert status == 431 and headers["connection"] == "close"
        assert error_of(body)["code"] == 431
    ok = srv.raw(b"GET /health HTTP/1.1\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(7)) +
                 b"Connection: close\r\n\r\n")
    assert parse_responses(ok)[0][0] == 200


def test_malformed_request_is_400_with_reason_and_close(uvlm):
    stream = uvlm.conn()
    stream.request("GET", "/debug/stream?n=4&interval_ms=50")
    r = stream.getresponse()
    data = uvlm.raw(b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n")
    status, headers, body = parse_responses(data)[0]
    assert status == 400 and headers["connection"] == "close"
    err = error_of(body)
    assert err["type"] == "invalid_request_error" and "Content-Length" in err["message"]
    uvlm.wait_log(r'"- -" 400 \d+\.\dms \d+B \(.*Content-Length')  # in the access log too
    # the other client's stream is unaffected
    assert r.read().count(b"data: ") == 4
    stream.close()


def test_connections_over_limit_get_503(start_server):
    srv = start_server("--max-connections", "3", "--debug-endpoints")
    assert srv.wait_stat("connections_open", 1)["connections_open"] == 1  # the stats request only
    time.sleep(0.2)  # until the server has seen the stats connection close
    held = [srv.socket(), srv.socket(), srv.socket()]
    time.sleep(0.1)
    status, headers, body = parse_responses(srv.raw(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"))[0]
    assert status == 503 and error_of(body)["type"] == "unavailable_error", srv.log()
    assert headers["retry-after"] == "1" and headers["connection"] == "close"
    # the health check still passes (the reserve beyond --max-connections), then closes
    status, headers, body = parse_responses(srv.raw(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"))[0]
    assert status == 200 and headers["connection"] == "close", srv.log()
    for s in held:
        s.close()
    time.sleep(0.1)
    assert srv.json("GET", "/health") == (200, {"status": "ok"})


def test_connections_over_limit_hold_bounded_memory(start_server):
    # Beyond --max-connections, a reserve of 4 is read for a /health request; each refused
    # connection after those waits for its 503 to be read: at most --max-connections of them at
    # once; beyond, a flood is closed at once without an answer, and holds nothing.
    srv = start_server("--max-connections", "1", "--debug-endpoints", "--header-timeout", "5s")
    time.sleep(0.2)  # until the server has seen wait_health's connection close
    held = srv.socket()

    def stats():
        held.sendall(b"GET /debug/stats HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while b"}" not in data:
            data += held.recv(4096)
        return json.loads(data.partition(b"\r\n\r\n")[2])

    reserve = [srv.socket() for _ in range(4)]  # silent: closed within a second (their head is due)
    refused = srv.socket()  # answered 503, lingers until we close it
    deadline = time.monotonic() + 5
    while stats()["rejects_open"] != 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    dropped = srv.socket()
    assert read_until_close(dropped) == b""  # closed at once: no 503, no linger
    dropped.close()
    s = stats()
    assert s["connections_rejected"] == 2 and s["rejects_open"] == 1 and s["connections_open"] == 1
    assert s["reserve_open"] == 4, s
    assert b" 503 " in refused.recv(4096)
    refused.close()
    for r in reserve:
        assert read_until_close(r) == b""  # nothing asked within the reserve's second: closed unanswered
        r.close()
    deadline = time.monotonic() + 3
    while stats()["reserve_open"] != 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stats()["reserve_open"] == 0
    held.close()


def test_idle_keep_alive_connection_is_closed(start_server):
    srv = start_server("--idle-timeout", "200ms")
    s = srv.socket()
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    time.sleep(0.05)
    first = s.recv(4096)
    assert b" 200 " in first
    t0 = time.monotonic()
    assert read_until_close(s) == b""  # closed without another response
    assert time.monotonic() - t0 < 2.0
    s.close()


def test_client_that_never_reads_a_closing_response_is_dropped(start_server):
    # Connection: close with a response far bigger than the socket buffers, never read: the
    # server cannot flush it, and must not hold the connection (and its place) forever.
    srv = start_server("--idle-timeout", "1s", "--debug-endpoints", "--max-body", "16M")  # not less: a loaded machine
    s = srv.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    body = b"x" * (8 << 20)
    s.sendall(b"POST /debug/echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    srv.wait_log(r"POST /debug/echo\" 200")
    # only the stats request's own connection is left once --idle-timeout has passed
    assert srv.wait_stat("connections_open", 1, timeout=6)["connections_open"] == 1, srv.log()
    s.close()


def test_client_that_half_closes_after_its_request_gets_the_whole_response(start_server):
    # Sending FIN after the request (shutdown(SHUT_WR), `nc -N`) is not leaving: the response,
    # bigger than the socket buffers, must still arrive whole, keep-alive or not.
    uvlm = start_server("--debug-endpoints", "--max-body", "16M")
    body = b"x" * (8 << 20)
    for connection in (b"close", b"keep-alive"):
        s = uvlm.socket(timeout=10)
        s.sendall(b"POST /debug/echo HTTP/1.1\r\nHost: x\r\nConnection: %s\r\n"
                  b"Content-Length: %d\r\n\r\n" % (connection, len(body)) + body)
        s.shutdown(socket.SHUT_WR)
        time.sleep(0.3)  # the server sees the EOF while most of the response is still queued
        data = read_until_close(s)
        s.close()
        assert data.startswith(b"HTTP/1.1 200 OK\r\n"), connection
        got = len(data.partition(b"\r\n\r\n")[2])
        assert got == len(body), connection


def test_slow_request_gets_408_then_close(start_server):
    srv = start_server("--read-timeout", "300ms", "--debug-endpoints")
    for partial in (b"GET /health HTTP/1.1\r\nHos",
                    b"POST /debug/echo HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc"):
        s = srv.socket()
        s.sendall(partial)
        t0 = time.monotonic()
        status, headers, body = parse_responses(read_until_close(s))[0]
        s.close()
        assert status == 408 and headers["connection"] == "close"
        assert error_of(body)["code"] == 408
        assert 0.2 < time.monotonic() - t0 < 3.0
    assert srv.stats()["timeouts"] == 2


def test_head_and_http10(uvlm):
    data = uvlm.raw(b"GET /health HTTP/1.0\r\n\r\n")
    status, headers, body = parse_responses(data)[0]
    assert status == 200 and headers["connection"] == "close" and body == b'{"status":"ok"}'


def test_ipv6_listener(start_server):
    try:
        socket.socket(socket.AF_INET6).bind(("::1", 0))
    except OSError:
        import pytest
        pytest.skip("no IPv6 loopback on this machine")
    srv = start_server(host="::1")
    assert srv.json("GET", "/health") == (200, {"status": "ok"})
    assert srv.wait_log(r'\[::1\]:\d+ "GET /health" 200')


def test_host_name_is_resolved(start_server):
    srv = start_server(host="localhost")
    assert srv.json("GET", "/health") == (200, {"status": "ok"})


def test_pipelining_beyond_the_input_buffer(uvlm):
    # 64 KiB of requests queued behind a slow one: the server pauses reading, then catches up
    bodies = [bytes([65 + i % 26]) * 2000 for i in range(32)]
    reqs = b"GET /debug/delay?ms=200 HTTP/1.1\r\nHost: x\r\n\r\n" + b"".join(
        b"POST /debug/echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(b), b) for b in bodies)
    reqs += b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n"
    got = parse_responses(uvlm.raw(reqs, timeout=10))
    assert len(got) == 34
    assert [g[2] for g in got[1:33]] == bodies
    assert got[33][0] == 200
