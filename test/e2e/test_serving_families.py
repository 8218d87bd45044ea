"""The transformer families of the shared models (Llama 3.2 with rope scaling, Qwen3, Phi-3) serve
as the reference computes them: /completion's greedy continuation of the reference's first prompt
has the reference's token ids (the server's 16-row layouts may leave them only right after a
near-tie, as ../shared/README.md allows) and, at each step, the reference's logit differences
among its top tokens (a difference of logprobs is one of logits); /v1/chat/completions renders
the model's own chat template (tokenizer.chat_template, by its detected family)."""
import json

import pytest

from conftest import Server, shared_file
from serving_helpers import post, shared_model, wait_ready

TOL = 0.03  # quantized models' bar (../shared/README.md)

# model, how the server renders its chat template (/props chat_template_kind: "jinja" runs the file's own template,
# a family name formats natively), and the prompt it renders for one user turn
CHATML = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
FAMILIES = [
    ("llama32-rope-q8_0", "chatml", CHATML),  # the file has no template: the server's default
    # the file's template writes a default system turn, as the reference's Jinja engine renders it
    ("qwen3-q8_0", "jinja", "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n" + CHATML),
    ("phi3-q8_0", "jinja", "<|user|>\nHi<|end|>\n<|assistant|>\n"),
]


def near_tie(row):
    """Whether the reference's top-1/top-2 gap of a [[id, logit], ...] row is within the bar."""
    return row[0][1] - row[1][1] <= TOL * max(abs(l) for _, l in row)


def check_greedy(srv, case):
    """/completion of the case's prompt: its tokens, then the reference's greedy ids and logit
    differences (see the module's docstring)."""
    status, tok = post(srv, "/tokenize", {"content": case["prompt"], "add_special": True})
    assert status == 200 and tok["tokens"] == case["tokens"]
    req = {"prompt": case["prompt"], "n_predict": len(case["greedy"]), "temperature": 0, "n_probs": 8,
           "cache_prompt": False}
    status, body = post(srv, "/completion", req)
    assert status == 200 and body["tokens_evaluated"] == len(case["tokens"])
    ids = [p["id"] for p in body["completion_probabilities"]]
    assert len(ids) == len(case["greedy"])
    steps = [case["prompt_topk"][-1]] + case["greedy_topk"]  # the row each greedy token came from
    same = next((i for i, (a, b) in enumerate(zip(ids, case["greedy"])) if a != b), len(ids))
    assert same == len(ids) or near_tie(steps[same]), \
        "greedy left the reference at step %d after a clear step: %s vs %s" % (same, ids, case["greedy"])
    for i in range(min(same + 1, len(ids))):  # the steps taken from the reference's context
        ref = steps[i]
        ours = {t["id"]: t["logprob"] for t in body["completion_probabilities"][i]["top_logprobs"]}
        top, bar = ref[0][0], 2 * TOL * max(abs(l) for _, l in ref)
        assert top in ours, (i, ref[:3], ours)
        compared = [(tid, l) for tid, l in ref if tid in ours]
        assert len(compared) >= 4, (i, ref[:8], ours)
        for tid, l in compared:
            assert abs((ours[tid] - ours[top]) - (l - ref[0][1])) <= bar, (i, tid, ours, ref[:8])


@pytest.mark.parametrize("name,family,chat_prompt", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_family_serves_the_reference_greedy_and_its_chat_template(name, family, chat_prompt):
    with open(shared_file("reference", name + ".json")) as f:
        cases = json.load(f)["cases"]
    srv = wait_ready(Server(["-m", shared_model(name + ".gguf"), "--kv-tokens", "1024"]))
    try:
        check_greedy(srv, cases[0])
        check_greedy(srv, cases[-1])  # ~600 tokens: two prompt batches, positions where rope scaling shows

        status, props = srv.json("GET", "/props")
        assert status == 200 and props["chat_template_kind"] == family
        messages = [{"role": "user", "content": "Hi"}]
        status, rendered = post(srv, "/apply-template", {"messages": messages})
        assert status == 200 and rendered["prompt"] == chat_prompt
        status, chat = post(srv, "/v1/chat/completions", {"messages": messages, "max_tokens": 4, "temperature": 0})
        assert status == 200 and chat["choices"][0]["message"]["role"] == "assistant"
        # the chat prompt is the rendered template, tokenized with its special tokens
        status, tok = post(srv, "/tokenize", {"content": rendered["prompt"], "add_special": True,
                                             "parse_special": True})
        assert chat["usage"]["prompt_tokens"] == len(tok["tokens"]), (chat["usage"], tok)
        assert chat["usage"]["completion_tokens"] == 4
    finally:
        srv.check_clean_exit()
