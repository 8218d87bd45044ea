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
