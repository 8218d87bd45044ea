"""Every shared model architecture, quant type and tokenizer family serves: a greedy completion
streams the same text it returns whole, and a chat completion goes through the model's template."""
import json

import pytest

from conftest import Server
from serving_helpers import greedy, post, shared_model, stream, wait_ready


@pytest.mark.parametrize("name", ["llama-spm-q4_k_m.gguf", "llama-spm-f16.gguf", "llama3-bpe-q8_0.gguf",
                                  "qwen2-q8_0.gguf", "mamba-spm-f32.gguf"])
def test_shared_model_serves(name):
    srv = wait_ready(Server(["-m", shared_model(name), "--kv-tokens", "512"]))
    try:
        req = greedy("Hello world, this is", n_predict=5, cache_prompt=False)
        status, whole = post(srv, "/completion", req)
        assert status == 200 and whole["tokens_predicted"] + (whole["stop_type"] == "eos") >= 1
        events = [json.loads(e) for e in stream(srv, "/completion", req)]
        assert "".join(e["content"] for e in events) == whole["content"]
        status, chat = post(srv, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                          "max_tokens": 3, "temperature": 0})
        assert status == 200 and chat["usage"]["prompt_tokens"] > 3
    finally:
        srv.check_clean_exit()
