"""Tool calls and reasoning through the real server: the shared random-weight qwen2 model with the
Qwen2.5 template of ../shared/chat/tools.jsonl (Hermes <tool_call> syntax). With tool_choice
"required" or a named tool every seeded generation is a call, whole and streamed, whose arguments
validate against the tool's schema; "none" and "auto" answer text; the request fields' 400s; and
reasoning_content under a template that opens the reasoning block (QwQ's), and the same reasoning
as /v1/responses reasoning items; the same tools through
/v1/responses (function_call items) and /v1/messages (tool_use blocks)."""
import json

import pytest

from conftest import Server, shared_file
from serving_helpers import post, shared_model, stream, wait_ready
from test_structured_output import validate

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "minLength": 1, "maxLength": 8},
                   "unit": {"enum": ["celsius", "fahrenheit"]},
                   "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city"],
}
SEARCH = {"type": "object", "properties": {"query": {"type": "string", "maxLength": 10}}, "required": ["query"]}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "The weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "search", "description": "Search the web", "parameters": SEARCH}},
]
SCHEMA = {"get_weather": WEATHER, "search": SEARCH}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def template(tmp_path, name):
    with open(shared_file("chat", "tools.jsonl"), encoding="utf-8") as f:
        row = next(r for r in map(json.loads, f) if r["name"] == name)
    path = tmp_path / name
    path.write_text(row["template"], encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    path = template(tmp_path_factory.mktemp("tmpl"), "Qwen-Qwen2.5-7B-Instruct.jinja")
    srv = wait_ready(Server(["--model", shared_model("qwen2-q8_0.gguf"), "--chat-template-file", path]))
    assert "tool calls: hermes syntax" in srv.log()
    yield srv
    srv.stop()


def check_call(call, names=SCHEMA):
    assert call["id"].startswith("call_") and call["type"] == "function", call
    name = call["function"]["name"]
    assert name in names, call
    args = json.loads(call["function"]["arguments"])
    validate(args, SCHEMA[name], SCHEMA[name])


def test_required_makes_valid_calls(qwen):
    for seed in range(1, 13):
        status, out = post(qwen, "/v1/chat/completions", {
            "messages": ASK, "tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False,
            "seed": seed, "temperature": 1.0, "max_tokens": 300})
        assert status == 200, out
        choice = out["choices"][0]
        assert choice["finish_reason"] == "tool_calls", choice
        msg = choice["message"]
        assert msg["content"] is None and len(msg["tool_calls"]) == 1, msg
        check_call(msg["tool_calls"][0])


def test_named_tool_is_the_one_called(qwen):
    for seed in range(1, 5):
        status, out = post(qwen, "/v1/chat/completions", {
            "messages": ASK, "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "search"}},
            "seed": seed, "temperature": 1.0, "max_tokens": 300, "parallel_tool_calls": False})
        assert status == 200, out
        calls = out["choices"][0]["message"]["tool_calls"]
        assert [c["function"]["name"] for c in calls] == ["search"]
        check_call(calls[0], ["search"])


def test_required_streams_openai_deltas(qwen):
    for seed in range(1, 7):
        events = stream(qwen, "/v1/chat/completions", {
            "messages": ASK, "tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False,
            "seed": seed, "temperature": 1.0, "max_tokens": 300})
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        calls, content, finish = {}, "", None
        for ch in chunks:
            c = ch["choices"][0]
            d = c["delta"]
            content += d.get("content") or ""
            for tc in d.get("tool_calls", []):
                if tc["index"] not in calls:  # the first news of a call: id, type and name
                    assert tc["id"].startswith("call_") and tc["type"] == "function" and tc["function"]["name"], tc
                    calls[tc["index"]] = {"id": tc["id"], "type": "function",
                                          "function": {"name": tc["function"]["name"], "arguments": ""}}
                else:
                    assert "id" not in tc and "name" not in tc["function"], tc
                calls[tc["index"]]["function"]["arguments"] += tc["function"]["arguments"]
            finish = c["finish_reason"] or finish
        assert finish == "tool_calls" and content == ""
        assert list(calls) == [0]
        check_call(calls[0])
        # the same seed without streaming gives the same call
        status, out = post(qwen, "/v1/chat/completions", {
            "messages": ASK, "tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False,
            "seed": seed, "temperature": 1.0, "max_tokens": 300})
        whole = out["choices"][0]["message"]["tool_calls"][0]["function"]
        assert whole == calls[0]["function"]


def test_none_and_auto_answer(qwen):
    status, out = post(qwen, "/v1/chat/completions", {"messages": ASK, "tools": TOOLS, "tool_choice": "none",
                                                      "seed": 1, "max_tokens": 12})
    assert status == 200, out
    c = out["choices"][0]
    assert isinstance(c["message"]["content"], str) and "tool_calls" not in c["message"]
    assert c["finish_reason"] in ("stop", "length")
    for seed in range(1, 4):
        status, out = post(qwen, "/v1/chat/completions", {"messages": ASK, "tools": TOOLS, "seed": seed,
                                                          "temperature": 1.0, "max_tokens": 40})
        assert status == 200, out
        m = out["choices"][0]["message"]
        for call in m.get("tool_calls", []):
            check_call(call)
        assert isinstance(m["content"], str) or m.get("tool_calls")


def test_tool_history_renders(qwen):
    messages = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"},
    ]
    status, out = post(qwen, "/apply-template", {"messages": messages, "tools": TOOLS})
    assert status == 200, out
    assert "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>" in out["prompt"]
    assert "<tool_response>\n{\"temp\": 21}\n</tool_response>" in out["prompt"]
    status, out = post(qwen, "/v1/chat/completions", {"messages": messages, "tools": TOOLS, "max_tokens": 4, "seed": 1})
    assert status == 200, out


@pytest.mark.parametrize("extra,param", [
    ({"tool_choice": "sometimes"}, "tool_choice"),
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice.function.name"),
    ({"tools": [{"type": "function", "function": {"name": ""}}]}, "tools[0].function.name"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "a": {"not": {}}}}}}], "tool_choice": "required"}, "tools[0].function.parameters.properties.a.not"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"reasoning_format": "loud"}, "reasoning_format"),
    ({"parallel_tool_calls": "yes"}, "parallel_tool_calls"),
])
def test_bad_tool_fields_are_400s_naming_them(qwen, extra, param):
    body = dict({"messages": ASK, "tools": TOOLS}, **extra)
    status, out = post(qwen, "/v1/chat/completions", body)
    assert status == 400, out
    assert out["error"]["param"] == param, out


def test_reasoning_content_when_the_template_opens_the_block(tmp_path):
    path = template(tmp_path, "Qwen-QwQ-32B.jinja")
    srv = wait_ready(Server(["--model", shared_model("qwen2-q8_0.gguf"), "--chat-template-file", path]))
    try:
        body = {"messages": [{"role": "user", "content": "2 + 2?"}], "seed": 3, "temperature": 0, "max_tokens": 12}
        status, auto = post(srv, "/v1/chat/completions", body)
        assert status == 200, auto
        status, raw = post(srv, "/v1/chat/completions", dict(body, reasoning_format="none"))
        assert status == 200, raw
        text = raw["choices"][0]["message"]["content"]
        assert "reasoning_content" not in raw["choices"][0]["message"]
        msg = auto["choices"][0]["message"]
        if "</think>" in text:  # the model closed the block: the rest is the answer
            before, after = text.split("</think>", 1)
            assert msg["reasoning_content"] == before.strip() and msg["content"] == after.lstrip()
        else:
            assert msg["reasoning_content"] == text.strip() and msg["content"] == ""
        # streamed: the same reasoning in delta.reasoning_content
        events = stream(srv, "/v1/chat/completions", body)
        got = "".join(json.loads(e)["choices"][0]["delta"].get("reasoning_content") or ""
                      for e in events[:-1] if json.loads(e)["choices"])
        assert got == msg["reasoning_content"]
        # /v1/responses: the same reasoning as a reasoning item before the message, whole and streamed
        rbody = {"input": "2 + 2?", "temperature": 0, "max_output_tokens": 12}
        status, whole = post(srv, "/v1/responses", rbody)
        assert status == 200, whole
        rs = whole["output"][0]
        assert rs["type"] == "reasoning" and rs["id"].startswith("rs_") and rs["summary"] == [], rs
        assert [c["type"] for c in rs["content"]] == ["reasoning_text"], rs
        assert rs["content"][0]["text"] == msg["reasoning_content"]
        assert [i["type"] for i in whole["output"][1:]] == (["message"] if msg["content"] else [])
        if msg["content"]:
            assert whole["output"][1]["content"][0]["text"] == msg["content"]
        events = typed_stream(srv, "/v1/responses", rbody)
        names = [n for n, _ in events]
        assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
        assert names[:3] == ["response.created", "response.in_progress", "response.output_item.added"], names
        added = events[2][1]["item"]
        assert added["type"] == "reasoning" and added["id"].startswith("rs_") and events[2][1]["output_index"] == 0
        deltas = [d for n, d in events if n == "response.reasoning_text.delta"]
        assert all(d["item_id"] == added["id"] and d["output_index"] == 0 and d["content_index"] == 0 for d in deltas)
        assert "".join(d["delta"] for d in deltas) == rs["content"][0]["text"]
        assert names.index("response.reasoning_text.done") < names.index("response.output_item.done")
        assert [d["text"] for n, d in events if n == "response.reasoning_text.done"] == [rs["content"][0]["text"]]
        assert names[-1] in ("response.completed", "response.incomplete")
        def no_ids(items):  # each response draws its own id
            return [{k: v for k, v in i.items() if k != "id"} for i in items]
        assert no_ids(events[-1][1]["response"]["output"]) == no_ids(whole["output"])
        # the reasoning item sent back with the next turn is accepted
        status, out = post(srv, "/v1/responses", {"input": [{"role": "user", "content": "2 + 2?"}, rs,
                                                            {"role": "user", "content": "And 3 + 3?"}],
                                                  "max_output_tokens": 4})
        assert status == 200, out
    finally:
        srv.stop()


# --- /v1/responses: the same tools as Responses function tools and items -------------------------

RESP_TOOLS = [dict(t["function"], type="function") for t in TOOLS]


def resp_body(temperature=1.0, **extra):
    """Sampled (the Responses API has no seed: each request draws its own) unless temperature 0."""
    return dict({"input": "What is the weather in Paris?", "tools": RESP_TOOLS, "tool_choice": "required",
                 "parallel_tool_calls": False, "temperature": temperature, "max_output_tokens": 300}, **extra)


def check_item(item, names=SCHEMA):
    assert item["type"] == "function_call" and item["status"] == "completed", item
    assert item["call_id"].startswith("call_") and item["id"] == "fc_" + item["call_id"][5:], item
    assert item["name"] in names, item
    validate(json.loads(item["arguments"]), SCHEMA[item["name"]], SCHEMA[item["name"]])


def typed_stream(srv, path, body):
    """POST with stream: true; the (event name, data) pairs of a typed event stream."""
    c = srv.conn(60.0)
    try:
        c.request("POST", path, json.dumps(dict(body, stream=True)), {"Content-Type": "application/json"})
        r = c.getresponse()
        assert r.status == 200, r.read()
        events, name = [], None
        while True:
            line = r.readline()
            if not line:
                return events
            line = line.rstrip(b"\r\n")
            if line.startswith(b"event: "):
                name = line[7:].decode()
            elif line.startswith(b"data: "):
                events.append((name, json.loads(line[6:])))
    finally:
        c.close()


def test_responses_required_makes_valid_calls(qwen):
    for _ in range(6):
        status, out = post(qwen, "/v1/responses", resp_body())
        assert status == 200, out
        assert out["status"] == "completed" and out["tool_choice"] == "required", out
        assert [t["name"] for t in out["tools"]] == ["get_weather", "search"]
        assert len(out["output"]) == 1, out["output"]
        check_item(out["output"][0])
    status, out = post(qwen, "/v1/responses", resp_body(tool_choice={"type": "function", "name": "search"}))
    assert status == 200, out
    assert [i["name"] for i in out["output"]] == ["search"]
    check_item(out["output"][0], ["search"])


def test_responses_streams_call_events_in_order(qwen):
    for temperature in (1.0, 1.0, 1.0, 0.0):
        events = typed_stream(qwen, "/v1/responses", resp_body(temperature))
        names = [n for n, _ in events]
        assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
        assert all(d["type"] == n for n, d in events)
        assert names[:3] == ["response.created", "response.in_progress", "response.output_item.added"], names
        assert names[-3:] == ["response.function_call_arguments.done", "response.output_item.done",
                              "response.completed"], names
        assert set(names[3:-3]) <= {"response.function_call_arguments.delta"}, names
        added = events[2][1]["item"]
        assert added["type"] == "function_call" and added["status"] == "in_progress" and added["arguments"] == ""
        args = "".join(d["delta"] for n, d in events if n == "response.function_call_arguments.delta")
        assert all(d["item_id"] == added["id"] and d["output_index"] == 0 for _, d in events[3:-2])
        assert events[-3][1]["arguments"] == args
        done = events[-2][1]["item"]
        check_item(done)
        assert done["id"] == added["id"] and done["arguments"] == args
        final = events[-1][1]["response"]
        assert final["output"] == [done]
        if temperature > 0:
            continue
        # greedy without streaming: the same call
        _, whole = post(qwen, "/v1/responses", resp_body(temperature))
        assert {k: whole["output"][0][k] for k in ("name", "arguments")} == {"name": done["name"], "arguments": args}


def test_responses_call_items_render_as_history(qwen):
    items = [{"role": "user", "content": "What is the weather in Paris?"},
             {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
             {"type": "function_call_output", "call_id": "call_1", "output": "{\"temp\": 21}"}]
    status, out = post(qwen, "/v1/responses", {"input": items, "tools": RESP_TOOLS, "tool_choice": "none",
                                               "max_output_tokens": 4, "temperature": 0})
    assert status == 200, out
    assert [i["type"] for i in out["output"]] == ["message"] and out["tool_choice"] == "none"
    # the prompt is the chat API's for the same conversation
    chat = [items[0], {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"}]
    _, ref = post(qwen, "/v1/chat/completions", {"messages": chat, "tools": TOOLS, "tool_choice": "none",
                                                 "max_tokens": 4, "temperature": 0})
    assert out["usage"]["input_tokens"] == ref["usage"]["prompt_tokens"]
    assert out["output"][0]["content"][0]["text"] == ref["choices"][0]["message"]["content"]


# --- /v1/messages: Anthropic tools, tool_use and tool_result blocks ------------------------------

ANTHROPIC_TOOLS = [{"name": t["function"]["name"], "description": t["function"]["description"],
                    "input_schema": t["function"]["parameters"]} for t in TOOLS]


def msg_body(temperature=1.0, **extra):
    return dict({"max_tokens": 300, "messages": ASK, "tools": ANTHROPIC_TOOLS, "temperature": temperature,
                 "tool_choice": {"type": "any", "disable_parallel_tool_use": True}}, **extra)


def test_messages_any_makes_valid_tool_use(qwen):
    for _ in range(6):
        status, out = post(qwen, "/v1/messages", msg_body())
        assert status == 200, out
        assert out["stop_reason"] == "tool_use", out
        assert [b["type"] for b in out["content"]] == ["tool_use"], out
        b = out["content"][0]
        assert b["id"].startswith("call_") and b["name"] in SCHEMA
        validate(b["input"], SCHEMA[b["name"]], SCHEMA[b["name"]])
    status, out = post(qwen, "/v1/messages",
                       msg_body(tool_choice={"type": "tool", "name": "search", "disable_parallel_tool_use": True}))
    assert status == 200, out
    assert [b["name"] for b in out["content"]] == ["search"]


def test_messages_streams_tool_use_blocks(qwen):
    for temperature in (1.0, 1.0, 0.0):
        events = typed_stream(qwen, "/v1/messages", msg_body(temperature))
        names = [n for n, _ in events]
        assert all(d["type"] == n for n, d in events)
        assert names[:3] == ["message_start", "ping", "content_block_start"], names
        assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"], names
        assert set(names[3:-3]) <= {"content_block_delta"}, names
        block = events[2][1]["content_block"]
        assert block["type"] == "tool_use" and block["input"] == {} and block["name"] in SCHEMA
        deltas = [d for n, d in events if n == "content_block_delta"]
        assert all(d["index"] == 0 and d["delta"]["type"] == "input_json_delta" for d in deltas)
        args = json.loads("".join(d["delta"]["partial_json"] for d in deltas))
        validate(args, SCHEMA[block["name"]], SCHEMA[block["name"]])
        assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
        if temperature == 0:  # greedy without streaming: the same call
            _, whole = post(qwen, "/v1/messages", msg_body(temperature))
            assert whole["content"][0]["name"] == block["name"] and whole["content"][0]["input"] == args


def test_messages_tool_blocks_render_as_history(qwen):
    messages = ASK + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "get_weather",
                                           "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "{\"temp\": 21}"}]},
    ]
    status, out = post(qwen, "/v1/messages", {"max_tokens": 4, "messages": messages, "tools": ANTHROPIC_TOOLS,
                                              "tool_choice": {"type": "none"}, "temperature": 0})
    assert status == 200, out
    assert [b["type"] for b in out["content"]] == ["text"] and out["stop_reason"] != "tool_use"
    chat = ASK + [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"}]
    _, ref = post(qwen, "/v1/chat/completions", {"messages": chat, "tools": TOOLS, "tool_choice": "none",
                                                 "max_tokens": 4, "temperature": 0})
    assert out["usage"]["input_tokens"] == ref["usage"]["prompt_tokens"]
    assert out["content"][0]["text"] == ref["choices"][0]["message"]["content"]
