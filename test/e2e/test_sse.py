"""Server-Sent Events: per-event flushing, pings, backpressure, disconnect -> cancel exactly once."""
import json
import socket
import time

from conftest import read_until_close


def test_stream_is_flushed_per_event(uvlm):
    c = uvlm.conn()
    c.request("GET", "/debug/stream?n=3&interval_ms=300")
    r = c.getresponse()
    assert r.status == 200
    assert r.getheader("Content-Type") == "text/event-stream"
    assert r.getheader("Transfer-Encoding") == "chunked"
    arrivals, events = [], []
    while True:
        chunk = r.read1(65536)  # returns as soon as a chunk is there
        if not chunk:
            break
        for line in chunk.decode().splitlines():
            if line.startswith("data: "):
                arrivals.append(time.monotonic())
                events.append(json.loads(line[6:]))
    assert [e["i"] for e in events] == [0, 1, 2]
    # each event arrived when it was produced, not all at the end
    assert arrivals[1] - arrivals[0] > 0.1 and arrivals[2] - arrivals[1] > 0.1
    # the connection is reusable after the stream ended
    c.request("GET", "/health")
    assert c.getresponse().status == 200
    c.close()


def test_ping_comments_while_streaming(start_server):
    srv = start_server("--debug-endpoints", "--sse-ping", "50ms")
    status, headers, body = srv.request("GET", "/debug/stream?n=2&interval_ms=300")
    text = body.decode()
    assert status == 200
    assert text.count(": ping\n\n") >= 4, text
    assert text.count("data: ") == 2
    assert text.endswith("\n\n")


def test_slow_reader_is_closed_and_cancelled_not_buffered(start_server):
    srv = start_server("--debug-endpoints", "--sse-queue-bytes", "64k")
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # and never read
    s.settimeout(10)
    s.connect(("127.0.0.1", srv.port))
    s.sendall(b"GET /debug/stream?n=1000000&interval_ms=0&size=4096 HTTP/1.1\r\nHost: x\r\n\r\n")
    stats = srv.wait_stat("backpressure_closes", 1, timeout=10)
    assert stats["backpressure_closes"] == 1, srv.log()
    assert srv.wait_stat("requests_cancelled", 1)["requests_cancelled"] == 1
    srv.wait_log(r'"GET /debug/stream\S*" 499 \S+ms \d+B \(client reads too slowly\)')
    # the server closed the connection: reading what was buffered ends in EOF (or a reset)
    data = read_until_close(s)
    s.close()
    assert data.count(b"data: ") < 1000000
    assert srv.json("GET", "/health") == (200, {"status": "ok"})


def test_disconnect_mid_stream_cancels_exactly_once(uvlm):
    s = uvlm.socket()
    s.sendall(b"GET /debug/stream?n=100000&interval_ms=10 HTTP/1.1\r\nHost: x\r\n\r\n")
    got = b""
    while b"data: " not in got:
        got += s.recv(4096)
    assert uvlm.stats()["requests_cancelled"] == 0
    s.close()
    stats = uvlm.wait_stat("requests_cancelled", 1, timeout=2)
    assert stats["requests_cancelled"] == 1
    time.sleep(0.2)
    stats = uvlm.stats()
    assert stats["requests_cancelled"] == 1 and stats["requests_inflight"] == 1  # (this stats request)
    assert '"GET /debug/stream?n=100000&interval_ms=10" 499' in uvlm.log()


def test_late_answer_cancelled_when_client_leaves(uvlm):
    s = uvlm.socket()
    s.sendall(b"GET /debug/delay?ms=5000 HTTP/1.1\r\nHost: x\r\n\r\n")
    uvlm.wait_stat("requests_inflight", 2)
    s.close()
    assert uvlm.wait_stat("requests_cancelled", 1)["requests_cancelled"] == 1


def test_http10_stream_ends_with_close(uvlm):
    data = uvlm.raw(b"GET /debug/stream?n=2&interval_ms=0 HTTP/1.0\r\n\r\n")
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"Connection: close" in head and b"Transfer-Encoding" not in head
    assert body.count(b"data: ") == 2
