"""Embeddings (/v1/embeddings, /embedding) and fill-in-the-middle (/infill) against the real
binary: the shapes clients parse, pooling and normalization, the refusals, and an embedding batch
running beside a streaming generation (both complete)."""
import base64
import json
import math
import os
import shutil
import struct
import subprocess
import threading

import pytest

from conftest import BIN, Server, need, shared_file
from serving_helpers import PROMPT, post, start, stream, wait_ready

NODE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node")
TEXTS = ["In the beginning God created the heaven and the earth.", "And God said", "Jesus wept."]


def norm(v):
    return math.sqrt(sum(x * x for x in v))


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b)) / (norm(a) * norm(b))


def close(a, b, tol=1e-4):
    return len(a) == len(b) and all(abs(x - y) <= tol for x, y in zip(a, b))


@pytest.fixture(scope="module")
def mean_srv():
    srv = start("--pooling", "mean", "--max-seq-tokens", "256")
    yield srv
    srv.check_clean_exit()


def test_openai_shape_normalized_and_the_forms_of_input(mean_srv):
    status, got = post(mean_srv, "/v1/embeddings", {"input": TEXTS, "model": "text-embedder"})
    assert status == 200, got
    assert got["object"] == "list" and got["model"] == "text-embedder"
    assert [d["index"] for d in got["data"]] == [0, 1, 2]
    assert all(d["object"] == "embedding" for d in got["data"])
    vecs = [d["embedding"] for d in got["data"]]
    assert len(vecs[0]) == 192  # the model's n_embd
    assert all(abs(norm(v) - 1) < 1e-4 for v in vecs)  # L2-normalized, as OpenAI's
    assert not close(vecs[0], vecs[1], 1e-2)
    # usage: the tokens /tokenize gives, BOS included (the vocabulary adds it)
    n = 0
    for t in TEXTS:
        status, toks = post(mean_srv, "/tokenize", {"content": t, "add_special": True})
        n += len(toks["tokens"])
    assert got["usage"] == {"prompt_tokens": n, "total_tokens": n}

    # one string alone; the same text as token ids; base64 of the same float32 values
    status, one = post(mean_srv, "/v1/embeddings", {"input": TEXTS[1]})
    assert status == 200 and close(one["data"][0]["embedding"], vecs[1])
    status, toks = post(mean_srv, "/tokenize", {"content": TEXTS[1], "add_special": True})
    ids = toks["tokens"]
    status, by_ids = post(mean_srv, "/v1/embeddings", {"input": ids})
    assert status == 200 and close(by_ids["data"][0]["embedding"], vecs[1])
    status, by_ids2 = post(mean_srv, "/v1/embeddings", {"input": [ids, ids[:2]]})
    assert status == 200 and len(by_ids2["data"]) == 2 and close(by_ids2["data"][0]["embedding"], vecs[1])
    status, b64 = post(mean_srv, "/v1/embeddings", {"input": TEXTS[1], "encoding_format": "base64"})
    raw = base64.b64decode(b64["data"][0]["embedding"])
    assert list(struct.unpack("<%df" % (len(raw) // 4), raw)) == [struct.unpack("<f", struct.pack("<f", x))[0]
                                                                 for x in one["data"][0]["embedding"]]

    # llama.cpp's /embedding: [{index, embedding: [[...]]}], `content` accepted
    status, native = post(mean_srv, "/embedding", {"content": TEXTS[1]})
    assert status == 200 and native[0]["index"] == 0 and len(native[0]["embedding"]) == 1
    assert close(native[0]["embedding"][0], vecs[1])
    status, raw_vec = post(mean_srv, "/embedding", {"content": TEXTS[1], "embd_normalize": -1})
    r = raw_vec[0]["embedding"][0]
    assert abs(norm(r) - 1) > 1e-3 and close([x / norm(r) for x in r], vecs[1], 1e-4)


def test_refusals(mean_srv):
    for body in ({}, {"input": ""}, {"input": []}, {"input": [1, 10 ** 9]}, {"input": "a", "encoding_format": "x"}):
        status, err = post(mean_srv, "/v1/embeddings", body)
        assert status == 400, (body, err)
    status, err = post(mean_srv, "/v1/embeddings", {"input": ["short", "And " * 300]})
    assert status == 400 and err["error"]["type"] == "exceed_context_size_error", err
    assert 0 < err["error"]["n_ctx"] < err["error"]["n_prompt_tokens"]
    status, _ = post(mean_srv, "/v1/embeddings", {"input": "still serving"})
    assert status == 200


def test_pooling_none_last_cls_agree_with_the_per_token_states():
    """Without pooling (the default for a model whose metadata names none, as llama.cpp's),
    /embedding gives every token's state and /v1/embeddings refuses; last and cls pool the last
    and first of those rows, normalized."""
    srv = start()
    try:
        status, err = post(srv, "/v1/embeddings", {"input": PROMPT})
        assert status == 400 and "not OAI compatible" in err["error"]["message"]
        status, native = post(srv, "/embedding", {"content": PROMPT})
        assert status == 200
        rows = native[0]["embedding"]
        status, toks = post(srv, "/tokenize", {"content": PROMPT, "add_special": True})
        assert len(rows) == len(toks["tokens"]) and all(len(r) == 192 for r in rows)
    finally:
        srv.check_clean_exit()
    for pooling, row in (("last", rows[-1]), ("cls", rows[0])):
        srv = start("--pooling", pooling)
        try:
            status, got = post(srv, "/v1/embeddings", {"input": PROMPT})
            assert status == 200
            assert close(got["data"][0]["embedding"], [x / norm(row) for x in row], 1e-4), pooling
        finally:
            srv.check_clean_exit()


def test_embeddings_beside_a_streaming_generation(mean_srv):
    """A batch of inputs (more than the handler keeps in the scheduler at once) while a stream
    generates: both complete, and the vectors are those computed alone."""
    status, alone = post(mean_srv, "/v1/embeddings", {"input": TEXTS})
    events = []

    def generate():
        events.extend(stream(mean_srv, "/completion", {"prompt": PROMPT, "n_predict": 48, "temperature": 0}))

    t = threading.Thread(target=generate)
    t.start()
    batch = TEXTS * 4
    status, got = post(mean_srv, "/v1/embeddings", {"input": batch})
    t.join(60)
    assert not t.is_alive()
    assert status == 200 and len(got["data"]) == len(batch)
    # the same vectors up to the rounding of other batch shapes (more rows take math/matmul.h's
    # tiled path): each nearest to its own text's
    ref = [d["embedding"] for d in alone["data"]]
    for i, d in enumerate(got["data"]):
        sims = [cosine(d["embedding"], r) for r in ref]
        assert d["index"] == i and sims[i % 3] > 0.999 and sims[i % 3] == max(sims), sims
    chunks = [json.loads(e) for e in events]
    assert chunks[-1]["stop"] and chunks[-1]["tokens_predicted"] == 48
    # no KV kept for embeddings: what is cached is the generation's prompt cache at most
    status, health = mean_srv.json("GET", "/health?detail=1")
    assert health["kv_cells_total"] - health["kv_cells_free"] <= len(chunks) + 8


def test_openai_node_sdk_embeddings_create():
    node = shutil.which("node")
    need(node, "node is not installed (scripts/install-deps installs it)")
    need(os.path.isdir(os.path.join(NODE_DIR, "node_modules", "openai")),
         "openai is not installed: (cd test/e2e/node && npm ci)")
    srv = start("--pooling", "mean")
    try:
        out = subprocess.run([node, "embeddings.mjs", "http://127.0.0.1:%d/v1" % srv.port], cwd=NODE_DIR,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr + srv.log()
        got = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        srv.check_clean_exit()
    # the SDK asks for base64 by default and decodes it; float on request: the same vectors
    assert got["n"] == 2 and got["dims"] == [192, 192]
    assert all(abs(n - 1) < 1e-4 for n in got["norms"])
    assert got["same_as_float"] and got["usage"]["prompt_tokens"] > 0
    assert got["model"] == "kjv-embed"


def test_infill_with_fim_tokens_and_without(tmp_path):
    """A model on refact's vocabulary (StarCoder's <fim_prefix>, <fim_suffix>, <fim_middle> and
    <reponame>, found by their text): /infill answers in /completion's shape, streaming too; the
    default model has no FIM tokens: 400."""
    model = str(tmp_path / "fim.gguf")
    out = subprocess.run([BIN, "mkmodel", "--out", model, "--vocab", shared_file("vocab", "ggml-vocab-refact.gguf"),
                          "--n-embd", "64", "--n-layer", "2", "--n-head", "4", "--n-head-kv", "2", "--n-ff", "128",
                          "--type", "q8_0", "--tied", "--ctx", "2048"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    srv = wait_ready(Server(["--model", model]))
    try:
        body = {"input_prefix": "def add(a, b):\n    ", "input_suffix": "\n\nprint(add(1, 2))\n",
                "input_extra": [{"filename": "util.py", "text": "def sub(a, b):\n    return a - b\n"}],
                "prompt": "return", "n_predict": 6, "temperature": 0}
        status, got = post(srv, "/infill", body)
        assert status == 200, got
        assert got["tokens_predicted"] <= 6 and got["stop"] is True and "content" in got
        # the prompt holds the parts and the markers: <reponame> "myproject\n", the snippet
        # separator before util.py's text (no file separator in this vocabulary), then
        # <fim_prefix> prefix prompt <fim_suffix> suffix <fim_middle>
        n_parts = 0
        for text in ("myproject\n", "\n\n--- snippet ---\n\n", body["input_extra"][0]["text"], body["input_prefix"],
                     body["prompt"], body["input_suffix"]):
            status, toks = post(srv, "/tokenize", {"content": text, "parse_special": False})
            n_parts += len(toks["tokens"])
        assert got["tokens_evaluated"] == n_parts + 4
        events = stream(srv, "/infill", body)
        chunks = [json.loads(e) for e in events]
        assert chunks[-1]["stop"] and "".join(c.get("content", "") for c in chunks) == got["content"]
        status, err = post(srv, "/infill", {"input_prefix": "x"})
        assert status == 400 and "input_suffix" in err["error"]["message"]
    finally:
        srv.check_clean_exit()
    srv = start()
    try:
        status, err = post(srv, "/infill", {"input_prefix": "a", "input_suffix": "b"})
        assert status == 400 and "Infill is not supported by this model" in err["error"]["message"], err
    finally:
        srv.check_clean_exit()
