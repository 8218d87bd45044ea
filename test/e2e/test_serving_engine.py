"""The engine under load, end to end on the default model: concurrency gives the same greedy
outputs as one by one, a short request overtakes a long prefill, /health answers while steps run,
a tiny --kv-tokens preempts without changing outputs, a disconnect frees its cells, and events
leave as they are produced.

Steps are kept under 32 tokens (--batch-tokens 24): from 32 rows on, the matmuls take the sgemm
path (math/matmul.h), whose rounding differs from the per-row quantized path, so a sequence's
logits would depend on what else shares its step and greedy ties could flip. Below it every row
is computed alone, so "together == alone" is exact and checks the scheduler, not the rounding."""
import json
import threading
import time

import pytest

from serving_helpers import PROMPT, PROMPTS, greedy, metrics, post, run_concurrently, start

LONG = "And God said, Let there be light: and there was light. " * 40  # ~560 tokens


@pytest.fixture(scope="module")
def srv():
    s = start("--batch-tokens", "24")
    yield s
    s.check_clean_exit()


def test_eight_concurrent_equal_one_by_one(srv):
    reqs = [greedy(p, n_predict=8, cache_prompt=False) for p in PROMPTS]
    alone = [post(srv, "/completion", r)[1]["content"] for r in reqs]
    together = run_concurrently([lambda r=r: post(srv, "/completion", r)[1]["content"] for r in reqs])
    assert together == alone
    assert len(set(alone)) > 1  # the prompts really differ


def slot_states(srv):
    status, slots = srv.json("GET", "/slots")
    assert status == 200
    return [s["state"] for s in slots]


def test_short_request_overtakes_a_long_prefill_and_health_answers(srv):
    finished = []

    def long_request():
        status, body = post(srv, "/completion", {"prompt": LONG, "n_predict": 2, "cache_prompt": False})
        finished.append("long")
        return status, body

    t = threading.Thread(target=long_request)
    t.start()
    deadline = time.monotonic() + 30
    while "prefill" not in slot_states(srv):
        assert time.monotonic() < deadline and t.is_alive(), "the long prompt never showed in prefill"
        time.sleep(0.002)
    # /health is instant while steps compute (the loop thread does no model math)
    saw_step = False
    for _ in range(200):
        t0 = time.monotonic()
        status, h = srv.json("GET", "/health?detail=1")
        assert status == 200 and time.monotonic() - t0 < 1.0
        saw_step = h["step_in_flight"]
        if saw_step:
            break
    assert saw_step, "no /health answered while a step was computing"
    status, body = post(srv, "/completion", greedy("Amen", n_predict=2, cache_prompt=False))
    finished.append("short")
    assert status == 200 and body["tokens_predicted"] == 2
    t.join(60)
    assert finished == ["short", "long"]


def test_disconnect_frees_cells(srv):
    before = metrics(srv)
    s = srv.socket(timeout=30)
    body = json.dumps({"prompt": PROMPT, "n_predict": 500, "stream": True, "cache_prompt": False,
                       "ignore_eos": True})
    s.sendall(("POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Content-Length: %d\r\n\r\n%s" % (len(body), body)).encode())
    got = b""
    while got.count(b"data: ") < 2:
        chunk = s.recv(4096)
        assert chunk
        got += chunk
    # events are produced while the request still runs: the sequence is live right now
    assert "generate" in slot_states(srv)
    s.close()
    # the request ends either by the cancel callback (disconnect seen on read) or because a send
    # failed (seen on write): both count as 499 and free the cells within a step
    gone = 'uvlm_requests_by_status_total{status="499"}'
    deadline = time.monotonic() + 20
    while True:
        m = metrics(srv)
        if m.get(gone, 0) > before.get(gone, 0) and m["uvlm_kv_cells_used"] == before["uvlm_kv_cells_used"] \
                and m["uvlm_active_requests"] == 0:
            break
        assert time.monotonic() < deadline, m
        time.sleep(0.02)
    assert m["uvlm_generated_tokens_total"] - before["uvlm_generated_tokens_total"] < 500
    assert slot_states(srv) == []


def test_tiny_kv_forces_preemption_with_identical_outputs():
    srv = start("--kv-tokens", "64", "--batch-tokens", "24")
    try:
        reqs = [greedy(p, n_predict=24, cache_prompt=False, ignore_eos=True) for p in PROMPTS[:4]]
        alone = [post(srv, "/completion", r)[1]["content"] for r in reqs]
        assert metrics(srv)["uvlm_preemptions_total"] == 0
        together = run_concurrently([lambda r=r: post(srv, "/completion", r) for r in reqs])
        assert [s for s, _ in together] == [200] * 4, together
        assert metrics(srv)["uvlm_preemptions_total"] > 0
        assert [b["content"] for _, b in together] == alone
    finally:
        srv.check_clean_exit()


def test_full_queue_is_503_with_retry_after():
    srv = start("--kv-tokens", "48", "--max-queue", "1", "--batch-tokens", "24")
    try:
        a = srv.socket(timeout=30)
        body = json.dumps({"prompt": PROMPT, "n_predict": 40, "stream": True, "cache_prompt": False,
                           "ignore_eos": True})
        a.sendall(("POST /completion HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)).encode())
        got = b""
        while got.count(b"data: ") < 20:  # A now holds more than 18 of the 48 cells
            chunk = a.recv(4096)
            assert chunk
            got += chunk
        # B's 31-token prompt cannot fit until A ends: it waits in the queue (of 1)
        waiting = threading.Thread(target=post, args=(srv, "/completion", greedy("And God said " * 10, n_predict=1)))
        waiting.start()
        deadline = time.monotonic() + 10
        while "queued" not in slot_states(srv):
            assert time.monotonic() < deadline
            time.sleep(0.002)
        status, headers, data = srv.request("POST", "/completion", json.dumps(greedy(n_predict=1)))
        assert status == 503, data
        assert headers["retry-after"] == "1"
        a.close()
        waiting.join(30)
        status, _ = post(srv, "/completion", greedy(n_predict=1))  # the queue drained
        assert status == 200
    finally:
        srv.check_clean_exit()
