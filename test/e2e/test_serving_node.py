"""Real client SDKs from npm (pinned in test/e2e/node/package.json, installed by scripts/install-deps
with npm ci) against uvlm: the OpenAI Node SDK (chat stream, completion n=2, the Responses API),
the Anthropic TypeScript SDK (messages, streaming, count_tokens, errors) and the Vercel AI SDK's
OpenAI provider, whose default model calls /v1/responses."""
import json
import os
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
