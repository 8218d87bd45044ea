"""The chat template as the model ships it, through the server: /apply-template with tools matches
the reference server's Jinja rendering byte for byte (../shared/chat/tools.jsonl, the clock pinned
with libfaketime to the day the goldens were rendered), /v1/chat/completions prompts with the same
text, the assistant's last message is continued, and a template that cannot be used is reported."""
import json
import os
import subprocess
import tempfile

import pytest

from conftest import BIN, ROOT, need, shared_file
from serving_helpers import post, shared_model, wait_ready

FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

# One per kind: strftime_now and the date variables, tool calls as objects, Harmony channels and
# the date, a template that raises on a call id it cannot use.
GOLDEN = ["meta-llama-Llama-3.1-8B-Instruct.jinja", "Qwen-Qwen2.5-7B-Instruct.jinja",
          "openai-gpt-oss-120b.jinja", "Mistral-Small-3.2-24B-Instruct-2506.jinja"]


def golden_day_env():
    need(os.path.exists(FAKETIME_LIB), "libfaketime missing (scripts/install-deps installs faketime)")
    env = {"LD_PRELOAD": FAKETIME_LIB, "FAKETIME": "@2026-11-26 12:00:00", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    # a sanitizer build wants its runtime first among the preloaded libraries
    env["ASAN_OPTIONS"] = (os.environ.get("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0") +
                           ":verify_asan_link_order=0")
    return env


@pytest.fixture(scope="module")
def tools_rows():
    with open(shared_file("chat", "tools.jsonl"), encoding="utf-8") as f:
        return {row["name"]: row for row in map(json.loads, f)}


def template_file(tmp_path, text):
    path = tmp_path / "chat.jinja"
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("name", GOLDEN)
def test_apply_template_with_tools_is_the_reference_prompt(start_server, tmp_path, tools_rows, name):
    # the default model's BOS and EOS are <s> and </s>, and its tokenizer adds BOS: as the goldens
    row = tools_rows[name]
    srv = wait_ready(start_server("--chat-template-file", template_file(tmp_path, row["template"]),
                                  env=golden_day_env()))
    assert "run as jinja" in srv.log()
    for i, conv in enumerate(row["conversations"]):
        body = {"messages": conv["messages"], "add_generation_prompt": conv["add_generation_prompt"]}
        if conv.get("tools"):
            body["tools"] = conv["tools"]
        status, out = post(srv, "/apply-template", body)
        assert status == 200, (i, out)
        assert out["prompt"] == conv["expected"], i


def test_chat_completion_prompts_with_the_models_template(start_server):
    srv = wait_ready(start_server("--model", shared_model("qwen2-q8_0.gguf")))
    msgs = [{"role": "user", "content": "Hi"}]
    status, out = post(srv, "/apply-template", {"messages": msgs})
    assert status == 200
    assert out["prompt"] == ("<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
                             "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    status, toks = post(srv, "/tokenize", {"content": out["prompt"], "add_special": True, "parse_special": True})
    assert status == 200
    status, done = post(srv, "/v1/chat/completions", {"messages": msgs, "max_tokens": 2, "temperature": 0})
    assert status == 200, done
    assert done["usage"]["prompt_tokens"] == len(toks["tokens"])


def test_assistant_prefill_and_kwargs(start_server, tmp_path):
    tmpl = ("{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}"
            "{% if add_generation_prompt %}<assistant>{% if mode is defined %}[{{ mode }}]{% endif %}{% endif %}")
    srv = wait_ready(start_server("--chat-template-file", template_file(tmp_path, tmpl)))
    msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hel"}]
    status, out = post(srv, "/apply-template", {"messages": msgs})
    assert status == 200 and out["prompt"] == "<user>Hi</user><assistant>Hel"
    status, out = post(srv, "/apply-template", {"messages": msgs, "add_generation_prompt": False})
    assert status == 200 and out["prompt"] == "<user>Hi</user><assistant>Hel</assistant>"
    status, out = post(srv, "/apply-template", {"messages": msgs, "continue_final_message": False})
    assert status == 200 and out["prompt"] == "<user>Hi</user><assistant>Hel</assistant><assistant>"
    status, out = post(srv, "/apply-template", {"messages": msgs[:1], "continue_final_message": True})
    assert status == 400 and "continue_final_message" in out["error"]["message"]
    status, out = post(srv, "/apply-template", {"messages": msgs[:1], "chat_template_kwargs": {"mode": "fast"}})
    assert status == 200 and out["prompt"] == "<user>Hi</user><assistant>[fast]"
    # the prefilled reply is where generation continues
    status, done = post(srv, "/v1/chat/completions", {"messages": msgs, "max_tokens": 1, "temperature": 0})
    assert status == 200, done


def test_template_errors_are_the_requests(start_server, tmp_path):
    tmpl = "{% if messages|length > 1 %}{{ raise_exception('one message only') }}{% endif %}{{ messages[0].content }}"
    srv = wait_ready(start_server("--chat-template-file", template_file(tmp_path, tmpl)))
    status, out = post(srv, "/apply-template", {"messages": [{"role": "user", "content": "a"}]})
    assert status == 200 and out["prompt"] == "a"
    two = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    for path in ("/apply-template", "/v1/chat/completions"):
        status, out = post(srv, path, {"messages": two})
        assert status == 400 and "one message only" in out["error"]["message"], (path, out)


def test_unrunnable_template_falls_back_with_a_warning(start_server, tmp_path):
    srv = wait_ready(start_server("--chat-template-file", template_file(tmp_path, "<|im_start|>{% if %}")))
    assert "cannot be run" in srv.log() and "chatml" in srv.log()
    status, out = post(srv, "/apply-template", {"messages": [{"role": "user", "content": "Hi"}]})
    assert status == 200 and out["prompt"] == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_forced_family_has_no_place_for_tools(start_server):
    srv = wait_ready(start_server("--chat-template", "llama3"))
    body = {"messages": [{"role": "user", "content": "Hi"}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}
    status, out = post(srv, "/apply-template", body)
    assert status == 400 and "tools" in out["error"]["message"]


def test_missing_template_file_stops_the_server():
    missing = os.path.join(tempfile.gettempdir(), "uvlm-no-such-template.jinja")
    p = subprocess.run([BIN, "--port", "0", "--chat-template-file", missing], cwd=ROOT, capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 1 and missing in p.stderr, p.stderr
