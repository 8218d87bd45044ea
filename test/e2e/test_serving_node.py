"""Real client SDKs from npm (pinned in test/e2e/node/package.json, installed by scripts/install-deps
with npm ci) against uvlm: the OpenAI Node SDK (chat stream, completion n=2, the Responses API),
the Anthropic TypeScript SDK (messages, streaming, count_tokens, errors), the Vercel AI SDK's
OpenAI provider, whose default model calls /v1/responses, and tool calls through the OpenAI SDK (chat
and Responses), the Anthropic SDK and LangChain JS (bindTools, withStructuredOutput) on the shared qwen2 model."""
import json
import os
import re
import shutil
import subprocess

from conftest import need
from serving_helpers import start

NODE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node")


def run_node(script, package, *args, server_args=(), path="/v1"):
    """Start a server, run `node script BASE_URL args...` and return the JSON of its last line."""
    node = shutil.which("node")
    need(node, "node is not installed (scripts/install-deps installs it)")
    need(os.path.isdir(os.path.join(NODE_DIR, "node_modules", package)),
         "%s is not installed: (cd test/e2e/node && npm ci)" % package)
    srv = start(*server_args)
    try:
        out = subprocess.run([node, script, "http://127.0.0.1:%d%s" % (srv.port, path)] + list(args), cwd=NODE_DIR,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr + srv.log()
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        srv.check_clean_exit()


def test_openai_node_sdk_streams_chat_and_completion_n2():
    got = run_node("openai_sdk.mjs", "openai")
    chat = got["chat"]
    # streamed: several chunks of one id, the text, finish_reason and the usage chunk
    assert chat["chunks"] >= 3 and chat["ids"] == 1
    assert chat["text"] and chat["finish"] == "length"
    assert chat["usage"]["completion_tokens"] == 8
    comp = got["completion"]
    assert comp["object"] == "text_completion"
    assert [c["index"] for c in comp["choices"]] == [0, 1]
    assert all(c["text"] and c["finish"] == "length" for c in comp["choices"])
    assert comp["usage"]["completion_tokens"] == 12


def test_openai_node_sdk_responses_create_whole_and_streamed():
    got = run_node("openai_responses.mjs", "openai", "k1", server_args=("--api-key", "k1", "--alias", "kjv-tiny"))
    whole = got["whole"]
    assert whole["id"].startswith("resp_") and whole["object"] == "response"
    # max_output_tokens reached: the Responses API calls that incomplete
    assert whole["status"] == "incomplete" and whole["model"] == "kjv-tiny"
    assert whole["output_text"] and whole["instructions"].startswith("Answer in")
    u = whole["usage"]
    assert u["output_tokens"] == 8 and u["total_tokens"] == u["input_tokens"] + 8
    s = got["streamed"]
    assert s["types"][:4] == ["response.created", "response.in_progress", "response.output_item.added",
                              "response.content_part.added"]
    assert s["types"][-4:] == ["response.output_text.done", "response.content_part.done",
                               "response.output_item.done", "response.incomplete"]
    assert s["types"].count("response.output_text.delta") == len(s["deltas"]) >= 2
    assert s["sequence"] == list(range(len(s["types"])))
    assert "".join(s["deltas"]) == s["final"]["text"] and s["final"]["status"] == "incomplete"
    assert s["final"]["usage"]["output_tokens"] == 8


def test_anthropic_sdk_messages_stream_count_tokens_and_errors():
    got = run_node("anthropic_sdk.mjs", "@anthropic-ai/sdk", "k2", server_args=("--api-key", "k2"), path="")
    whole = got["whole"]
    assert whole["id"].startswith("msg_") and whole["type"] == "message" and whole["role"] == "assistant"
    assert whole["model"] == "kjv-tiny"  # as the request named it
    assert whole["content"][0]["type"] == "text" and whole["content"][0]["text"]
    assert whole["stop_reason"] == "max_tokens" and whole["usage"]["output_tokens"] == 8
    s = got["streamed"]
    assert s["types"][:2] == ["message_start", "content_block_start"]
    assert s["types"][-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert s["types"].count("content_block_delta") >= 2
    # greedy: the stream says what the whole message said
    assert s["text"] == s["final"]["text"] == whole["content"][0]["text"]
    assert s["final"]["stop_reason"] == "max_tokens" and s["final"]["usage"]["output_tokens"] == 8
    # count_tokens counts the prompt that /v1/messages runs
    assert got["counted"] == {"input_tokens": whole["usage"]["input_tokens"]}
    assert got["refused"]["status"] == 400 and got["refused"]["type"] == "invalid_request_error"
    assert "image" in got["refused"]["message"]
    assert got["unauthorized"] == {"status": 401, "type": "authentication_error", "name": "AuthenticationError"}


def test_ai_sdk_openai_default_model_generate_and_stream_text():
    got = run_node("ai_sdk.mjs", "@ai-sdk/openai")
    assert got["error"] is None
    g, s = got["generated"], got["streamed"]
    assert g["text"] and g["finishReason"] == "length" and g["responseId"].startswith("resp_")
    assert g["usage"]["outputTokens"] == 8
    assert len(s["parts"]) >= 2 and "".join(s["parts"]) == s["text"] == g["text"]
    assert s["finishReason"] == "length" and s["usage"]["outputTokens"] == 8


def qwen_tools_server_args(tmp_path):
    """The shared qwen2 model with the Qwen2.5 template of tools.jsonl: the Hermes tool-call syntax."""
    from conftest import shared_file
    with open(shared_file("chat", "tools.jsonl"), encoding="utf-8") as f:
        row = next(r for r in map(json.loads, f) if r["name"] == "Qwen-Qwen2.5-7B-Instruct.jinja")
    path = tmp_path / "qwen.jinja"
    path.write_text(row["template"], encoding="utf-8")
    return ("--model", shared_file("models", "qwen2-q8_0.gguf"), "--chat-template-file", str(path))


def test_openai_node_sdk_tool_calls_whole_and_streamed(tmp_path):
    got = run_node("openai_tools.mjs", "openai", server_args=qwen_tools_server_args(tmp_path))
    for choice in (got["whole"], got["streamed"]):
        assert choice["finish_reason"] == "tool_calls", choice
        calls = choice["message"]["tool_calls"]
        assert len(calls) == 1 and calls[0]["type"] == "function" and calls[0]["id"].startswith("call_")
        assert calls[0]["function"]["name"] == "get_weather"
        args = json.loads(calls[0]["function"]["arguments"])
        assert set(args) == {"city"} and isinstance(args["city"], str) and len(args["city"]) <= 8
    # the same seed: the same call, streamed as an announcement then argument fragments
    assert got["whole"]["message"]["tool_calls"][0]["function"] == got["streamed"]["message"]["tool_calls"][0]["function"]
    d = got["deltas"]
    assert d[0]["index"] == 0 and d[0]["function"]["name"] == "get_weather" and d[0]["id"]
    assert len(d) >= 2 and all("id" not in x for x in d[1:])


def test_openai_node_sdk_responses_tools_whole_streamed_and_sent_back(tmp_path):
    got = run_node("openai_responses_tools.mjs", "openai", server_args=qwen_tools_server_args(tmp_path))
    whole = got["whole"]
    assert whole["status"] == "completed" and whole["tool_choice"] == "required"
    assert [t["name"] for t in whole["tools"]] == ["get_weather"]
    assert len(whole["output"]) == 1
    call = whole["output"][0]
    assert call["type"] == "function_call" and call["status"] == "completed" and call["name"] == "get_weather"
    assert call["call_id"].startswith("call_") and call["id"].startswith("fc_")
    args = json.loads(call["arguments"])
    assert set(args) == {"city"} and isinstance(args["city"], str) and len(args["city"]) <= 8
    s = got["streamed"]
    assert s["sequence"] == list(range(len(s["types"])))
    assert s["types"][:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert s["types"][-3:] == ["response.function_call_arguments.done", "response.output_item.done",
                               "response.completed"]
    # greedy: the stream makes the same call, its arguments in fragments
    assert "".join(s["deltas"]) == s["done"] == call["arguments"] == s["output"][0]["arguments"]
    assert s["output"][0]["name"] == "get_weather"
    nxt = got["next"]
    assert nxt["status"] in ("completed", "incomplete") and nxt["types"] == ["message"] and nxt["output_text"]


def test_anthropic_sdk_tool_use_whole_streamed_and_sent_back(tmp_path):
    got = run_node("anthropic_tools.mjs", "@anthropic-ai/sdk", server_args=qwen_tools_server_args(tmp_path), path="")
    whole = got["whole"]
    assert whole["stop_reason"] == "tool_use"
    assert len(whole["content"]) == 1
    use = whole["content"][0]
    assert use["type"] == "tool_use" and use["name"] == "get_weather" and use["id"]
    assert set(use["input"]) == {"city"} and isinstance(use["input"]["city"], str) and len(use["input"]["city"]) <= 8
    s = got["streamed"]
    types = [t for t in s["types"] if t != "ping"]  # the SDK's iterator may leave pings out
    assert types[:2] == ["message_start", "content_block_start"]
    assert types[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    # greedy: the stream makes the same call, which the SDK assembles from input_json_delta fragments
    assert s["stop_reason"] == "tool_use" and len(s["partial"]) >= 2
    assert json.loads("".join(s["partial"])) == s["content"][0]["input"] == use["input"]
    assert got["next"]["types"] == ["text"] and got["next"]["stop_reason"] in ("end_turn", "max_tokens")


def test_langchain_js_bind_tools_and_structured_output(tmp_path):
    got = run_node("langchain_tools.mjs", "@langchain/openai", server_args=qwen_tools_server_args(tmp_path))
    calls = got["toolCalls"]
    assert len(calls) == 1 and calls[0]["name"] == "get_weather", calls
    assert isinstance(calls[0]["args"]["city"], str) and len(calls[0]["args"]["city"]) <= 8
    for person in (got["viaTool"], got["viaDefault"]):
        assert set(person) == {"name", "age"}, person
        assert re.fullmatch("[a-z]{1,8}", person["name"]), person
        assert isinstance(person["age"], int) and 0 <= person["age"] <= 120
