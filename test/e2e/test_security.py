"""--api-key (Bearer or X-Api-Key, 401 JSON) and CORS (--cors-origin, loopback pages by default,
OPTIONS preflight)."""
import json


def test_api_key_required_except_health(start_server):
    srv = start_server("--debug-endpoints", "--api-key", "k1", "--api-key", "k2,k3")
    status, headers, body = srv.request("GET", "/debug/stats")
    assert status == 401
    doc = json.loads(body)
    assert doc["error"]["code"] == 401 and doc["error"]["type"] == "authentication_error"
    assert headers["www-authenticate"] == "Bearer"
    for h in ({"Authorization": "Bearer k1"}, {"authorization": "bearer k2"}, {"X-Api-Key": "k3"}):
        assert srv.request("GET", "/debug/stats", headers=h)[0] == 200, h
    for h in ({"Authorization": "Bearer k"}, {"Authorization": "Bearer k1x"}, {"X-Api-Key": ""},
              {"Authorization": "Basic k1"}):
        assert srv.request("GET", "/debug/stats", headers=h)[0] == 401, h
    assert srv.json("GET", "/health") == (200, {"status": "ok"})


def test_cors_origin_and_preflight(start_server):
    srv = start_server("--debug-endpoints", "--cors-origin", "http://a.example,http://b.example")
    status, headers, _ = srv.request("GET", "/health", headers={"Origin": "http://b.example"})
    assert status == 200
    assert headers["access-control-allow-origin"] == "http://b.example" and headers["vary"] == "Origin"
    status, headers, _ = srv.request("GET", "/health", headers={"Origin": "http://evil.example"})
    assert "access-control-allow-origin" not in headers
    status, headers, body = srv.request("OPTIONS", "/debug/echo", headers={
        "Origin": "http://a.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type, authorization"})
    assert status == 200 and body == b""
    assert headers["access-control-allow-origin"] == "http://a.example"
    assert headers["access-control-allow-methods"] == "POST, OPTIONS"
    assert headers["access-control-allow-headers"] == "content-type, authorization"
    assert srv.request("OPTIONS", "/nope", headers={"Origin": "http://a.example"})[0] == 404


def test_cors_wildcard_and_preflight_without_key(start_server):
    srv = start_server("--debug-endpoints", "--cors-origin", "*", "--api-key", "k")
    status, headers, _ = srv.request("OPTIONS", "/debug/stats", headers={"Origin": "http://x.example"})
    assert status == 200 and headers["access-control-allow-origin"] == "*"
    status, headers, _ = srv.request("GET", "/debug/stats", headers={"Origin": "http://x.example"})
    assert status == 401 and headers["access-control-allow-origin"] == "*"


def test_cors_default_lets_pages_on_this_machine_read_answers(uvlm):
    for origin in ("http://localhost:5173", "http://127.0.0.1:3000", "http://[::1]:8000", "http://localhost"):
        status, headers, _ = uvlm.request("GET", "/health", headers={"Origin": origin})
        assert status == 200 and headers["access-control-allow-origin"] == origin, origin
        assert headers["vary"] == "Origin"
    for origin in ("http://a.example", "http://localhost.a.example", "null"):
        status, headers, _ = uvlm.request("GET", "/health", headers={"Origin": origin})
        assert status == 200 and "access-control-allow-origin" not in headers, origin
    status, headers, body = uvlm.request("OPTIONS", "/debug/echo", headers={
        "Origin": "http://localhost:5173", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os"})
    assert status == 200 and body == b"" and headers["access-control-allow-origin"] == "http://localhost:5173"
    assert headers["access-control-allow-headers"] == "authorization, content-type, x-stainless-os"


def test_cors_origin_empty_sends_no_cors_headers(start_server):
    srv = start_server("--cors-origin", "")
    status, headers, _ = srv.request("GET", "/health", headers={"Origin": "http://localhost:5173"})
    assert status == 200 and "access-control-allow-origin" not in headers
