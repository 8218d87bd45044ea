"""The other APIs over raw HTTP: OpenAI's Responses API (/v1/responses), Anthropic's Messages API
(/v1/messages, /v1/messages/count_tokens) with their typed event streams and error shapes,
GET /v1/models/{id} and --alias. One server for the module, with an API key and an alias."""
import json

import pytest

from conftest import Server
from serving_helpers import PROMPT, start

KEY = "k-apis"
ALIAS = "org/kjv-tiny"
AUTH = {"Content-Type": "application/json", "Authorization": "Bearer " + KEY}
ANTHROPIC = {"Content-Type": "application/json", "x-api-key": KEY, "anthropic-version": "2023-06-01"}


@pytest.fixture(scope="module")
def srv():
    s = start("--api-key", KEY, "--alias", ALIAS)
    yield s
    s.check_clean_exit()


def call(srv, path, body, headers=AUTH, method="POST"):
    status, hdrs, data = srv.request(method, path, json.dumps(body) if body is not None else None, headers,
                                     timeout=60)
    return status, hdrs, json.loads(data) if data else None


def typed_stream(srv, path, body, headers=AUTH):
    """POST with stream: true; the [(event name, parsed data)] of a typed event stream."""
    c = srv.conn(60)
    try:
        c.request("POST", path, json.dumps(dict(body, stream=True)), headers)
        r = c.getresponse()
        assert r.status == 200, r.read()
        assert r.getheader("Content-Type").startswith("text/event-stream")
        events, name = [], None
        for line in r.read().decode().split("\n"):
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                events.append((name, json.loads(line[6:])))
                name = None
        return events
    finally:
        c.close()


def responses_body(**extra):
    return dict({"input": PROMPT, "max_output_tokens": 8, "temperature": 0}, **extra)


def messages_body(**extra):
    return dict({"model": "claude-x", "max_tokens": 8, "temperature": 0,
                 "messages": [{"role": "user", "content": PROMPT}]}, **extra)


# --- /v1/responses -----------------------------------------------------------------------------

def test_responses_object(srv):
    status, _, r = call(srv, "/v1/responses", responses_body(instructions="Be brief."))
    assert status == 200, r
    assert r["id"].startswith("resp_") and r["object"] == "response" and r["created_at"] > 0
    assert r["model"] == ALIAS  # no model asked for: the alias
    assert r["status"] == "incomplete" and r["incomplete_details"] == {"reason": "max_output_tokens"}
    assert r["instructions"] == "Be brief." and r["max_output_tokens"] == 8 and r["temperature"] == 0
    [item] = r["output"]
    assert item["type"] == "message" and item["role"] == "assistant" and item["id"] == "msg_" + r["id"][5:]
    [part] = item["content"]
    assert part["type"] == "output_text" and part["text"] and part["annotations"] == []
    u = r["usage"]
    assert u["output_tokens"] == 8 and u["input_tokens"] > 3 and u["total_tokens"] == u["input_tokens"] + 8


def test_responses_items_equal_text_input(srv):
    """A user message item with input_text parts is the same conversation as the text input."""
    _, _, text = call(srv, "/v1/responses", responses_body())
    items = [{"type": "message", "role": "user",
              "content": [{"type": "input_text", "text": "And God"}, {"type": "input_text", "text": " said"}]}]
    _, _, item = call(srv, "/v1/responses", responses_body(input=items))
    assert item["output"][0]["content"][0]["text"] == text["output"][0]["content"][0]["text"]
    assert item["usage"]["input_tokens"] == text["usage"]["input_tokens"]
    # an earlier assistant turn (output_text) and a developer message make a longer prompt
    items = [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"},
             {"role": "assistant", "content": [{"type": "output_text", "text": "Hail."}]},
             {"role": "user", "content": PROMPT}]
    status, _, longer = call(srv, "/v1/responses", responses_body(input=items, model="any"))
    assert status == 200 and longer["model"] == "any"
    assert longer["usage"]["input_tokens"] > text["usage"]["input_tokens"]


def test_responses_stream_events(srv):
    events = typed_stream(srv, "/v1/responses", responses_body())
    names = [n for n, _ in events]
    assert names[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert names[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.incomplete"]
    assert set(names[4:-4]) == {"response.output_text.delta"} and len(names) >= 10
    for i, (name, data) in enumerate(events):
        assert data["type"] == name and data["sequence_number"] == i
    created, final = events[0][1]["response"], events[-1][1]["response"]
    assert created["status"] == "in_progress" and created["output"] == [] and created["usage"] is None
    assert final["id"] == created["id"] and final["usage"]["output_tokens"] == 8
    deltas = "".join(d["delta"] for n, d in events if n == "response.output_text.delta")
    item_id = "msg_" + created["id"][5:]
    assert all(d["item_id"] == item_id for n, d in events[3:-1] if "item_id" in d)
    assert events[-4][1]["text"] == deltas == final["output"][0]["content"][0]["text"]
    # greedy: the stream says what the whole response says
    _, _, whole = call(srv, "/v1/responses", responses_body())
    assert whole["output"][0]["content"][0]["text"] == deltas


@pytest.mark.parametrize("body,param,word", [
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0].call_id", "required"),
    ({"input": [{"type": "function_call_output", "call_id": "c"}]}, "input[0].output", "required"),
    ({"input": [{"type": "web_search_call", "status": "completed"}]}, "input[0]", "web_search_call"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content[0]",
     "input_image"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role", "robot"),
    ({"input": ""}, "input", "empty"),
    ({}, "input", "required"),
    ({"input": PROMPT, "max_output_tokens": 0}, "max_output_tokens", "[1,"),
    ({"input": PROMPT, "temperature": 3}, "temperature", "[0, 2]"),
    ({"input": PROMPT, "tools": [{"type": "web_search"}]}, "tools[0]", "web_search"),
    ({"input": PROMPT, "tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "function",
                                                                                      "name": "g"}},
     "tool_choice.name", "g"),
    ({"input": PROMPT, "previous_response_id": "resp_1"}, "previous_response_id", "not stored"),
    ({"input": PROMPT, "text": {"format": {"type": "json_object"}}}, "text.format", "text"),
])
def test_responses_bad_input_is_400_in_openai_shape(srv, body, param, word):
    status, _, err = call(srv, "/v1/responses", body)
    assert status == 400, err
    e = err["error"]
    assert e["type"] == "invalid_request_error" and e["param"] == param and word in e["message"]


# --- /v1/messages --------------------------------------------------------------------------------

def test_messages_object_and_count_tokens(srv):
    status, _, m = call(srv, "/v1/messages", messages_body(system="Be brief."), ANTHROPIC)
    assert status == 200, m
    assert m["id"].startswith("msg_") and m["type"] == "message" and m["role"] == "assistant"
    assert m["model"] == "claude-x"
    assert [b["type"] for b in m["content"]] == ["text"] and m["content"][0]["text"]
    assert m["stop_reason"] == "max_tokens" and m["stop_sequence"] is None
    assert m["usage"]["output_tokens"] == 8
    # system as text blocks is the same system prompt; count_tokens counts what /v1/messages ran
    body = messages_body(system=[{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}])
    del body["max_tokens"]
    status, _, counted = call(srv, "/v1/messages/count_tokens", body, ANTHROPIC)
    assert status == 200 and counted == {"input_tokens": m["usage"]["input_tokens"]}


def test_messages_stop_sequence(srv):
    _, _, free = call(srv, "/v1/messages", messages_body(max_tokens=16), ANTHROPIC)
    text = free["content"][0]["text"]
    word = text.split()[2]  # a word the greedy text holds, not at its start
    _, _, m = call(srv, "/v1/messages", messages_body(max_tokens=16, stop_sequences=[word]), ANTHROPIC)
    assert m["stop_reason"] == "stop_sequence" and m["stop_sequence"] == word
    assert m["content"][0]["text"] == text[:text.index(word)]


def test_messages_stream_events(srv):
    body = messages_body(messages=[{"role": "user", "content": [{"type": "text", "text": PROMPT}]}])
    events = typed_stream(srv, "/v1/messages", body, ANTHROPIC)
    names = [n for n, _ in events]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[3:-3]) == {"content_block_delta"} and len(names) >= 8
    assert all(d["type"] == n for n, d in events)
    start = events[0][1]["message"]
    assert start["id"].startswith("msg_") and start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["input_tokens"] > 3
    text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
    assert all(d["delta"]["type"] == "text_delta" and d["index"] == 0 for n, d in events if n == "content_block_delta")
    delta = events[-2][1]
    assert delta["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert delta["usage"]["output_tokens"] == 8
    _, _, whole = call(srv, "/v1/messages", body, ANTHROPIC)
    assert whole["content"][0]["text"] == text


@pytest.mark.parametrize("body,word", [
    ({"messages": [{"role": "user", "content": PROMPT}]}, "max_tokens: required"),
    ({"max_tokens": 8, "messages": [{"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]}]},
     "messages[0].content[0]: content blocks of type \"tool_result\""),
    ({"max_tokens": 8, "messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t"}]}]},
     "messages[0].content[0]: a tool_use block needs"),
    ({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "image"}]}]}, "\"image\""),
    ({"max_tokens": 8, "messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
    ({"max_tokens": 8, "messages": []}, "messages: must not be empty"),
    ({"max_tokens": 8, "messages": [{"role": "user", "content": "x"}], "temperature": 1.5}, "temperature"),
    ({"max_tokens": 8, "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "web_search_20250305",
                                                                                 "name": "web_search"}]},
     "tools[0]: tools of type"),
])
def test_messages_bad_input_is_400_in_anthropic_shape(srv, body, word):
    status, _, err = call(srv, "/v1/messages", body, ANTHROPIC)
    assert status == 400, err
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert word in err["error"]["message"]


def test_messages_invalid_json_is_400_in_anthropic_shape(srv):
    status, _, data = srv.request("POST", "/v1/messages", "{not json", ANTHROPIC)
    err = json.loads(data)
    assert status == 400 and err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert "invalid JSON" in err["error"]["message"]


def test_errors_follow_the_route_api(srv):
    """401 and 405 in the shape of the API the path belongs to."""
    for headers in ({"x-api-key": "wrong", "anthropic-version": "2023-06-01"}, {}):
        status, _, err = call(srv, "/v1/messages", messages_body(), headers)
        assert status == 401
        assert err == {"type": "error", "error": {"type": "authentication_error", "message": "Invalid API Key"}}
    status, _, err = call(srv, "/v1/messages/count_tokens", None, AUTH, method="GET")  # with the key
    assert status == 405 and err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    status, _, err = call(srv, "/v1/responses", responses_body(), {"x-api-key": "wrong"})
    assert status == 401 and err["error"]["type"] == "authentication_error" and err["error"]["code"] == 401


# --- models and the alias ------------------------------------------------------------------------

def test_model_by_id_and_alias_everywhere(srv):
    status, _, models = call(srv, "/v1/models", None, AUTH, method="GET")
    assert status == 200 and [m["id"] for m in models["data"]] == [ALIAS]
    status, _, model = call(srv, "/v1/models/org%2Fkjv-tiny", None, AUTH, method="GET")
    assert status == 200 and model["id"] == ALIAS and model["object"] == "model"
    assert model == models["data"][0]
    status, _, same = call(srv, "/v1/models/" + ALIAS, None, AUTH, method="GET")
    assert status == 200 and same == model
    status, _, err = call(srv, "/v1/models/kjv-tiny-q8_0.gguf", None, AUTH, method="GET")
    assert status == 404 and err["error"]["param"] == "model" and "kjv-tiny-q8_0.gguf" in err["error"]["message"]
    status, _, props = call(srv, "/props", None, AUTH, method="GET")
    assert status == 200 and props["model"] == ALIAS
    status, chat = post_auth(srv, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                           "max_tokens": 2})
    assert status == 200 and chat["model"] == ALIAS


def post_auth(srv, path, body):
    status, _, data = call(srv, path, body)
    return status, data


def test_response_ids_are_random(srv):
    ids = set()
    for path, body in (("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}),
                       ("/v1/completions", {"prompt": PROMPT, "max_tokens": 1})):
        for _ in range(3):
            status, r = post_auth(srv, path, body)
            assert status == 200
            prefix, _, rest = r["id"].partition("-")
            assert prefix in ("chatcmpl", "cmpl") and len(rest) >= 20 and rest.isalnum()
            ids.add(r["id"])
    assert len(ids) == 6


def test_chat_stream_opens_with_role_only_chunk_and_every_response_has_a_fingerprint(srv):
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "n": 2, "temperature": 0}
    c = srv.conn(60)
    try:
        c.request("POST", "/v1/chat/completions", json.dumps(dict(body, stream=True)), AUTH)
        r = c.getresponse()
        assert r.status == 200
        events = [line[6:] for line in r.read().decode().split("\n") if line.startswith("data: ")]
    finally:
        c.close()
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    # one role-only chunk per choice, before any text, as llama.cpp's server opens a chat stream
    assert [ch["choices"][0]["delta"] for ch in chunks[:2]] == [{"role": "assistant", "content": None}] * 2
    assert sorted(ch["choices"][0]["index"] for ch in chunks[:2]) == [0, 1]
    assert all("role" not in ch["choices"][0]["delta"] for ch in chunks[2:])
    fp = chunks[0]["system_fingerprint"]
    assert fp.startswith("fp_") and all(ch["system_fingerprint"] == fp for ch in chunks)
    for path, req in (("/v1/chat/completions", dict(body, n=1)), ("/v1/completions", {"prompt": PROMPT, "max_tokens": 2})):
        status, whole = post_auth(srv, path, req)
        assert status == 200 and whole["system_fingerprint"] == fp


def test_loading_503_in_the_shape_of_the_route_api():
    srv = Server(["--debug-ready-delay", "30s"], wait_ready=False)
    try:
        status, _, err = call(srv, "/v1/messages", messages_body(), {"Content-Type": "application/json"})
        assert status == 503
        assert err == {"type": "error", "error": {"type": "overloaded_error", "message": "Loading model"}}
        status, _, err = call(srv, "/v1/responses", responses_body(), {"Content-Type": "application/json"})
        assert status == 503 and err["error"]["message"] == "Loading model" and err["error"]["code"] == 503
    finally:
        srv.check_clean_exit()
