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
