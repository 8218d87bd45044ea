"""Speculative decoding end to end on the default model: greedy output with prompt lookup
(--draft-lookup) and with a draft model (--model-draft, here the model itself) is the output
without, streamed or not; the request's speculative.* fields are read (and checked); a draft model
with another vocabulary is refused at startup with the reason."""
import json
import subprocess

import pytest

from conftest import BIN, ROOT
from serving_helpers import KJV, greedy, post, shared_model, start, stream

PASSAGE = ("And God said, Let there be light: and there was light. And God saw the light, that it was good: "
           "and God divided the light from the darkness. And God called the light Day, and the darkness he "
           "called Night. And the evening and the morning were the first day.")
QUOTING = PASSAGE + "\n\n" + "And God said, Let there be light"


def contents(srv, **extra):
    out = []
    for prompt in (QUOTING, "In the beginning", "The LORD is my shepherd"):
        status, body = post(srv, "/completion", greedy(prompt, n_predict=48, cache_prompt=False, **extra))
        assert status == 200, body
        out.append(body["content"])
    return out


@pytest.mark.parametrize("flags", [("--draft-lookup",), ("--model-draft", KJV)], ids=["lookup", "draft-model"])
def test_greedy_output_is_the_same_with_speculation(flags):
    srv = start("--batch-tokens", "24", *flags)
    try:
        plain = contents(srv, **{"speculative.n_max": 0})
        assert contents(srv) == plain
        assert contents(srv, **{"speculative.n_max": 4, "speculative.n_min": 2}) == plain
        # streamed: the accepted tokens of a step arrive as their own events, the same text
        events = stream(srv, "/completion", greedy(QUOTING, n_predict=48, cache_prompt=False))
        text = "".join(json.loads(e)["content"] for e in events if e != "[DONE]")
        assert text == plain[0]
    finally:
        srv.check_clean_exit()


def test_speculative_fields_are_checked():
    srv = start("--draft-lookup")
    try:
        status, body = post(srv, "/completion", greedy("x", **{"speculative.p_min": 2}))
        assert status == 400 and "speculative.p_min" in body["error"]["message"], body
        status, body = post(srv, "/completion", greedy("x", **{"speculative.n_max": -3}))
        assert status == 400 and "speculative.n_max" in body["error"]["message"], body
    finally:
        srv.check_clean_exit()


def test_a_draft_model_with_another_vocabulary_is_refused():
    other = shared_model("qwen2-q8_0.gguf")
    p = subprocess.run([BIN, "--port", "0", "--model-draft", other], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode != 0, p.stderr
    assert "draft model" in p.stderr and "needs the same vocabulary" in p.stderr, p.stderr


def test_a_missing_draft_model_exits_2_naming_it():
    p = subprocess.run([BIN, "--port", "0", "--model-draft", "/nonexistent/draft.gguf"], cwd=ROOT,
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2
    assert "--model-draft '/nonexistent/draft.gguf': No such file or directory" in p.stderr, p.stderr
