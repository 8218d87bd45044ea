"""Large request bodies (16 MB of JSON, 1 MB prompts) are parsed and tokenized off the loop thread:
they get the same answers as small ones, a client that leaves meanwhile costs nothing, and the
loop itself never spends long on one of them. How fast /health stays meanwhile is the benchmark's
(scripts/bench.d/55-heavy-body), not a test's."""
import json
import socket
import subprocess
import threading
import time

from conftest import BIN
from serving_helpers import KJV, PROMPT, post, wait_ready

MB = 1 << 20
# Bodies up to 17 MiB: a 16 MiB padding plus the request.
BIG = ("--max-body", "17M")
WORDS = "And God said unto Moses, Speak unto the children of Israel "


def padded(body, size=16 * MB):
    """body plus an unknown field ("padding", ignored by the server) making it about `size` bytes."""
    return json.dumps(dict(body, padding="x" * (size - len(json.dumps(body)) - 20)))


def raw_post(srv, path, data):
    return srv.request("POST", path, body=data, headers={"Content-Type": "application/json"}, timeout=120)


def test_large_bodies_get_the_answers_small_ones_get(start_server):
    srv = wait_ready(start_server(*BIG))
    for path, body in [("/completion", {"prompt": PROMPT, "n_predict": 8, "temperature": 0}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPT}],
                                                 "max_tokens": 8, "temperature": 0}),
                       ("/tokenize", {"content": PROMPT, "with_pieces": True}),
                       ("/detokenize", {"tokens": [1, 2, 3, 400]}),
                       ("/apply-template", {"messages": [{"role": "user", "content": PROMPT}]})]:
        status, _, small = raw_post(srv, path, json.dumps(body).encode())
        assert status == 200, small
        status, _, large = raw_post(srv, path, padded(body).encode())
        assert status == 200, large
        small, large = json.loads(small), json.loads(large)
        for doc in (small, large):  # what differs from one response to the next
            for k in ("id", "created", "timings", "usage", "system_fingerprint", "tokens_cached", "id_slot"):
                doc.pop(k, None)
        assert large == small, path
    # a streamed answer of a large body, and one with the prompt as token ids
    c = srv.conn(timeout=120)
    c.request("POST", "/completion", padded({"prompt": PROMPT, "n_predict": 4, "stream": True}))
    r = c.getresponse()
    events = [l for l in r.read().split(b"\n") if l.startswith(b"data: ")]
    c.close()
    assert r.status == 200 and b'"stop":true' in events[-1].replace(b" ", b""), events
    status, doc = post(srv, "/tokenize", {"content": PROMPT})
    ids = doc["tokens"]
    status, _, data = raw_post(srv, "/completion", padded({"prompt": ids, "n_predict": 8, "temperature": 0}).encode())
    assert status == 200 and json.loads(data)["tokens_evaluated"] == len(ids), data
    assert srv.json("GET", "/health")[0] == 200


def test_a_1mb_prompt_is_tokenized_or_refused_for_the_context(start_server):
    srv = wait_ready(start_server(*BIG))
    text = (WORDS * (MB // len(WORDS)))[:MB - 64]
    # /tokenize: the same ids as the command line's tokenizer
    status, _, data = raw_post(srv, "/tokenize", json.dumps({"content": text}).encode())
    assert status == 200
    ids = json.loads(data)["tokens"]
    cli = subprocess.run([BIN, "tokenize", "--model", KJV, "--parse-special"], input=text, capture_output=True,
                         text=True, check=True)
    assert ids == [int(t) for t in cli.stdout.split()]
    assert len(ids) > 100000
    # a completion: the context's 400, with the counts
    for path, body in [("/completion", {"prompt": text, "n_predict": 4}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": text}]})]:
        status, _, data = raw_post(srv, path, json.dumps(body).encode())
        err = json.loads(data)["error"]
        assert status == 400 and err["type"] == "exceed_context_size_error", data
        assert err["n_prompt_tokens"] >= len(ids) > err["n_ctx"], err
    # past the prompt limit (1 MiB): a 400 naming the prompt
    status, _, data = raw_post(srv, "/completion", json.dumps({"prompt": text * 2}).encode())
    assert status == 400 and json.loads(data)["error"]["param"] == "prompt", data
    assert post(srv, "/completion", {"prompt": PROMPT, "n_predict": 2})[0] == 200


def test_clients_leaving_while_their_bodies_are_parsed(start_server):
    srv = wait_ready(start_server(*BIG, "--debug-endpoints"))
    body = padded({"prompt": PROMPT, "n_predict": 4}).encode()
    head = ("POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            "Content-Length: %d\r\n\r\n" % len(body)).encode()

    def send_and_leave():
        s = srv.socket(timeout=60)
        s.sendall(head + body)
        time.sleep(0.3)  # the server has read it: its work runs, or waits for a thread (2 run at once)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()  # a reset

    threads = [threading.Thread(target=send_and_leave) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    deadline = time.monotonic() + 60
    while True:  # every connection closed and freed; 1: this stats request's own
        stats = srv.stats()
        if (stats["requests_inflight"], stats["connections_open"]) == (1, 1) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert (stats["requests_inflight"], stats["connections_open"]) == (1, 1), stats
    assert '"POST /completion" 499' in srv.log()  # at least one left after its dispatch
    # the server goes on: the same answer as before, and nothing leaks (ASan build: at exit)
    status, doc = post(srv, "/completion", {"prompt": PROMPT, "n_predict": 8, "temperature": 0})
    assert status == 200 and doc["tokens_predicted"] == 8, doc


def test_the_loop_never_parses_a_large_body_itself(start_server):
    """The loop thread's longest iteration (CPU time, so not the machine's load) stays far below what
    parsing 16 MB of JSON or tokenizing a 1 MB prompt costs (a few hundred ms here)."""
    srv = wait_ready(start_server(*BIG, "--debug-endpoints"))
    numbers = json.dumps({"prompt": PROMPT, "n_predict": 2, "padding": list(range(2000000))}).encode()
    assert raw_post(srv, "/completion", numbers)[0] == 200
    assert raw_post(srv, "/completion", padded({"prompt": PROMPT, "n_predict": 2}).encode())[0] == 200
    text = (WORDS * (MB // len(WORDS)))[:MB - 64]
    assert raw_post(srv, "/completion", json.dumps({"prompt": text}).encode())[0] == 400
    assert raw_post(srv, "/tokenize", json.dumps({"content": text}).encode())[0] == 200
    loop = srv.stats()["loop"]
    assert loop["cpu_ms_max"] < 40, loop
