"""End-to-end harness: start the real ./uvlm on 127.0.0.1 and talk HTTP to it.

    def test_x(uvlm):                       # a started server with --debug-endpoints
        status, headers, body = uvlm.request("GET", "/health")
    def test_y(start_server):               # your own flags / env / host
        srv = start_server("--api-key", "k", env={"UVLM_LOG_LEVEL": "debug"})
        srv.json("GET", "/health")  -> (status, parsed JSON)
        srv.stop()                          # SIGTERM; returns the exit status

The binary is $UVLM_BIN (default ./uvlm). Every server listens on --port 0 (a free port, read back
from its "listening on" log line, so no port races), is stopped at teardown (SIGTERM, then
SIGKILL), and must exit 0 with no sanitizer report in its stderr (srv.log()). Python stdlib only.
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("UVLM_BIN", os.path.join(ROOT, "uvlm"))
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")
SHARED = os.environ.get("UVLM_SHARED", os.path.join(os.path.dirname(ROOT), "shared"))
# CI sets UVLM_NO_SKIP=1: a test that needs what the machine lacks (../shared, node, haproxy)
# fails there instead of skipping, so no gate disappears silently.
NO_SKIP = os.environ.get("UVLM_NO_SKIP", "") not in ("", "0")


def need(ok, reason):
    """Skip the calling test (fail it under UVLM_NO_SKIP) unless ok."""
    if not ok:
        (pytest.fail if NO_SKIP else pytest.skip)(reason)


def shared_file(*parts):
    """The path of a file under ../shared ($UVLM_SHARED); skips (fails under UVLM_NO_SKIP) when absent."""
    path = os.path.join(SHARED, *parts)
    need(os.path.exists(path), "shared test data missing: " + path)
    return path


class Server:
    def __init__(self, args=(), env=None, host="127.0.0.1", wait_ready=True, timeout=10.0, port=0):
        self.host = host
        self.expected_status = 0  # what check_clean_exit expects from the process
        self.args = list(args)
        self.stderr = tempfile.NamedTemporaryFile(prefix="uvlm-e2e-", suffix=".log", delete=False)
        full_env = dict(os.environ)
        full_env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
        full_env.update(env or {})
        cmd = [BIN, "--host", host, "--port", str(port)] + self.args
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self.stderr, env=full_env, cwd=ROOT)
        # port 0: the server picks one and logs it; a given port (e.g. with a --log-level that
        # hides the "listening on" line) is polled until it answers
        self.port = port or self._wait_port(timeout)
        if wait_ready or port:
            self.wait_health(timeout)

    def _wait_port(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(r"listening on \S*:(\d+)", self.log())
            if m:
                return int(m.group(1))
            if self.proc.poll() is not None:
                raise AssertionError("uvlm exited %s before listening:\n%s" % (self.proc.returncode, self.log()))
            time.sleep(0.01)
        raise AssertionError("uvlm did not log 'listening on' within %ss:\n%s" % (timeout, self.log()))

    def log(self):
        with open(self.stderr.name, "r", errors="replace") as f:
            return f.read()

    def wait_log(self, pattern, timeout=5.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(pattern, self.log())
            if m:
                return m
            time.sleep(0.02)
        raise AssertionError("no %r in the log within %ss:\n%s" % (pattern, timeout, self.log()))

    def wait_health(self, timeout=10.0):
        """Until /health answers with anything but "loading" (the default model loads at start;
        at the deadline, whatever it says). Returns (status, body)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                status, doc = self.json("GET", "/health")
                if doc != {"status": "loading"} or time.monotonic() > deadline:
                    return status, doc
            except OSError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.02)

    def conn(self, timeout=10.0):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=10.0):
        """One request on a new connection: (status, headers dict with lower-case names, body bytes)."""
        c = self.conn(timeout)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()

    def json(self, method, path, body=None, headers=None):
        status, _, data = self.request(method, path, body, headers)
        return status, json.loads(data) if data else None

    def stats(self, headers=None):
        status, doc = self.json("GET", "/debug/stats", headers=headers)
        assert status == 200, doc
        return doc

    def wait_stat(self, key, value, timeout=5.0):
        deadline = time.monotonic() + timeout
        while True:
            s = self.stats()
            if s[key] == value or time.monotonic() > deadline:
                return s
            time.sleep(0.02)

    def socket(self, timeout=5.0):
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        s = socket.socket(family, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect((self.host, self.port))
        return s

    def raw(self, data, timeout=5.0):
        """Send bytes on a new connection, read until the server closes it (or timeout)."""
        s = self.socket(timeout)
        try:
            s.sendall(data)
            return read_until_close(s)
        finally:
            s.close()

    def signal(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)

    def stop(self, timeout=15.0):
        """SIGTERM and wait; SIGKILL if it does not exit. Returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def check_clean_exit(self):
        rc = self.stop()
        log = self.log()
        os.unlink(self.stderr.name)
        assert not any(m in log for m in SANITIZER_MARKS), log
        assert rc == self.expected_status, "uvlm exited %s:\n%s" % (rc, log)


def free_port():
    """A port that was free a moment ago (prefer --port 0 where the log shows the port)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_until_close(s):
    chunks = []
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            chunks.append(b)
    except socket.timeout:
        pass
    except ConnectionResetError:
        pass
    return b"".join(chunks)


def parse_responses(data):
    """Split raw bytes into [(status, headers dict, body)] for Content-Length responses."""
    out = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
        n = int(headers.get("content-length", 0))
        out.append((status, headers, rest[:n]))
        data = rest[n:]
    return out


@pytest.fixture
def start_server():
    servers = []

    def start(*args, env=None, host="127.0.0.1", wait_ready=True, port=0):
        srv = Server(args, env=env, host=host, wait_ready=wait_ready, port=port)
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.check_clean_exit()


@pytest.fixture
def uvlm(start_server):
    return start_server("--debug-endpoints")
