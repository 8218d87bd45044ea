"""llama.cpp server parity on the default model (kjv-tiny): the native response's fields
(tokens, id_slot, generation_settings, response_fields, post_sampling_probs, text logit_bias),
batches of prompts, echo with the prompt's logprobs, the logprobs shapes of /v1/completions,
/props, /slots, /v1/health, /detokenize, and the server-wide request defaults and llama-server
flags."""
import json
import subprocess

import pytest

from conftest import BIN
from serving_helpers import PROMPT, greedy, post, sse_events, start, stream


@pytest.fixture(scope="module")
def srv():
    s = start("--max-n", "4", "--max-seq-tokens", "200")
    yield s
    s.check_clean_exit()


def test_native_response_has_the_reference_fields(srv):
    status, body = post(srv, "/completion", greedy(n_predict=6, return_tokens=True))
    assert status == 200, body
    assert body["index"] == 0 and isinstance(body["id_slot"], int) and body["has_new_line"] is False
    assert len(body["tokens"]) == 6 and all(isinstance(t, int) for t in body["tokens"])
    # the ids are the text's: detokenized they give the content
    _, text = post(srv, "/detokenize", {"tokens": body["tokens"]})
    assert text["content"] == body["content"] and body["content"].startswith(" unto him")
    gs = body["generation_settings"]
    assert gs["n_predict"] == 6 and gs["temperature"] == 0 and gs["n_ctx"] == 200 and gs["top_k"] == 40
    assert "And God said" in body["prompt"]
    assert body["timings"]["cache_n"] == body["tokens_cached"]
    _, plain = post(srv, "/completion", greedy(n_predict=6))
    assert plain["tokens"] == [] and plain["content"] == body["content"]


def test_stream_chunks_carry_their_token_ids(srv):
    _, whole = post(srv, "/completion", greedy(n_predict=10, return_tokens=True))
    events = [json.loads(e) for e in stream(srv, "/completion", greedy(n_predict=10))]
    assert all("tokens" in e and e["index"] == 0 for e in events)
    assert [t for e in events for t in e["tokens"]] == whole["tokens"]
    assert events[-1]["stop"] is True and "generation_settings" in events[-1]


def test_response_fields_pick_and_unnest(srv):
    _, ref = post(srv, "/completion", greedy(n_predict=3))
    status, body = post(srv, "/completion", greedy(n_predict=3, response_fields=[
        "content", "generation_settings/n_predict", "timings/predicted_n", "no/such"]))
    assert status == 200, body
    assert body == {"content": ref["content"], "generation_settings/n_predict": 3, "timings/predicted_n": 3}
    status, err = post(srv, "/completion", greedy(response_fields="content"))
    assert status == 400 and err["error"]["param"] == "response_fields"


@pytest.mark.parametrize("bias", [[[" unto", False]], {" unto": False}, [[" unto", -1000]]])
def test_logit_bias_by_text(srv, bias):
    _, ref = post(srv, "/completion", greedy(n_predict=8))
    assert ref["content"].startswith(" unto")
    status, body = post(srv, "/completion", greedy(n_predict=8, logit_bias=bias))
    assert status == 200, body
    assert "unto" not in body["content"]
    # a text's tokens and the same ids by number ban the same
    _, toks = post(srv, "/tokenize", {"content": " unto"})
    status, by_id = post(srv, "/completion", greedy(n_predict=8, logit_bias=[[t, False] for t in toks["tokens"]]))
    assert by_id["content"] == body["content"]


def test_post_sampling_probs(srv):
    status, body = post(srv, "/completion", greedy(n_predict=3, n_probs=3, post_sampling_probs=True))
    assert status == 200, body
    for p in body["completion_probabilities"]:  # greedy: the one token drawn, certain
        assert p["prob"] == 1.0 and [t["id"] for t in p["top_probs"]] == [p["id"]] and "logprob" not in p
    status, body = post(srv, "/completion", {"prompt": PROMPT, "n_predict": 4, "n_probs": 5, "seed": 1,
                                             "temperature": 1.0, "top_k": 3, "post_sampling_probs": True})
    for p in body["completion_probabilities"]:
        probs = [t["prob"] for t in p["top_probs"]]
        assert 1 <= len(probs) <= 3 and abs(sum(probs) - 1) < 1e-3  # what top_k 3 kept, renormalized
        assert probs == sorted(probs, reverse=True) and p["id"] in [t["id"] for t in p["top_probs"]]
    # without it: log-probabilities over the whole vocabulary
    _, body = post(srv, "/completion", {"prompt": PROMPT, "n_predict": 2, "n_probs": 5, "seed": 1,
                                        "temperature": 1.0, "top_k": 3})
    tops = body["completion_probabilities"][0]["top_logprobs"]
    assert len(tops) == 5 and all(t["logprob"] <= 0 for t in tops)


def test_batch_of_prompts_native(srv):
    prompts = [PROMPT, "In the beginning", [1, 400, 500]]
    singles = [post(srv, "/completion", greedy(prompt=p, n_predict=5))[1]["content"] for p in prompts]
    status, body = post(srv, "/completion", greedy(prompt=prompts, n_predict=5))
    assert status == 200, body
    assert isinstance(body, list) and [b["index"] for b in body] == [0, 1, 2]
    assert [b["content"] for b in body] == singles
    status, body = post(srv, "/completion", greedy(prompt=prompts[:2], n_predict=5, n=2))
    assert [b["index"] for b in body] == [0, 1, 2, 3]
    assert [b["content"] for b in body] == [singles[0], singles[0], singles[1], singles[1]]
    status, err = post(srv, "/completion", greedy(prompt=[PROMPT, 5]))
    assert status == 400 and err["error"]["param"] == "prompt[1]"
    status, err = post(srv, "/completion", greedy(prompt=[PROMPT, [1, 10 ** 8]]))
    assert status == 400 and err["error"]["param"] == "prompt[1][1]"


def test_batch_of_prompts_streams_interleaved(srv):
    prompts = [PROMPT, "In the beginning", "The LORD is my shepherd"]
    _, whole = post(srv, "/completion", greedy(prompt=prompts, n_predict=8))
    events = [json.loads(e) for e in stream(srv, "/completion", greedy(prompt=prompts, n_predict=8))]
    texts = {}
    for e in events:
        texts[e["index"]] = texts.get(e["index"], "") + e["content"]
    assert texts == {b["index"]: b["content"] for b in whole}
    assert sum(e["stop"] for e in events) == 3
    # /v1/completions too: choices by index, the stream ends once, usage counts each prompt
    status, body = post(srv, "/v1/completions", {"prompt": prompts, "max_tokens": 8, "temperature": 0})
    assert status == 200 and [c["text"] for c in body["choices"]] == [b["content"] for b in whole]
    assert body["usage"]["prompt_tokens"] == sum(b["tokens_evaluated"] for b in whole)
    events = stream(srv, "/v1/completions", {"prompt": prompts, "max_tokens": 8, "temperature": 0})
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1
    chunks = [json.loads(e)["choices"][0] for e in events[:-1]]
    assert sorted(set(c["index"] for c in chunks)) == [0, 1, 2]
    assert sum(1 for c in chunks if c["finish_reason"]) == 3


def test_v1_completions_logprobs_shapes(srv):
    status, body = post(srv, "/v1/completions", {"prompt": PROMPT, "max_tokens": 3, "temperature": 0, "logprobs": 2})
    lp = body["choices"][0]["logprobs"]
    assert set(lp) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
    assert "".join(lp["tokens"]) == body["choices"][0]["text"] and len(lp["top_logprobs"][0]) == 2
    status, body = post(srv, "/v1/completions", {"prompt": PROMPT, "max_tokens": 3, "temperature": 0, "n_probs": 2})
    content = body["choices"][0]["logprobs"]["content"]
    assert len(content) == 3 and [c["logprob"] for c in content] == pytest.approx(lp["token_logprobs"], abs=1e-5)
    assert all(len(c["top_logprobs"]) == 2 and "id" in c for c in content)


def test_echo_gives_the_prompt_and_its_logprobs(srv):
    _, ref = post(srv, "/v1/completions", {"prompt": PROMPT, "max_tokens": 3, "temperature": 0})
    status, body = post(srv, "/v1/completions", {"prompt": PROMPT, "max_tokens": 3, "temperature": 0, "echo": True})
    assert status == 200 and body["choices"][0]["text"] == PROMPT + ref["choices"][0]["text"]
    # the likelihood of a continuation, as evaluation harnesses ask for it
    _, gen = post(srv, "/completion", greedy(n_predict=1, n_probs=1))
    first = gen["completion_probabilities"][0]  # " unto" after the prompt
    status, body = post(srv, "/v1/completions", {"prompt": PROMPT + first["token"], "max_tokens": 0,
                                                 "echo": True, "logprobs": 1, "temperature": 0})
    assert status == 200, body
    choice = body["choices"][0]
    lp = choice["logprobs"]
    n_prompt = body["usage"]["prompt_tokens"]
    assert choice["text"] == PROMPT + first["token"] and len(lp["tokens"]) == n_prompt
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(x <= 0 for x in lp["token_logprobs"][1:])
    assert lp["token_logprobs"][-1] == pytest.approx(first["logprob"], abs=2e-3)
    assert lp["top_logprobs"][-1] == {first["token"]: pytest.approx(first["logprob"], abs=2e-3)}
    # streamed: the first chunk of the choice holds the prompt and its logprobs
    events = stream(srv, "/v1/completions", {"prompt": PROMPT + first["token"], "max_tokens": 2, "echo": True,
                                             "logprobs": 1, "temperature": 0})
    head = json.loads(events[0])["choices"][0]
    assert head["text"] == PROMPT + first["token"]
    assert head["logprobs"]["token_logprobs"][1:] == pytest.approx(lp["token_logprobs"][1:], abs=1e-5)


def test_props_in_the_reference_shape(srv):
    status, props = srv.json("GET", "/props")
    assert status == 200
    assert props["total_slots"] == 4096 // 200  # sequences at full context in the KV budget
    dgs = props["default_generation_settings"]
    assert dgs["n_ctx"] == 200 and dgs["params"]["temperature"] == pytest.approx(0.8)
    assert dgs["params"]["seed"] == 4294967295 and dgs["params"]["n_predict"] == -1
    assert props["bos_token"] == "<s>" and props["eos_token"] == "</s>"
    assert props["modalities"] == {"vision": False, "audio": False}
    assert props["build_info"].startswith("uvlm") and props["chat_template_kind"] in ("jinja", "chatml")
    assert isinstance(props["chat_template"], str)


def test_slots_show_a_live_sequence(srv):
    c = srv.conn(60)
    try:
        c.request("POST", "/completion", json.dumps(dict(greedy(n_predict=150, ignore_eos=True), stream=True)))
        r = c.getresponse()
        events = sse_events(r)
        next(events)
        status, slots = srv.json("GET", "/slots")
        assert status == 200
        live = [s for s in slots if s.get("params", {}).get("n_predict") == 150]
        assert len(live) == 1, slots
        s = live[0]
        assert s["is_processing"] is True and s["n_ctx"] == 200 and s["id"] >= 0 and s["id_task"] >= 1
        assert s["next_token"]["n_decoded"] >= 1 and s["next_token"]["n_remain"] == 150 - s["n_decoded"]
        assert s["state"] == "generate" and s["n_prompt_tokens_processed"] == s["n_prompt_tokens"]
        for _ in events:
            pass
    finally:
        c.close()


def test_health_alias_head_and_detokenize(srv):
    assert srv.json("GET", "/v1/health") == (200, {"status": "ok"})
    for path in ("/v1/health", "/props", "/slots", "/v1/models"):
        status, _, data = srv.request("HEAD", path)
        assert status == 200 and data == b"", path
    _, toks = post(srv, "/tokenize", {"content": PROMPT})
    _, text = post(srv, "/detokenize", {"tokens": toks["tokens"]})
    assert text["content"] == " " + PROMPT  # the first piece keeps its space, as the reference's


def test_context_error_reports_the_context(srv):
    status, err = post(srv, "/completion", {"prompt": "And " * 300})
    assert status == 400 and err["error"]["n_ctx"] == 200 < err["error"]["n_prompt_tokens"]


def test_server_wide_request_defaults(start_server):
    srv = start_server("--temp", "0", "--n-predict", "5", "--seed", "7", "--top-k", "1", "--top-p", "0.5",
                       "-c", "128", "-np", "3")
    status, body = post(srv, "/completion", {"prompt": PROMPT})
    assert status == 200, body
    _, ref = post(srv, "/completion", greedy(n_predict=5, top_k=40, top_p=1.0))
    assert body["tokens_predicted"] == 5 and body["content"] == ref["content"]
    gs = body["generation_settings"]
    assert (gs["temperature"], gs["top_k"], gs["top_p"], gs["seed"], gs["n_ctx"]) == (0, 1, 0.5, 7, 128)
    # a request's own values win
    status, body = post(srv, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2})
    assert body["usage"]["completion_tokens"] == 2
    _, props = srv.json("GET", "/props")
    assert props["total_slots"] == 3 and props["n_ctx"] == 128
    p = props["default_generation_settings"]["params"]
    assert (p["temperature"], p["n_predict"], p["seed"], p["top_k"]) == (0, 5, 7, 1)


def run_bin(*args):
    return subprocess.run([BIN] + list(args), capture_output=True, text=True, timeout=10)


@pytest.mark.parametrize("args,words", [
    (["-ngl", "99"], ["-ngl", "llama-server", "GPU"]),
    (["--n-gpu-layers", "99"], ["--n-gpu-layers", "GPU"]),
    (["-fa", "on"], ["-fa", "not needed"]),
    (["--mlock"], ["--mlock", "not supported"]),
    (["-b", "2048"], ["-b", "--batch-tokens"]),
    (["--ctx-size", "100", "--max-seq-tokens", "50"], ["ctx-size", "max-seq-tokens"]),
    (["--temp", "hot"], ["temp"]),
    (["--top-p", "2"], ["top-p", "range"]),
    (["-xyz"], ["unknown flag '-xyz'"]),
])
def test_llama_server_flags_fail_with_the_reason(args, words):
    p = run_bin(*args)
    assert p.returncode == 2, p.stderr
    for w in words:
        assert w in p.stderr, p.stderr
