"""Serving Gemma 3 (../shared/models/gemma3-q8_0.gguf: sliding window of 32 on five of its six
layers, Gemma 4's vocabulary and chat template): chat completions through its template, and
concurrent greedy requests, n choices, preemption and the prompt cache each giving what the
request gives alone, over prompts and generations far longer than the window.

Steps stay under 32 tokens (--batch-tokens 24), as in test_serving_engine.py: below that every
row is computed alone, so "together == alone" checks the scheduler and the memory, not the
rounding of the matmuls."""
import pytest

from conftest import Server
from serving_helpers import greedy, metrics, post, run_concurrently, shared_model, wait_ready

MODEL = "gemma3-q8_0.gguf"
# prompts of 40-90 tokens: past the window of 32
PROMPTS = ["The quick brown fox jumps over the lazy dog while the farmer watches from the hill " * k
           for k in (2, 3, 4, 5)]
PROMPTS = [p + str(i) for i, p in enumerate(PROMPTS)]


def serve(*args):
    return wait_ready(Server(["-m", shared_model(MODEL), "--batch-tokens", "24", *args]))


@pytest.fixture(scope="module")
def srv():
    s = serve("--kv-tokens", "2048")
    yield s
    s.check_clean_exit()


def rendered_tokens(srv, text):
    status, body = post(srv, "/tokenize", {"content": text, "add_special": True, "parse_special": True})
    assert status == 200
    return len(body["tokens"])


def chat_and_raw(srv):
    """A chat completion, its prompt's token count, and the completion of the prompt Gemma 4's
    template makes of it (what jinja2 renders of the file's template with enable_thinking, as the
    server runs templates, without the BOS the tokenizer adds)."""
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    status, chat = post(srv, "/v1/chat/completions", {"messages": messages, "max_tokens": 6, "temperature": 0})
    assert status == 200, chat
    prompt = "<|turn>system\n<|think|>Be brief.<turn|>\n<|turn>user\nHi there<turn|>\n<|turn>model\n"
    status, raw = post(srv, "/completion", greedy(prompt, n_predict=6, cache_prompt=False))
    assert status == 200
    return chat, rendered_tokens(srv, prompt), raw


def test_chat_completion_goes_through_the_models_template(srv):
    # the file's own template, run as Jinja
    status, props = srv.json("GET", "/props")
    assert status == 200 and props["chat_template_kind"] == "jinja"
    chat, n_prompt, raw = chat_and_raw(srv)
    assert chat["usage"]["prompt_tokens"] == n_prompt
    assert chat["choices"][0]["message"]["content"] == raw["content"]


def test_native_gemma4_family_makes_the_same_prompt():
    srv = serve("--kv-tokens", "512", "--chat-template", "gemma4")
    try:
        status, props = srv.json("GET", "/props")
        assert status == 200 and props["chat_template_kind"] == "gemma4"
        chat, n_prompt, raw = chat_and_raw(srv)
        assert chat["usage"]["prompt_tokens"] == n_prompt
        assert chat["choices"][0]["message"]["content"] == raw["content"]
    finally:
        srv.check_clean_exit()


def test_concurrent_and_n_choices_equal_alone(srv):
    reqs = [greedy(p, n_predict=40, cache_prompt=False, ignore_eos=True) for p in PROMPTS]
    alone = [post(srv, "/completion", r)[1]["content"] for r in reqs]
    together = run_concurrently([lambda r=r: post(srv, "/completion", r)[1]["content"] for r in reqs])
    assert together == alone and len(set(alone)) == len(alone)
    status, body = post(srv, "/completion", dict(reqs[1], n=3))
    assert status == 200 and [c["content"] for c in body] == [alone[1]] * 3


def test_prompt_cache_reuses_what_the_window_still_holds(srv):
    # prompts as token ids, so that a follow-up's prefix is exactly what the cached sequence holds
    _, tok = post(srv, "/tokenize", {"content": PROMPTS[2], "add_special": True})
    prompt = tok["tokens"]
    req = greedy(prompt, n_predict=40, ignore_eos=True, n_probs=1)
    _, first = post(srv, "/completion", req)
    generated = [p["id"] for p in first["completion_probabilities"]]
    assert len(generated) == 40
    # a cached sequence whose whole content (prompt and 39 replies fed back) the new prompt
    # extends: reused, though it went 40 tokens past the window
    follow = prompt + generated + prompt[1:9]
    _, cached = post(srv, "/completion", greedy(follow, n_predict=12))
    _, fresh = post(srv, "/completion", greedy(follow, n_predict=12, cache_prompt=False))
    assert cached["tokens_cached"] == len(prompt) + 39 and fresh["tokens_cached"] == 0
    assert cached["content"] == fresh["content"]
    # a prefix ending 40 tokens before the cached sequence's end: its windowed layers no longer
    # hold what that prefix's next token needs, so it is recomputed (the same text; at most the
    # BOS comes from an earlier, shorter entry)
    _, again = post(srv, "/completion", dict(req, n_probs=0))
    assert again["tokens_cached"] <= 1 and again["content"] == first["content"]
    # a cached sequence that ended where its prompt did (kept beside the longer one, which cannot
    # serve it) gives the same prompt all but its last token
    post(srv, "/completion", greedy(prompt, n_predict=1))
    _, exact = post(srv, "/completion", greedy(prompt, n_predict=40, ignore_eos=True))
    assert exact["tokens_cached"] == len(prompt) - 1 and exact["content"] == first["content"]


def test_preemption_keeps_outputs():
    # 4 sequences of ~130 tokens each on 256 full-attention cells: some are saved and restored
    srv = serve("--kv-tokens", "256")
    try:
        reqs = [greedy(p, n_predict=48, cache_prompt=False, ignore_eos=True) for p in PROMPTS]
        alone = [post(srv, "/completion", r)[1]["content"] for r in reqs]
        assert metrics(srv)["uvlm_preemptions_total"] == 0
        together = run_concurrently([lambda r=r: post(srv, "/completion", r) for r in reqs])
        assert [s for s, _ in together] == [200] * 4, together
        assert metrics(srv)["uvlm_preemptions_total"] > 0
        assert [b["content"] for _, b in together] == alone
    finally:
        srv.check_clean_exit()
