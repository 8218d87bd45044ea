"""Serving a hybrid model (../shared/models/qwen35-q8_0.gguf: three gated delta-net layers with a
recurrent state per sequence, one gated attention layer with KV cells, in one split memory):
concurrent greedy requests, n choices, the prompt cache (exact, whole-prefix and shared-prefix
reuse), preemption and taking turns on fewer
recurrent states (--max-seqs-recurrent) each give what the request gives alone, a disconnect frees
both halves of the memory, and Qwen3.5's chat template (../shared/chat) serves it through /v1/chat/completions.

Steps stay under 32 tokens (--batch-tokens 24), as in test_serving_engine.py: below that every
row is computed alone, so "together == alone" checks the scheduler and the memory, not the
rounding of the matmuls."""
import json
import os
import threading
import time

import pytest

from conftest import Server, shared_file
from serving_helpers import greedy, metrics, post, run_concurrently, shared_model, stream, wait_ready

MODEL = "qwen35-q8_0.gguf"
PROMPTS = ["The quick brown fox jumps over the lazy dog " * k + str(k) for k in (1, 2, 3, 4, 5, 6)]


def serve(*args):
    return wait_ready(Server(["-m", shared_model(MODEL), "--batch-tokens", "24", *args]))


@pytest.fixture(scope="module")
def srv():
    s = serve("--kv-tokens", "2048")
    yield s
    s.check_clean_exit()


def test_props_and_memory(srv):
    status, props = srv.json("GET", "/props")
    assert status == 200 and props["model"] == MODEL
    assert metrics(srv)["uvlm_kv_cells_capacity"] == 2048  # the attention layer's cells are counted


def test_six_concurrent_and_n_choices_equal_alone(srv):
    reqs = [greedy(p, n_predict=24, cache_prompt=False, ignore_eos=True) for p in PROMPTS]
    alone = [post(srv, "/completion", r)[1]["content"] for r in reqs]
    together = run_concurrently([lambda r=r: post(srv, "/completion", r)[1]["content"] for r in reqs])
    assert together == alone and len(set(alone)) > 1
    status, body = post(srv, "/completion", dict(reqs[2], n=3))
    assert status == 200 and [c["content"] for c in body] == [alone[2]] * 3


def test_prompt_cache_exact_and_whole_prefix(srv):
    _, tok = post(srv, "/tokenize", {"content": PROMPTS[1], "add_special": True})
    prompt = tok["tokens"]
    req = greedy(prompt, n_predict=8, ignore_eos=True, n_probs=1)
    _, fresh = post(srv, "/completion", dict(req, cache_prompt=False))
    _, first = post(srv, "/completion", req)
    _, again = post(srv, "/completion", req)
    assert first["content"] == fresh["content"] == again["content"]
    # the state before the prompt's last token is kept: the same prompt again runs one token
    assert again["tokens_cached"] == len(prompt) - 1
    # a cached sequence whose whole content the new prompt extends is reused
    generated = [p["id"] for p in first["completion_probabilities"]]
    follow = prompt + generated[:7] + prompt[1:6]
    _, cached = post(srv, "/completion", greedy(follow, n_predict=8, ignore_eos=True))
    _, alone = post(srv, "/completion", greedy(follow, n_predict=8, ignore_eos=True, cache_prompt=False))
    assert cached["tokens_cached"] >= len(prompt) and alone["tokens_cached"] == 0
    assert cached["content"] == alone["content"]


def test_prompt_cache_restarts_a_shared_prefix_from_a_chunk_end(srv):
    # a recurrent state cannot be cut back, so a cached prompt keeps copies of it at its first
    # chunk ends (24 tokens each here): a longer prompt sharing only the first 70 tokens restarts
    # from the copy at 48, with the output a cold run gives
    def tokens(text):
        _, tok = post(srv, "/tokenize", {"content": text, "add_special": False})
        return tok["tokens"]
    first = tokens("In the beginning God created the heaven and the earth. " * 10)[:100]
    second = first[:70] + tokens(" Then a quite different story begins, about ships and the sea." * 4)
    assert len(first) == 100 and len(second) > 100
    _, a = post(srv, "/completion", greedy(first, n_predict=8, ignore_eos=True))
    _, b = post(srv, "/completion", greedy(second, n_predict=8, ignore_eos=True))
    _, cold = post(srv, "/completion", greedy(second, n_predict=8, ignore_eos=True, cache_prompt=False))
    assert a["tokens_cached"] == 0 and cold["tokens_cached"] == 0
    assert 0 < b["tokens_cached"] <= 70 and b["timings"]["cache_n"] == b["tokens_cached"]
    assert b["content"] == cold["content"]

def test_preemption_keeps_outputs():
    # 6 sequences of ~60-90 tokens each on 256 cells: some are saved (cells and states) and restored
    srv = serve("--kv-tokens", "256")
    try:
        reqs = [greedy(p, n_predict=40, cache_prompt=False, ignore_eos=True) for p in PROMPTS]
        alone = [post(srv, "/completion", r)[1]["content"] for r in reqs]
        assert metrics(srv)["uvlm_preemptions_total"] == 0
        together = run_concurrently([lambda r=r: post(srv, "/completion", r) for r in reqs])
        assert [s for s, _ in together] == [200] * len(reqs), together
        assert metrics(srv)["uvlm_preemptions_total"] > 0
        assert [b["content"] for _, b in together] == alone
        m = metrics(srv)
        assert m["uvlm_preempted_sequences"] == 0 and m["uvlm_kv_cells_used"] == 0
    finally:
        srv.check_clean_exit()


def test_more_requests_than_states_take_turns():
    # 2 recurrent states for 6 concurrent generations (cells to spare): the waiting requests do not
    # wait for whole generations to end; running sequences are saved (cells and state) and resumed
    # in turn, and every output is the one the request gives alone
    srv = serve("--kv-tokens", "2048", "--max-seqs-recurrent", "2")
    try:
        m = metrics(srv)
        assert m["uvlm_recurrent_states_capacity"] == 2 and m["uvlm_kv_cells_capacity"] == 2048
        assert "2048 cells and 2 recurrent states" in srv.log()
        reqs = [greedy(p, n_predict=40, cache_prompt=False, ignore_eos=True) for p in PROMPTS]
        alone = [post(srv, "/completion", r)[1]["content"] for r in reqs]
        assert metrics(srv)["uvlm_preemptions_total"] == 0
        together = run_concurrently([lambda r=r: post(srv, "/completion", r) for r in reqs])
        assert [s for s, _ in together] == [200] * len(reqs), together
        assert [b["content"] for _, b in together] == alone and len(set(alone)) > 1
        m = metrics(srv)
        assert m["uvlm_preemptions_total"] > 0
        assert m["uvlm_preempted_sequences"] == 0 and m["uvlm_kv_cells_used"] == 0
        assert m["uvlm_recurrent_states_used"] == 0
        # with the prompt cache on, states also hold cache entries (evicted for waiting work)
        cached = run_concurrently([lambda r=r: post(srv, "/completion", dict(r, cache_prompt=True))[1]
                                   for r in reqs])
        assert [b["content"] for b in cached] == alone
        m2 = metrics(srv)
        assert m2["uvlm_preemptions_total"] > m["uvlm_preemptions_total"]
        assert 0 < m2["uvlm_recurrent_states_used"] <= 2 and m2["uvlm_recurrent_states_live"] == 0
    finally:
        srv.check_clean_exit()

def open_stream(srv, body):
    """A streaming /completion on a raw socket, read until it has sent two events."""
    s = srv.socket(timeout=30)
    data = json.dumps(dict(body, stream=True))
    s.sendall(("POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Content-Length: %d\r\n\r\n%s" % (len(data), data)).encode())
    got = b""
    while got.count(b"data: ") < 2:
        chunk = s.recv(4096)
        assert chunk
        got += chunk
    return s


def test_disconnects_free_cells_and_states():
    # 3 states for 6 streams: the ones cut mid-stream are running, waiting for a turn or saved to
    # the host; each disconnect frees its cells and its state, whatever it was doing, and what
    # stays is the prompt cache's alone
    srv = serve("--kv-tokens", "2048", "--max-seqs-recurrent", "3")
    try:
        solo_req = greedy(PROMPTS[5], n_predict=16, ignore_eos=True)
        _, solo = post(srv, "/completion", dict(solo_req, cache_prompt=False))
        before = metrics(srv)
        long_req = [greedy(p, n_predict=2000, ignore_eos=True) for p in PROMPTS[:4]]
        short_req = [greedy(p, n_predict=30, ignore_eos=True) for p in PROMPTS[4:]]
        done = [None] * len(short_req)

        def finish(i):
            done[i] = stream(srv, "/completion", short_req[i])

        socks = [open_stream(srv, r) for r in long_req[:2]]  # live, holding states
        threads = [threading.Thread(target=finish, args=(i,)) for i in range(len(short_req))]
        for t in threads:
            t.start()
        socks += [open_stream(srv, r) for r in long_req[2:]]  # they wait for turns: some are saved
        m = metrics(srv)
        assert m["uvlm_recurrent_states_live"] <= 3 and m["uvlm_kv_cells_live"] > 0
        for s in socks:
            s.close()
        for t in threads:
            t.join(120)
        ends = [json.loads(d[-1]) for d in done]
        assert all(e["stop"] and e["tokens_predicted"] == 30 for e in ends), ends
        gone = 'uvlm_requests_by_status_total{status="499"}'
        deadline = time.monotonic() + 20
        while True:
            m = metrics(srv)
            if m.get(gone, 0) - before.get(gone, 0) == len(socks) and m["uvlm_active_requests"] == 0:
                break
            assert time.monotonic() < deadline, m
            time.sleep(0.02)
        assert m["uvlm_preemptions_total"] > before["uvlm_preemptions_total"]
        assert m["uvlm_generated_tokens_total"] - before["uvlm_generated_tokens_total"] < 4 * 2000
        assert m["uvlm_preempted_sequences"] == 0 and m["uvlm_active_sequences"] == 0
        assert m["uvlm_kv_cells_live"] == 0 and m["uvlm_kv_cells_used"] == m["uvlm_kv_cells_cached"]
        assert m["uvlm_recurrent_states_live"] == 0
        assert m["uvlm_recurrent_states_used"] == m["uvlm_cached_sequences"] <= 3
        # the memory is whole: the next request gives what it gave alone, from the cache or not
        _, after = post(srv, "/completion", solo_req)
        assert after["content"] == solo["content"]
    finally:
        srv.check_clean_exit()

def qwen35_template():
    with open(shared_file("chat", "tools.jsonl")) as f:
        for line in f:
            t = json.loads(line)
            if t["name"] == "Qwen3.5-4B.jinja":
                return t
    pytest.fail("Qwen3.5-4B.jinja is missing from ../shared/chat/tools.jsonl")


def test_chat_completion_through_the_qwen35_template(tmp_path):
    t = qwen35_template()
    conv = [c for c in t["conversations"] if not c.get("tools")][0]
    path = os.path.join(str(tmp_path), "qwen35.jinja")
    with open(path, "w") as f:
        f.write(t["template"])
    srv = serve("--kv-tokens", "1024", "--chat-template-file", path)
    try:
        status, chat = post(srv, "/v1/chat/completions",
                            {"messages": conv["messages"], "max_tokens": 6, "temperature": 0})
        assert status == 200, chat
        status, tok = post(srv, "/tokenize", {"content": conv["expected"], "add_special": True,
                                              "parse_special": True})
        assert status == 200
        assert chat["usage"]["prompt_tokens"] == len(tok["tokens"])
        _, raw = post(srv, "/completion", greedy(tok["tokens"], n_predict=6, cache_prompt=False))
        # the template opens the reasoning block in the prompt: the text is the model's reasoning
        # (reasoning_content, its surrounding whitespace trimmed)
        msg = chat["choices"][0]["message"]
        assert (msg.get("reasoning_content") or "") + (msg["content"] or "") == raw["content"].strip()
    finally:
        srv.check_clean_exit()
