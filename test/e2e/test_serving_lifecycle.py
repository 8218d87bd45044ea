"""Model loading and shutdown around the serving engine: 503 loading before the model is ready,
a missing model or a memory budget beyond the machine ends the server with a message, a drain lets
a running generation finish."""
import json
import signal
import subprocess

import pytest

from conftest import BIN, ROOT, Server
from serving_helpers import PROMPT, post, sse_events, start, wait_ready


def test_model_endpoints_say_loading_until_ready():
    srv = Server(["--debug-ready-delay", "400ms"], wait_ready=False)
    try:
        status, body = post(srv, "/completion", {"prompt": PROMPT})
        assert status == 503 and body["error"]["message"] == "Loading model"
        assert srv.json("GET", "/health") == (503, {"status": "loading"})
        wait_ready(srv)
        status, body = post(srv, "/completion", {"prompt": PROMPT, "n_predict": 2})
        assert status == 200 and body["tokens_predicted"] == 2
    finally:
        srv.check_clean_exit()


def test_missing_model_exits_2_naming_it():
    p = subprocess.run([BIN, "--port", "0", "-m", "/nonexistent/model.gguf"], cwd=ROOT, capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 2
    assert "--model '/nonexistent/model.gguf': No such file or directory" in p.stderr, p.stderr
    assert "listening on" not in p.stderr, p.stderr  # a configuration error, found before listening


def test_kv_budget_beyond_the_machine_exits_1_saying_so():
    """--kv-tokens at its maximum (16777216 cells of the default model: ~25 GB of K/V) on a machine
    with less memory available: refused before loading, naming the sizes, not an OOM kill later."""
    avail = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    if avail >= 26 * 2**30:
        pytest.skip("this machine has %d GiB available: the budget fits" % (avail >> 30))
    p = subprocess.run([BIN, "--port", "0", "--kv-tokens", "16777216"], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 1, p.stderr
    assert "KV 24.31 GiB for 16777216 cells" in p.stderr and "lower --kv-tokens" in p.stderr, p.stderr


def test_unknown_chat_template_is_refused_at_load():
    p = subprocess.run([BIN, "--port", "0", "--chat-template", "nosuch"], cwd=ROOT, capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 2 and "chatml" in p.stderr  # the message lists the known names


def test_drain_lets_a_generation_finish():
    srv = start()
    c = srv.conn(timeout=60)
    c.request("POST", "/completion", json.dumps({"prompt": PROMPT, "n_predict": 24, "stream": True,
                                                 "temperature": 0, "ignore_eos": True}))
    r = c.getresponse()
    events = sse_events(r)
    first = json.loads(next(events))
    srv.signal(signal.SIGTERM)
    rest = [json.loads(e) for e in events]
    assert rest[-1]["stop"] is True and rest[-1]["tokens_predicted"] == 24
    assert first["content"] == " unto"
    assert srv.proc.wait(30) == 0
    srv.check_clean_exit()


def test_health_says_stalled_while_a_step_hangs_and_ok_again_after():
    """A step running far past its expected time turns /health 503 "stalled";
    when it finishes, 200 again. /debug/slow-step (only with --debug-endpoints) makes the next
    step sleep before computing, like a hung engine."""
    import threading
    import time

    srv = start("--debug-endpoints")
    try:
        # steps of the tiny model take ~ms: afterwards a step is expected to be quick, so one that
        # runs 10x its expected time + 1 s is stalled
        assert post(srv, "/completion", {"prompt": PROMPT, "n_predict": 8})[0] == 200
        status, h = srv.json("GET", "/health?detail=1")
        assert status == 200 and h["status"] == "ok" and h["step_in_flight"] is False
        assert {"status", "queue", "active_requests", "active_sequences", "kv_cells_total",
                "kv_cells_free", "tokens_per_second", "step_in_flight"} <= set(h)
        assert not any(isinstance(v, str) for k, v in h.items() if k != "status")  # no text
        assert h["kv_cells_total"] == 4096 and h["kv_cells_free"] <= h["kv_cells_total"]
        assert h["tokens_per_second"] > 0 and h["active_requests"] == 0
        assert srv.json("POST", "/debug/slow-step?ms=4000") == (200, {"slow_step_ms": 4000})
        result = {}
        t = threading.Thread(target=lambda: result.update(r=post(srv, "/completion", {"prompt": PROMPT, "n_predict": 2})))
        t0 = time.monotonic()
        t.start()
        stalled = None
        while time.monotonic() - t0 < 3.5 and stalled is None:
            status, h = srv.json("GET", "/health?detail=1")
            if status == 503:
                stalled = (time.monotonic() - t0, h)
            else:
                assert status == 200 and h["status"] == "ok", h
                time.sleep(0.05)
        assert stalled is not None, "/health never said stalled during a 4 s step"
        waited, h = stalled
        assert waited > 0.9, "stalled after %.2f s: sooner than 10 x expected + 1 s grace" % waited
        assert h["status"] == "stalled" and h["step_in_flight"] is True
        assert h["active_requests"] == 1 and h["active_sequences"] == 1 and h["queue"] == 0
        assert srv.json("GET", "/health") == (503, {"status": "stalled"})
        t.join(30)
        assert result["r"][0] == 200 and result["r"][1]["tokens_predicted"] == 2
        assert srv.json("GET", "/health") == (200, {"status": "ok"})  # work moved again
    finally:
        srv.check_clean_exit()
