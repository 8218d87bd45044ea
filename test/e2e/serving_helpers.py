"""Helpers of the serving e2e tests (test_serving_*.py): JSON posts, SSE reading, /metrics."""
import json
import os
import threading
import time

import pytest

from conftest import ROOT, Server, shared_file

KJV = os.path.join(ROOT, "models", "kjv-tiny-q8_0.gguf")  # the default model, in the repository
PROMPT = "And God said"
PROMPTS = ["And God said", "In the beginning", "The LORD is my shepherd", "And Moses went up",
           "Blessed are the", "And it came to pass", "Thus saith the LORD", "My son, hear"]


def start(*args):
    """A server on the default model (no --model) with the given flags."""
    if not os.path.exists(KJV):
        pytest.fail("the default model %s is missing from the repository" % KJV)
    return wait_ready(Server(args))


def wait_ready(srv, timeout=30.0):
    """Until /health says 200 (the model is loaded)."""
    deadline = time.monotonic() + timeout
    while True:
        status, body = srv.json("GET", "/health")
        if status == 200:
            return srv
        assert body["status"] == "loading", body
        assert time.monotonic() < deadline, "not ready after %ss:\n%s" % (timeout, srv.log())
        time.sleep(0.02)


def shared_model(name):
    return shared_file("models", name)


def post(srv, path, body, timeout=60.0):
    status, _, data = srv.request("POST", path, json.dumps(body), {"Content-Type": "application/json"},
                                  timeout=timeout)
    return status, json.loads(data) if data else None


def sse_events(resp):
    """Yield the data of each event of an open text/event-stream response, as produced."""
    while True:
        line = resp.readline()  # de-chunked; b"" at the end of the stream
        if not line:
            return
        line = line.rstrip(b"\r\n")
        if line.startswith(b"data: "):
            yield line[6:].decode()


def stream(srv, path, body, timeout=60.0):
    """POST with stream: true; returns the list of event data strings ("[DONE]" kept as is)."""
    c = srv.conn(timeout)
    try:
        c.request("POST", path, json.dumps(dict(body, stream=True)), {"Content-Type": "application/json"})
        r = c.getresponse()
        assert r.status == 200, r.read()
        assert r.getheader("Content-Type").startswith("text/event-stream")
        return list(sse_events(r))
    finally:
        c.close()


def metrics(srv):
    status, _, data = srv.request("GET", "/metrics")
    assert status == 200
    out = {}
    for line in data.decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def greedy(prompt=PROMPT, n_predict=12, **extra):
    return dict({"prompt": prompt, "n_predict": n_predict, "temperature": 0}, **extra)


def run_concurrently(fns):
    results = [None] * len(fns)

    def run(i):
        results[i] = fns[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return results
