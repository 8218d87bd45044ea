"""Model loading and shutdown around the serving engine: 503 loading before the model is ready,
a missing model ends the server with a message, a drain lets a running generation finish."""
import json
import signal
import subprocess

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
    assert "/nonexistent/model.gguf" in p.stderr and "loading failed" in p.stderr


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
