"""Prompt-cache privacy: cached prompt cells are reused only within one API key and cache_salt,
so tokens_cached never tells a client how much of its prompt another client's requests hold."""
import json

import pytest

from serving_helpers import greedy, start

PROMPT = "In the beginning God created the heaven and the earth. And the earth was without form"


def complete(srv, key=None, **body):
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    status, _, data = srv.request("POST", "/completion", json.dumps(greedy(PROMPT, 4, **body)), headers,
                                  timeout=60)
    doc = json.loads(data)
    assert status == 200, doc
    return doc


@pytest.fixture
def keyed():
    s = start("--api-key", "key-a,key-b,key-c")
    yield s
    s.check_clean_exit()


def test_one_key_cannot_probe_another_keys_cache(keyed):
    a = complete(keyed, "key-a")
    assert a["tokens_cached"] == 0
    # b guesses a's prompt, c the start of it: nothing of a's is reused
    b = complete(keyed, "key-b")
    assert b["tokens_cached"] == 0
    assert b["content"] == a["content"]
    status, _, data = keyed.request("POST", "/completion",
                                    json.dumps(greedy(PROMPT[:40] + " and void", 2)),
                                    {"Authorization": "Bearer key-c"})
    assert status == 200 and json.loads(data)["tokens_cached"] == 0
    # the same key gets its cache hit, as does X-Api-Key with that key
    again = complete(keyed, "key-a")
    assert again["tokens_cached"] == again["tokens_evaluated"] - 1
    status, _, data = keyed.request("POST", "/completion", json.dumps(greedy(PROMPT, 4)),
                                    {"X-Api-Key": "key-a"})
    assert status == 200 and json.loads(data)["tokens_cached"] == again["tokens_cached"]


def test_cache_salt_separates_requests_of_one_key(keyed):
    plain = complete(keyed, "key-a")
    assert plain["tokens_cached"] == 0
    salted = complete(keyed, "key-a", cache_salt="tenant-1")
    assert salted["tokens_cached"] == 0 and salted["content"] == plain["content"]
    assert complete(keyed, "key-a", cache_salt="tenant-2")["tokens_cached"] == 0
    hit = complete(keyed, "key-a", cache_salt="tenant-1")
    assert hit["tokens_cached"] == hit["tokens_evaluated"] - 1
    # the same salt under another key is another partition
    assert complete(keyed, "key-b", cache_salt="tenant-1")["tokens_cached"] == 0
    # n choices of one request still share its prompt
    status, _, data = keyed.request("POST", "/v1/completions",
                                    json.dumps({"prompt": PROMPT, "max_tokens": 3, "n": 2, "temperature": 0,
                                                "cache_salt": "tenant-3"}),
                                    {"Authorization": "Bearer key-a"})
    doc = json.loads(data)
    assert status == 200 and len(doc["choices"]) == 2, doc
    assert doc["choices"][0]["text"] == doc["choices"][1]["text"]


def test_without_keys_one_partition_and_salts_separate():
    srv = start()
    try:
        first = complete(srv)
        assert complete(srv)["tokens_cached"] == first["tokens_evaluated"] - 1
        assert complete(srv, cache_salt="x")["tokens_cached"] == 0
        assert complete(srv, cache_salt="x")["tokens_cached"] == first["tokens_evaluated"] - 1
        # an X-Api-Key header means nothing without --api-key: still the shared partition
        status, _, data = srv.request("POST", "/completion", json.dumps(greedy(PROMPT, 4)), {"X-Api-Key": "k"})
        assert status == 200 and json.loads(data)["tokens_cached"] == first["tokens_evaluated"] - 1
    finally:
        srv.check_clean_exit()


@pytest.mark.parametrize("path,salt", [
    ("/completion", 5),
    ("/v1/completions", ["a"]),
    ("/v1/chat/completions", {"s": 1}),
    ("/completion", ""),
])
def test_bad_cache_salt_is_400_naming_it(keyed, path, salt):
    body = {"cache_salt": salt, "max_tokens": 1}
    if path == "/v1/chat/completions":
        body["messages"] = [{"role": "user", "content": "hi"}]
    else:
        body["prompt"] = PROMPT
    status, _, data = keyed.request("POST", path, json.dumps(body), {"Authorization": "Bearer key-a"})
    err = json.loads(data)
    assert status == 400, err
    assert err["error"]["param"] == "cache_salt" and "cache_salt" in err["error"]["message"]
