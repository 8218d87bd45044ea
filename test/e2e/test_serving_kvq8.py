"""Q8_0 KV cells (--kv-type q8_0) through HTTP: the flags and what they change (bytes per cell in
/props and /metrics, --kv-bytes giving ~1.9x the cells of f16 in the same memory), and the
serving mechanics on Q8_0 cells as on F16 ones: concurrent greedy requests, n choices sharing a
prompt's cells, the prompt cache, and preemption (a sequence's cells saved to the host and put
back) each giving what the request gives alone, on the default model and on Gemma 3's split
memory (a windowed pool beside the full-attention one); a recurrent model (Mamba) has no cells
and serves as before.

Steps stay under 32 tokens (--batch-tokens 24), as in test_serving_engine.py: below that every
row is computed alone, so "together == alone" checks the scheduler and the memory, not the
rounding of the matmuls."""
import subprocess

import pytest

from conftest import BIN, Server
from serving_helpers import PROMPTS, greedy, metrics, post, run_concurrently, shared_model, start, wait_ready


@pytest.fixture(scope="module")
def srv():
    s = start("--kv-type", "q8_0", "--batch-tokens", "24", "--kv-tokens", "1024")
    yield s
    s.check_clean_exit()


def test_props_and_metrics_count_bytes(srv):
    status, props = srv.json("GET", "/props")
    assert status == 200 and props["kv_type_k"] == "q8_0" and props["kv_type_v"] == "q8_0"
    assert props["kv_tokens"] == 1024
    f16 = start("--batch-tokens", "24", "--kv-tokens", "1024")
    try:
        status, p16 = f16.json("GET", "/props")
        assert status == 200 and p16["kv_type_k"] == "f16"
        # the same cells: K/V bytes 17/32 of F16's (the bookkeeping is alike)
        ratio = props["kv_bytes"] / p16["kv_bytes"]
        assert 0.5 < ratio < 0.58, (props["kv_bytes"], p16["kv_bytes"])
    finally:
        f16.check_clean_exit()
    m = metrics(srv)
    assert m["uvlm_kv_bytes_capacity"] == props["kv_bytes"]
    post(srv, "/completion", greedy(PROMPTS[0], n_predict=4))
    m = metrics(srv)
    assert 0 < m["uvlm_kv_bytes_used"] < m["uvlm_kv_bytes_capacity"]


def test_kv_bytes_holds_more_q8_0_cells():
    """--kv-bytes is memory: the same bytes hold ~1.9x the cells at q8_0 (34 bytes per 32
    values against 64)."""
    cells = {}
    for t in ("f16", "q8_0"):
        s = start("--kv-type", t, "--kv-bytes", "8M", "--batch-tokens", "24")
        try:
            status, props = s.json("GET", "/props")
            assert status == 200 and props["kv_bytes"] <= 8 << 20
            cells[t] = props["kv_tokens"]
        finally:
            s.check_clean_exit()
    assert 1.8 < cells["q8_0"] / cells["f16"] < 1.9, cells


def test_per_k_and_v_types_and_bad_values():
    s = start("--kv-type-v", "q8_0", "--batch-tokens", "24", "--kv-tokens", "256")
    try:
        status, props = s.json("GET", "/props")
        assert status == 200 and (props["kv_type_k"], props["kv_type_v"]) == ("f16", "q8_0")
        status, body = post(s, "/completion", greedy(PROMPTS[1], n_predict=6))
        assert status == 200 and body["tokens_predicted"] == 6
    finally:
        s.check_clean_exit()
    p = subprocess.run([BIN, "--kv-type", "q4_0"], capture_output=True, text=True, timeout=10)
    assert p.returncode == 2 and "kv-type" in p.stderr


def test_concurrent_and_n_choices_equal_alone(srv):
    reqs = [greedy(p, n_predict=16, cache_prompt=False, ignore_eos=True) for p in PROMPTS]
    alone = [post(srv, "/completion", r)[1]["content"] for r in reqs]
    together = run_concurrently([lambda r=r: post(srv, "/completion", r)[1]["content"] for r in reqs])
    assert together == alone and len(set(alone)) > 1
    status, body = post(srv, "/completion", dict(reqs[2], n=3))
    assert status == 200 and [c["content"] for c in body] == [alone[2]] * 3


def test_prompt_cache_reuses_q8_0_cells(srv):
    prompt = PROMPTS[3] + ", and the LORD spake unto Moses, saying"
    _, first = post(srv, "/completion", greedy(prompt, n_predict=12))
    _, again = post(srv, "/completion", greedy(prompt, n_predict=12))
    _, fresh = post(srv, "/completion", greedy(prompt, n_predict=12, cache_prompt=False))
    assert again["tokens_cached"] == again["tokens_evaluated"] - 1 and fresh["tokens_cached"] == 0
    assert first["content"] == again["content"] == fresh["content"]


def test_preemption_keeps_outputs():
    srv = start("--kv-type", "q8_0", "--kv-tokens", "64", "--batch-tokens", "24")
    try:
        reqs = [greedy(p, n_predict=24, cache_prompt=False, ignore_eos=True) for p in PROMPTS[:4]]
        alone = [post(srv, "/completion", r)[1]["content"] for r in reqs]
        assert metrics(srv)["uvlm_preemptions_total"] == 0
        together = run_concurrently([lambda r=r: post(srv, "/completion", r) for r in reqs])
        assert [s for s, _ in together] == [200] * 4, together
        assert metrics(srv)["uvlm_preemptions_total"] > 0
        assert [b["content"] for _, b in together] == alone
    finally:
        srv.check_clean_exit()


def serve_shared(model, *args):
    return wait_ready(Server(["-m", shared_model(model), "--batch-tokens", "24", "--kv-type", "q8_0", *args]))


def test_gemma3_refuses_q8_0_cells():
    """Sliding-window models keep F16 cells: with Q8_0 ones in the windowed pool a sequence beside
    others does not get the numbers it gets alone, so the server refuses to start, saying why."""
    for flag in ("--kv-type", "--kv-type-v"):
        p = subprocess.run([BIN, "-m", shared_model("gemma3-q8_0.gguf"), flag, "q8_0", "--port", "0"],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 2, p.stderr
        assert "sliding-window" in p.stderr and "--kv-type f16" in p.stderr, p.stderr


def test_recurrent_model_ignores_the_cell_type():
    srv = serve_shared("mamba-spm-q8_0.gguf", "--kv-tokens", "512")
    try:
        reqs = [greedy(p, n_predict=8, cache_prompt=False) for p in PROMPTS[:3]]
        alone = [post(srv, "/completion", r)[1]["content"] for r in reqs]
        together = run_concurrently([lambda r=r: post(srv, "/completion", r)[1]["content"] for r in reqs])
        assert together == alone
    finally:
        srv.check_clean_exit()
