"""Serving endpoints on the default model (kjv-tiny): native and OpenAI shapes, streaming,
n choices, stop strings, info endpoints, bad input. One server for the module (fast under ASan)."""
import json

import pytest

from serving_helpers import PROMPT, greedy, metrics, post, start, stream


@pytest.fixture(scope="module")
def srv():
    s = start("--max-n", "4", "--max-seq-tokens", "200")
    yield s
    s.check_clean_exit()


def test_default_model_writes_the_reference_text(srv):
    status, body = post(srv, "/completion", greedy(n_predict=8))
    assert status == 200, body
    # the reference's greedy continuation of "And God said" (../shared/README.md)
    assert body["content"] == " unto him, Thou shalt not"
    assert body["stop"] is True and body["stop_type"] == "limit"
    assert body["tokens_predicted"] == 8 and body["tokens_evaluated"] == 4
    t = body["timings"]
    assert t["predicted_n"] == 8 and t["predicted_ms"] > 0 and t["prompt_per_second"] > 0


def test_greedy_streaming_equals_non_streaming(srv):
    _, whole = post(srv, "/completion", greedy(n_predict=16, cache_prompt=False))
    events = [json.loads(e) for e in stream(srv, "/completion", greedy(n_predict=16, cache_prompt=False))]
    assert len(events) >= 2 and all(e["stop"] is False for e in events[:-1])
    assert events[-1]["stop"] is True and events[-1]["stop_type"] == "limit"
    assert "".join(e["content"] for e in events) == whole["content"]
    assert events[-1]["tokens_predicted"] == 16


def test_stop_string_cuts_the_text_and_never_streams(srv):
    _, ref = post(srv, "/completion", greedy(n_predict=16))
    word = "Thou"
    assert word in ref["content"]
    _, body = post(srv, "/completion", greedy(n_predict=16, stop=[word, "zzz"]))
    assert body["stop_type"] == "word" and body["stopping_word"] == word
    assert body["content"] == ref["content"][: ref["content"].index(word)]
    events = [json.loads(e) for e in stream(srv, "/completion", greedy(n_predict=16, stop=word))]
    assert "".join(e["content"] for e in events) == body["content"]
    assert events[-1]["stop_type"] == "word"


def test_n_choices_evaluate_the_prompt_once(srv):
    prompt = "In the beginning God created the heaven and the earth, and the earth was"
    before = metrics(srv)
    status, body = post(srv, "/completion", {"prompt": prompt, "n_predict": 4, "n": 4, "seed": 3,
                                             "temperature": 1.0, "cache_prompt": False})
    assert status == 200, body
    after = metrics(srv)
    assert isinstance(body, list) and sorted(c["index"] for c in body) == [0, 1, 2, 3]
    n_prompt = body[0]["tokens_evaluated"]
    assert all(c["tokens_predicted"] == 4 for c in body)
    # four choices, one prompt evaluation
    assert after["uvlm_prompt_tokens_total"] - before["uvlm_prompt_tokens_total"] == n_prompt
    # seeds seed, seed+1, ...: the same request again gives the same four texts
    _, again = post(srv, "/completion", {"prompt": prompt, "n_predict": 4, "n": 4, "seed": 3,
                                         "temperature": 1.0, "cache_prompt": False})
    assert [c["content"] for c in again] == [c["content"] for c in body]


def test_oai_completion_shape_and_n(srv):
    status, body = post(srv, "/v1/completions", {"prompt": PROMPT, "max_tokens": 5, "n": 2, "temperature": 0})
    assert status == 200, body
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-")
    assert [c["index"] for c in body["choices"]] == [0, 1]
    assert all(c["finish_reason"] == "length" for c in body["choices"])
    assert body["choices"][0]["text"] == body["choices"][1]["text"] == " unto him, Thou"
    assert body["usage"]["completion_tokens"] == 10 and body["usage"]["prompt_tokens"] == 4


def test_oai_chat_stream_ends_with_done_and_usage(srv):
    req = {"messages": [{"role": "user", "content": "Who made the earth?"}], "max_tokens": 6,
           "temperature": 0, "stream_options": {"include_usage": True}}
    events = stream(srv, "/v1/chat/completions", req)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"].get("role") == "assistant"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6
    finish = [c["choices"][0]["finish_reason"] for c in chunks[:-1] if c["choices"][0]["finish_reason"]]
    assert finish == ["length"]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks[:-1])
    status, whole = post(srv, "/v1/chat/completions", dict(req, stream=False))
    assert status == 200 and whole["choices"][0]["message"]["content"] == text


def test_logprobs(srv):
    status, body = post(srv, "/completion", greedy(n_predict=3, n_probs=2))
    assert status == 200
    probs = body["completion_probabilities"]
    assert len(probs) == 3
    for p in probs:
        assert len(p["top_logprobs"]) == 2 and p["logprob"] <= 0
        assert p["id"] == p["top_logprobs"][0]["id"]  # greedy picks the most probable


def test_info_endpoints(srv):
    status, body = srv.json("GET", "/v1/models")
    assert status == 200 and body["data"][0]["id"] == "kjv-tiny-q8_0.gguf"
    status, props = srv.json("GET", "/props")
    assert status == 200 and props["n_ctx"] == 200 and props["kv_tokens"] == 4096
    status, toks = post(srv, "/tokenize", {"content": PROMPT, "with_pieces": True})
    assert status == 200 and [t["piece"] for t in toks["tokens"]] == [" And", " God", " said"]
    status, text = post(srv, "/detokenize", {"tokens": [t["id"] for t in toks["tokens"]]})
    assert status == 200 and text["content"].strip() == PROMPT
    status, tmpl = post(srv, "/apply-template", {"messages": [{"role": "user", "content": "hi"}]})
    assert status == 200 and tmpl["prompt"] == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    status, slots = srv.json("GET", "/slots")
    assert status == 200 and isinstance(slots, list)
    status, health = srv.json("GET", "/health?detail=1")
    assert status == 200 and health["status"] == "ok"
    assert health["kv_cells_total"] == 4096 and 0 <= health["kv_cells_free"] <= 4096
    assert {"queue", "active_sequences", "tokens_per_second"} <= set(health)
    m = metrics(srv)
    for name in ("uvlm_requests_total", "uvlm_generated_tokens_total", "uvlm_kv_cells_capacity",
                 "uvlm_queue_length", "uvlm_preemptions_total", "uvlm_active_sequences",
                 'uvlm_step_seconds_bucket{le="+Inf"}', "uvlm_decode_seconds_total"):
        assert name in m, name


@pytest.mark.parametrize("path,body,param", [
    ("/completion", {"prompt": PROMPT, "n_predict": "many"}, "n_predict"),
    ("/completion", {"prompt": PROMPT, "temperature": -1}, "temperature"),
    ("/completion", {"prompt": ""}, "prompt"),
    ("/completion", {"prompt": [1, 99999999]}, "prompt[1]"),
    ("/completion", {"prompt": PROMPT, "n": 5}, "n"),
    ("/v1/chat/completions", {"messages": [{"role": "user"}]}, "messages[0].content"),
])
def test_bad_input_is_400_naming_the_field(srv, path, body, param):
    status, err = post(srv, path, body)
    assert status == 400, err
    assert err["error"]["param"] == param, err


def test_invalid_json_and_long_prompt(srv):
    status, _, data = srv.request("POST", "/completion", "{not json")
    assert status == 400 and json.loads(data)["error"]["code"] == 400
    status, err = post(srv, "/completion", {"prompt": "And " * 300})
    assert status == 400 and err["error"]["type"] == "exceed_context_size_error"
    assert 0 < err["error"]["n_ctx"] <= 200 < err["error"]["n_prompt_tokens"]
    status, _ = post(srv, "/completion", greedy(n_predict=2))  # nothing else is disturbed
    assert status == 200


def test_truncated_when_generation_reaches_the_context(srv):
    # llama.cpp's meaning: prompt + generated reached the context (here --max-seq-tokens 200), so
    # generation stopped there: stop_type "limit" and truncated true; a plain n_predict stop is not
    status, body = post(srv, "/completion", greedy(n_predict=500, ignore_eos=True, cache_prompt=False))
    assert status == 200, body
    assert body["stop_type"] == "limit" and body["truncated"] is True
    assert body["tokens_evaluated"] + body["tokens_predicted"] == 200
    status, body = post(srv, "/completion", greedy(n_predict=8, ignore_eos=True))
    assert body["stop_type"] == "limit" and body["truncated"] is False
    events = [json.loads(e) for e in stream(srv, "/completion", greedy(n_predict=-1, ignore_eos=True))]
    assert all(e["truncated"] is False for e in events[:-1] if "truncated" in e)
    assert events[-1]["stop"] is True and events[-1]["truncated"] is True
    assert events[-1]["stop_type"] == "limit" and events[-1]["tokens_predicted"] == 200 - 4
    status, body = post(srv, "/v1/completions", {"prompt": "And God said", "max_tokens": 500, "ignore_eos": True})
    assert status == 200 and body["choices"][0]["finish_reason"] == "length"


def test_oai_stream_with_n2_interleaves_choices_by_index(srv):
    events = stream(srv, "/v1/completions", {"prompt": PROMPT, "max_tokens": 5, "n": 2, "temperature": 0})
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    texts, finishes = {0: "", 1: ""}, {0: [], 1: []}
    for c in chunks:
        (choice,) = c["choices"]
        texts[choice["index"]] += choice["text"]
        if choice["finish_reason"]:
            finishes[choice["index"]].append(choice["finish_reason"])
    assert texts[0] == texts[1] == " unto him, Thou"
    assert finishes == {0: ["length"], 1: ["length"]}


def test_oai_chat_logprobs(srv):
    status, body = post(srv, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 3, "temperature": 0,
        "logprobs": True, "top_logprobs": 2})
    assert status == 200, body
    content = body["choices"][0]["logprobs"]["content"]
    assert len(content) == 3
    assert all(len(t["top_logprobs"]) == 2 and t["logprob"] <= 0 for t in content)


def test_prompt_cache_reuses_cells(srv):
    prompt = "Now the serpent was more subtil than any beast of the field"
    _, first = post(srv, "/completion", greedy(prompt, n_predict=2))
    _, second = post(srv, "/completion", greedy(prompt + " which the LORD God had made", n_predict=2))
    assert first["tokens_cached"] <= 1  # at most the BOS other prompts started with
    assert second["tokens_cached"] >= first["tokens_evaluated"] - 1
    assert second["timings"]["prompt_n"] == second["tokens_evaluated"] - second["tokens_cached"]
