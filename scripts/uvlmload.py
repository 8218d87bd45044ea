"""uvlmload.py: a small asyncio HTTP/1.1 load client for uvlm (Python stdlib only), shared by
scripts/soak, scripts/faults and the e2e tests (test/e2e/test_soak_short.py, test_faults.py,
test_replicas.py).

    res = await request("127.0.0.1", port, "POST", "/completion", body={...}, cut_after_events=3)
    res.status, res.headers, res.body, res.events, res.complete, res.disconnected, res.error

A request is one connection (Connection: close unless keep-alive is asked for), so N concurrent
workers are N concurrent connections. Responses are read whole: Content-Length, chunked, or until
the server closes. Server-Sent Events are split into `data:` payloads as they arrive, and a client
can leave after k events (cut_after_events) to act as a disconnecting reader.

`Kinds` describe the requests of a mix (what to send, and how to tell a complete and valid answer
from a broken one), for the model endpoints (native /completion, OpenAI chat) and for the HTTP
layer's debug endpoints (--debug-endpoints), which need no model.
"""
import asyncio
import json
import os
import random
import re
import signal
import subprocess
import tempfile
import time


class Result:
    __slots__ = ("kind", "status", "headers", "body", "events", "complete", "disconnected", "error",
                 "started", "latency", "first_event")

    def __init__(self, kind):
        self.kind = kind
        self.status = 0
        self.headers = {}
        self.body = b""
        self.events = []
        self.complete = False      # the whole response arrived (and, for a stream, its end)
        self.disconnected = False  # we left on purpose (cut_after_events)
        self.error = None          # what went wrong on the wire, if anything
        self.started = time.monotonic()
        self.latency = None
        self.first_event = None


async def _read_headers(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return status, headers


class _Events:
    """Splits an event stream into the payloads of its `data:` lines as bytes arrive."""

    def __init__(self, res):
        self.res, self.buf = res, b""

    def feed(self, data):
        self.buf += data
        while b"\n\n" in self.buf:
            ev, self.buf = self.buf.split(b"\n\n", 1)
            for line in ev.split(b"\n"):
                if line.startswith(b"data:"):
                    if self.res.first_event is None:
                        self.res.first_event = time.monotonic() - self.res.started
                    self.res.events.append(line[5:].strip())


async def request(host, port, method, path, body=None, headers=None, kind="", cut_after_events=None,
                  timeout=120.0, keep_alive=False, send_delay=None):
    """One request on a new connection. Never raises for network trouble: see Result.error.
    send_delay: seconds between the bytes of the request head (a byte-by-byte client)."""
    res = Result(kind or path)
    writer = None
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        h = {"Host": "%s:%d" % (host, port), "Connection": "keep-alive" if keep_alive else "close"}
        if data is not None:
            h["Content-Type"] = "application/json"
            h["Content-Length"] = str(len(data))
        h.update(headers or {})
        head = ("%s %s HTTP/1.1\r\n" % (method, path) + "".join("%s: %s\r\n" % kv for kv in h.items())
                + "\r\n").encode()
        if send_delay is None:
            writer.write(head + (data or b""))
            await writer.drain()
            await asyncio.wait_for(_read_response(reader, res, cut_after_events), timeout)
        else:
            # read while trickling the bytes out: the server may answer (408) and close first
            reading = asyncio.ensure_future(asyncio.wait_for(_read_response(reader, res, cut_after_events), timeout))
            try:
                for i in range(len(head)):
                    if reading.done():
                        break
                    writer.write(head[i:i + 1])
                    await writer.drain()
                    await asyncio.sleep(send_delay)
                writer.write(data or b"")
                await writer.drain()
            except OSError:
                pass
            await reading
    except asyncio.TimeoutError:
        res.error = "timeout"
    except (OSError, asyncio.IncompleteReadError, ValueError, IndexError) as e:
        res.error = "%s: %s" % (type(e).__name__, e)
    finally:
        if writer is not None:
            if res.disconnected:
                writer.transport.abort()  # leave at once, like a client that was killed
            else:
                writer.close()
    res.latency = time.monotonic() - res.started
    return res


async def _read_response(reader, res, cut_after_events):
    res.status, res.headers = await _read_headers(reader)
    sse = res.headers.get("content-type", "").startswith("text/event-stream")
    events = _Events(res) if sse else None
    chunks = []

    def take(data):
        chunks.append(data)
        if events:
            events.feed(data)
            if cut_after_events is not None and len(res.events) >= cut_after_events:
                res.disconnected = True
                return False
        return True

    if res.headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                res.complete = True
                break
            data = await reader.readexactly(size + 2)
            if not take(data[:-2]):
                break
    elif "content-length" in res.headers:
        n = int(res.headers["content-length"])
        take(await reader.readexactly(n))
        res.complete = True
    else:
        while True:
            data = await reader.read(65536)
            if not data:
                res.complete = True
                break
            if not take(data):
                break
    res.body = b"".join(chunks)


# --- a server to test ------------------------------------------------------------------------------

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOST = "127.0.0.1"
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


class Server:
    """uvlm on a free loopback port; stop() drains it and returns (exit status, log)."""

    def __init__(self, bin_path, args, ready_timeout=120):
        self.log_path = tempfile.NamedTemporaryFile(prefix="uvlm-", suffix=".log", delete=False).name
        env = dict(os.environ)
        # on an ASan build: leaks reported at exit, and freed memory held back (the quarantine,
        # 256 MiB by default) capped so that RSS figures still say something about the server.
        # Freed memory is not handed back to the OS every 5 s (allocator_release_to_os_interval_ms):
        # on this VM, memory the guest gives back is taken back from the host at the next touch,
        # page faults that stalled random loop callbacks for 5-23 ms of CPU time (a 2-minute soak:
        # iterations over 5 ms 36-80 -> 16; the longest close callback 14-23 ms -> 0.2 ms).
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0:quarantine_size_mb=16:"
                                       "allocator_release_to_os_interval_ms=-1")
        self.proc = subprocess.Popen([bin_path, "--host", HOST, "--port", "0"] + list(args), cwd=ROOT,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=open(self.log_path, "w"), env=env)
        deadline = time.monotonic() + ready_timeout
        self.port = None
        while self.port is None:
            m = re.search(r"listening on \S*:(\d+)", self.log())
            if m:
                self.port = int(m.group(1))
            elif self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError("uvlm did not start:\n" + self.log()[-3000:])
            else:
                time.sleep(0.02)
        while asyncio.run(self.request("GET", "/health")).status != 200:  # loading the model
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError("uvlm did not become ready:\n" + self.log()[-3000:])
            time.sleep(0.05)

    def log(self):
        return open(self.log_path, errors="replace").read()

    def request(self, method, path, body=None, headers=None, **kw):
        return request(HOST, self.port, method, path, body, headers, **kw)

    def rss_kib(self):
        return rss_kib(self.proc.pid)

    def stop(self, signal_it=True, keep_log=False):
        """SIGTERM (unless signal_it is False: it was sent already) and wait; (exit status, log).
        The log file is removed unless keep_log."""
        if self.proc.poll() is None and signal_it:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        log = self.log()
        if not keep_log:
            os.unlink(self.log_path)
        return rc, log


# --- what a mix is made of ------------------------------------------------------------------------

class Kind:
    """One kind of request in a mix: name, weight, how to send it and how to judge the answer.
    validate(res) returns None when the answer is complete and valid, else why not."""

    def __init__(self, name, weight, method, path, body=None, stream=False, validate=None, headers=None):
        self.name, self.weight, self.method, self.path = name, weight, method, path
        self.body, self.stream, self.validate, self.headers = body, stream, validate, headers


def _json_body(res):
    try:
        return json.loads(res.body)
    except ValueError:
        return None


def check_json_200(res, need=()):
    if res.status != 200:
        return "status %d: %r" % (res.status, res.body[:200])
    doc = _json_body(res)
    if doc is None:
        return "body is not JSON: %r" % res.body[:200]
    for k in need:
        if k not in doc:
            return "no %r in %r" % (k, res.body[:200])
    return None


def check_native_stream(res):
    if res.status != 200:
        return "status %d: %r" % (res.status, res.body[:200])
    if not res.events:
        return "no events"
    try:
        docs = [json.loads(e) for e in res.events]
    except ValueError:
        return "an event is not JSON: %r" % res.events[:3]
    if not docs[-1].get("stop") or any(d.get("stop") for d in docs[:-1]):
        return "the stream does not end with exactly one stop event"
    return None


def check_oai_stream(res):
    if res.status != 200:
        return "status %d: %r" % (res.status, res.body[:200])
    if not res.events or res.events[-1] != b"[DONE]":
        return "the stream does not end with [DONE]"
    try:
        docs = [json.loads(e) for e in res.events[:-1]]
    except ValueError:
        return "an event is not JSON"
    if not docs or not any(c.get("finish_reason") for d in docs for c in d.get("choices", [])):
        return "no chunk with a finish_reason"
    return None


def check_debug_stream(n):
    def check(res):
        if res.status != 200:
            return "status %d" % res.status
        try:
            idx = [json.loads(e)["i"] for e in res.events]
        except (ValueError, KeyError):
            return "an event is not the debug stream's JSON"
        return None if idx == list(range(n)) else "events %s, want 0..%d" % (idx[:5], n - 1)
    return check


PROMPTS = ["And God said", "In the beginning", "The LORD is my shepherd", "Blessed are they",
           "And it came to pass", "Now the serpent was", "Thou shalt"]


def model_mix(max_tokens=16):
    """Completions: native and OpenAI chat, streaming and not, plus the info endpoints."""
    def native(stream):
        return lambda: {"prompt": random.choice(PROMPTS), "n_predict": max_tokens, "stream": stream,
                        "temperature": 0.8, "seed": random.randrange(1 << 30)}

    def chat(stream):
        return lambda: {"messages": [{"role": "user", "content": random.choice(PROMPTS)}],
                        "max_tokens": max_tokens, "stream": stream, "temperature": 0.8}
    return [
        Kind("native_stream", 3, "POST", "/completion", native(True), True, check_native_stream),
        Kind("chat_stream", 3, "POST", "/v1/chat/completions", chat(True), True, check_oai_stream),
        Kind("native", 2, "POST", "/completion", native(False), False,
             lambda r: check_json_200(r, ("content",))),
        Kind("chat", 2, "POST", "/v1/chat/completions", chat(False), False,
             lambda r: check_json_200(r, ("choices",))),
    ]


def debug_mix():
    """The HTTP layer alone (--debug-endpoints): event streams and late answers."""
    return [
        Kind("debug_stream", 6, "GET", "/debug/stream?n=20&interval_ms=20&size=64", None, True,
             check_debug_stream(20)),
        Kind("debug_delay", 4, "GET", "/debug/delay?ms=30", None, False,
             lambda r: check_json_200(r, ("delayed_ms",))),
    ]


# --- metrics and process figures ------------------------------------------------------------------

def parse_metrics(text):
    """Prometheus text -> {name: value} for unlabelled samples."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*) ([-+0-9.eEinfNa]+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def asan_build(bin_path):
    """Whether the binary is an AddressSanitizer build (its allocator keeps more memory)."""
    with open(bin_path, "rb") as f:
        return b"__asan_init" in f.read()


def rss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def percentile(values, p):
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


# --- a load run -----------------------------------------------------------------------------------

class Tally:
    """What happened to every request of a run, by kind."""

    def __init__(self):
        self.by_kind = {}
        self.failures = []      # (kind, why) of requests that should have succeeded and did not
        self.refused = 0        # connections refused once a drain began (not failures)
        self.disconnected = 0
        self.statuses = {}

    def add(self, kind, res, why):
        k = self.by_kind.setdefault(kind, {"ok": 0, "failed": 0, "disconnected": 0})
        self.statuses[res.status] = self.statuses.get(res.status, 0) + 1
        if res.disconnected:
            k["disconnected"] += 1
            self.disconnected += 1
        elif why is None:
            k["ok"] += 1
        else:
            k["failed"] += 1
            if len(self.failures) < 50:
                self.failures.append((kind, why))

    @property
    def ok(self):
        return sum(k["ok"] for k in self.by_kind.values())

    @property
    def failed(self):
        return sum(k["failed"] for k in self.by_kind.values())


async def run_mix(host, port, kinds, connections, duration, disconnect_rate=0.0, tally=None,
                  draining=None, timeout=120.0, session_header=False):
    """`connections` workers send requests of the mix back to back for `duration` seconds.
    A streaming request is cut after one or two events with probability disconnect_rate.
    draining: an asyncio.Event; once set, a refused connection is counted as refused, not failed."""
    tally = tally or Tally()
    deadline = time.monotonic() + duration
    weights = [k.weight for k in kinds]

    async def worker(w):
        rng = random.Random(os.getpid() * 7919 + w)
        while time.monotonic() < deadline:
            kind = rng.choices(kinds, weights)[0]
            cut = rng.randint(1, 2) if kind.stream and rng.random() < disconnect_rate else None
            body = kind.body() if callable(kind.body) else kind.body
            headers = dict(kind.headers or {})
            if session_header:
                headers["X-Session-Id"] = "s%d" % w
            res = await request(host, port, kind.method, kind.path, body, headers, kind.name, cut, timeout)
            # once a drain began, a new connection is refused (or a 503 answers a request that
            # met the drain): neither was in flight, both may retry elsewhere, and the worker stops
            if draining is not None and draining.is_set() and (
                    res.status == 503 or (res.status == 0 and res.error and
                                          ("refused" in res.error.lower() or "reset" in res.error.lower()))):
                tally.refused += 1
                return
            why = res.error if res.error and not res.disconnected else kind.validate(res)
            if res.disconnected:
                why = None
            tally.add(kind.name, res, why)
    await asyncio.gather(*(worker(w) for w in range(connections)))
    return tally


# --- /health latency, measured from a process of its own ------------------------------------------

def probe(host, port, interval, until, stop_path=None):
    """GET /health every `interval` seconds until the wall-clock time `until` (or until the file
    stop_path exists, when given) on a keep-alive connection (a new one
    when the server closes it); returns (latencies in seconds of 200 answers, non-200 count,
    errors, send times of those 200 answers in time.monotonic() seconds, which is the same clock
    in every process of the machine). Run it in its own process (probe_process) so the load
    generator's own event loop does not add its delays to the figures."""
    import http.client
    lat, at, bad, errors = [], [], 0, 0
    conn = None
    while time.time() < until and not (stop_path and os.path.exists(stop_path)):
        t0 = time.monotonic()
        try:
            if conn is None:
                conn = http.client.HTTPConnection(host, port, timeout=5)
                conn.connect()
                t0 = time.monotonic()  # the connect is not the loop's answer time
            conn.request("GET", "/health")
            r = conn.getresponse()
            r.read()
            dt = time.monotonic() - t0
            if r.status == 200:
                lat.append(dt)
                at.append(t0)
            else:
                bad += 1
            if r.getheader("Connection", "").lower() == "close":
                conn.close()
                conn = None
        except (OSError, http.client.HTTPException):
            errors += 1
            if conn is not None:
                conn.close()
            conn = None
        time.sleep(max(0.0, interval - (time.monotonic() - t0)))
    if conn is not None:
        conn.close()
    return lat, bad, errors, at


def windows(lat, at, t0, width):
    """Per-window figures of a probe's latencies: [(start s, end s, n, p50, p99, max)] over
    consecutive `width`-second windows from t0 (the last one may be shorter)."""
    out = {}
    for dt, t in zip(lat, at):
        out.setdefault(int(max(0.0, t - t0) // width), []).append(dt)
    return [(k * width, (k + 1) * width, len(v), percentile(v, 50), percentile(v, 99), max(v))
            for k, v in sorted(out.items())]


def probe_process(host, port, interval, duration, stop_path=None):
    """Starts probe() in a child Python process for `duration` seconds from now (or until the file
    stop_path exists); .result() waits and returns its figures."""
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    code = ("import json,sys; sys.path.insert(0, %r); import uvlmload; "
            "print(json.dumps(uvlmload.probe(%r, %d, %f, %f, %r)))" % (here, host, port, interval, time.time() + duration,
                                                                   stop_path))
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)

    class Handle:
        def result(self):
            out, _ = p.communicate()
            return tuple(json.loads(out))
    return Handle()
