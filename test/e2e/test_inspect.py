"""uvlm inspect: what each shared model and the shipped model are (architecture, shapes, tensor types,
tokenizer, chat template family, context) from metadata alone, and the memory a --kv-tokens takes;
and the server's load check, which uses the same estimate: a load is refused, naming the sizes,
exactly when the estimate exceeds the available memory (set with UVLM_MEMORY_AVAILABLE)."""
import os
import re
import subprocess

import pytest

from conftest import BIN, ROOT, Server

SHARED = os.environ.get("UVLM_SHARED", os.path.join(ROOT, "..", "shared"))
SHIPPED = os.path.join(ROOT, "models", "kjv-tiny-q8_0.gguf")

# ../shared/README.md's table: arch, n_embd, layers, heads, kv heads, head dim, n_ff, vocab,
# tokenizer model, the tensor types present, chat template family ("none": the file has no
# template; None: not checked, the family is not one uvlm detects)
MODELS = {
    "llama-spm-f16": ("llama", 256, 4, 8, 4, 32, 768, 32000, "llama", {"f16", "f32"}, "none"),
    "llama-spm-q8_0": ("llama", 256, 4, 8, 4, 32, 768, 32000, "llama", {"q8_0", "f32"}, "none"),
    "llama-spm-q4_0": ("llama", 256, 4, 8, 4, 32, 768, 32000, "llama", {"q4_0", "q6_K", "f32"}, "none"),
    "llama-spm-q4_k_m": ("llama", 256, 4, 8, 4, 32, 768, 32000, "llama", {"q4_K", "q6_K", "f32"}, "none"),
    "llama3-bpe-q8_0": ("llama", 64, 2, 4, 2, 16, 256, 128256, "gpt2", {"q8_0", "f32"}, "none"),
    "qwen2-q8_0": ("qwen2", 64, 2, 4, 2, 16, 256, 151936, "gpt2", {"q8_0", "f32"}, "chatml"),
    "llama32-rope-q8_0": ("llama", 64, 3, 4, 2, 16, 256, 128256, "gpt2", {"q8_0", "f32"}, "none"),
    "qwen3-q8_0": ("qwen3", 64, 3, 4, 2, 32, 256, 151936, "gpt2", {"q8_0", "f32"}, "chatml"),
    "gemma3-q8_0": ("gemma3", 64, 6, 4, 2, 32, 256, 262144, "gemma4", {"q8_0", "f32"}, None),
    "phi3-q8_0": ("phi3", 128, 2, 4, 2, 32, 384, 32064, "llama", {"q8_0", "f32"}, "phi3"),
    "qwen35-q8_0": ("qwen35", 64, 4, 4, 2, 32, 256, 151936, "gpt2", {"q8_0", "f32"}, "chatml"),
    "kjv-tiny-q8_0": ("llama", 192, 6, 6, 2, 32, 512, 32000, "llama", {"q8_0", "f32"}, "none"),
}


def inspect(path, *args, env=None):
    r = subprocess.run([BIN, "inspect", path, *args], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, **(env or {})))
    assert r.returncode == 0, r.stderr
    return dict(line.split(": ", 1) for line in r.stdout.splitlines())


def memory_bytes(info):
    return {k: int(v) for k, v in re.findall(r"(\w+) (\d+)", info["memory bytes"])}


def model_path(name):
    if name == "kjv-tiny-q8_0":
        return SHIPPED
    path = os.path.join(SHARED, "models", name + ".gguf")
    if not os.path.exists(path):
        pytest.skip("shared test data missing: " + path)
    return path


@pytest.mark.parametrize("name", sorted(MODELS))
def test_inspect_describes_the_model(name):
    arch, n_embd, layers, heads, kv_heads, head_dim, n_ff, vocab, tok_model, types, chat = MODELS[name]
    path = model_path(name)
    info = inspect(path)
    assert info["architecture"] == arch
    shape = "n_embd %d, layers %d, heads %d, kv heads %d, head dim %d, n_ff %d, vocab %d" % (
        n_embd, layers, heads, kv_heads, head_dim, n_ff, vocab)
    assert info["shape"] == shape
    assert {t.split()[1] for t in info["tensor types"].split(", ")} == types
    assert info["tokenizer"].startswith(tok_model + ", ") and info["tokenizer"].endswith(" %d tokens" % vocab)
    if chat == "none":
        assert info["chat template"].startswith("none")
    elif chat:
        assert info["chat template"] == chat
    assert "eos" in info["special tokens"] and info["end of generation"] != "none"
    assert info["file"].startswith(path) and "%d bytes" % os.path.getsize(path) in info["file"]
    mem = memory_bytes(info)
    assert mem["weights"] == os.path.getsize(path)  # the file is read whole
    assert mem["total"] == mem["weights"] + mem["kv"] + mem["buffers"]
    assert info["available"].endswith("fits")


@pytest.mark.parametrize("name", ["kjv-tiny-q8_0", "llama3-bpe-q8_0", "qwen3-q8_0", "qwen35-q8_0"])
def test_kv_grows_with_kv_tokens_by_the_cells_size(name):
    """K and V in F16 per attention layer and cell, plus 20 bytes of a cell's bookkeeping (64 sequences)."""
    arch, n_embd, layers, heads, kv_heads, head_dim = MODELS[name][:6]
    attn_layers = 1 if name == "qwen35-q8_0" else layers
    path = model_path(name)
    a, b = inspect(path, "--kv-tokens", "1024"), inspect(path, "--kv-tokens", "5120")
    cell = attn_layers * 2 * kv_heads * head_dim * 2 + 20
    assert memory_bytes(b)["kv"] - memory_bytes(a)["kv"] == 4096 * cell
    assert "(5120 cells" in b["memory at --kv-tokens 5120 --batch-tokens 512"]
    assert memory_bytes(b)["weights"] == memory_bytes(a)["weights"]


def test_recurrent_and_sliding_window_shapes():
    info = inspect(model_path("qwen35-q8_0"))
    assert info["layers"].startswith("1 attention, 3 recurrent")
    assert "(4096 cells, 64 recurrent states)" in info["memory at --kv-tokens 4096 --batch-tokens 512"]
    info = inspect(model_path("gemma3-q8_0"))
    assert info["sliding window"] == "32 positions on 5 of 6 attention layers"


def test_sliding_window_layers_keep_a_window_per_sequence():
    """gemma3's windowed layers hold a window per sequence and a batch (64 sequences x 32 + 512):
    beyond that, more --kv-tokens only add cells of its one full-attention layer."""
    path = model_path("gemma3-q8_0")
    a, b = inspect(path, "--kv-tokens", "5120"), inspect(path, "--kv-tokens", "9216")
    full_cell = 1 * 2 * 2 * 32 * 2 + 20
    assert memory_bytes(b)["kv"] - memory_bytes(a)["kv"] == 4096 * full_cell
    assert "(9216 cells, 2560 in the sliding-window layers)" in b["memory at --kv-tokens 9216 --batch-tokens 512"]
    path = os.path.join(SHARED, "models", "mamba-spm-q8_0.gguf")
    if os.path.exists(path):
        info = inspect(path)
        assert info["shape"] == "n_embd 128, layers 4, vocab 32000"
        assert info["layers"].startswith("0 attention, 4 recurrent (inner 256, state 16, conv 4")


def test_context_is_capped_by_kv_tokens():
    info = inspect(SHIPPED, "--kv-tokens", "300")
    assert info["context"] == "1024 trained; a sequence gets 300 at --kv-tokens 300"


def test_vocabulary_file_and_errors():
    vocab = os.path.join(SHARED, "vocab", "ggml-vocab-qwen35.gguf")
    if os.path.exists(vocab):
        info = inspect(vocab)
        assert info["tensor types"] == "none" and info["memory"].startswith("no weights")
        assert info["tokenizer"] == "gpt2, pre 'qwen35', 151936 tokens"
    r = subprocess.run([BIN, "inspect"], capture_output=True, timeout=30)
    assert r.returncode == 2
    r = subprocess.run([BIN, "inspect", SHIPPED, "--kv-tokens", "0"], capture_output=True, timeout=30)
    assert r.returncode == 2
    r = subprocess.run([BIN, "inspect", "/nonexistent.gguf"], capture_output=True, timeout=30)
    assert r.returncode == 1 and b"/nonexistent.gguf" in r.stderr


def serve(args, env):
    return subprocess.run([BIN, "--port", "0", *args], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, **env))


def test_server_refuses_exactly_what_inspect_says_does_not_fit():
    """The server checks inspect's estimate before it commits memory: available = the estimate
    loads, one byte less is refused with every size named."""
    args = ["--kv-tokens", "2048", "--batch-tokens", "64"]
    total = memory_bytes(inspect(SHIPPED, *args))["total"]
    info = inspect(SHIPPED, *args, env={"UVLM_MEMORY_AVAILABLE": str(total - 1)})
    assert info["available"].endswith("does not fit, the server refuses it")
    p = serve(args, {"UVLM_MEMORY_AVAILABLE": str(total - 1)})
    assert p.returncode == 1, p.stderr
    assert re.search(r"the model needs [\d.]+ MiB \(weights 9\.3 MiB \+ KV [\d.]+ MiB for 2048 cells \+ buffers "
                     r"[\d.]+ MiB\), more than the [\d.]+ MiB the machine has available", p.stderr), p.stderr
    srv = Server(args, env={"UVLM_MEMORY_AVAILABLE": str(total)})
    try:
        assert srv.json("GET", "/health")[0] == 200
    finally:
        srv.check_clean_exit()


def test_weights_beyond_the_available_memory_are_refused():
    """A model whose weights alone exceed what the machine has: refused before the file is read,
    naming the weights and advising a smaller model."""
    path = model_path("llama-spm-f16")
    args = ["-m", path, "--kv-tokens", "16", "--batch-tokens", "16"]
    mem = memory_bytes(inspect(path, "--kv-tokens", "16", "--batch-tokens", "16"))
    assert mem["weights"] > mem["kv"] + mem["buffers"]
    p = serve(args, {"UVLM_MEMORY_AVAILABLE": str(mem["weights"] // 2)})
    assert p.returncode == 1, p.stderr
    assert "(weights 38.0 MiB + KV" in p.stderr and "a smaller model or a smaller weight type" in p.stderr, p.stderr
