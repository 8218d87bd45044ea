"""Serving a recurrent model (Mamba, one state per sequence, no partial removal): concurrent greedy
requests and n choices give what the requests give alone."""
import pytest

from conftest import Server
from serving_helpers import PROMPTS, greedy, metrics, post, run_concurrently, shared_model, wait_ready


@pytest.fixture(scope="module")
def srv():
    s = wait_ready(Server(["-m", shared_model("mamba-spm-q8_0.gguf"), "--batch-tokens", "24"]))
    yield s
    s.check_clean_exit()


def test_mamba_props_and_memory_kind(srv):
    status, props = srv.json("GET", "/props")
    assert status == 200 and props["model"] == "mamba-spm-q8_0.gguf"
    assert metrics(srv)["uvlm_kv_cells_capacity"] == 64  # one recurrent state per sequence id
    assert "recurrent" in srv.log()


def test_mamba_concurrent_and_n_choices_equal_alone(srv):
    reqs = [greedy(p, n_predict=6, cache_prompt=False) for p in PROMPTS[:4]]
    alone = [post(srv, "/completion", r)[1]["content"] for r in reqs]
    together = run_concurrently([lambda r=r: post(srv, "/completion", r)[1]["content"] for r in reqs])
    assert together == alone and len(set(alone)) > 1
    status, body = post(srv, "/completion", dict(reqs[0], n=3))
    assert status == 200 and [c["content"] for c in body] == [alone[0]] * 3


def test_mamba_prompt_cache_extends_a_whole_prefix(srv):
    # a recurrent state is reused only when a cached sequence is a whole prefix of the new prompt
    _, first = post(srv, "/completion", greedy("And God said", n_predict=3))
    _, second = post(srv, "/completion", greedy("And God said" + first["content"] + " and", n_predict=3))
    assert second["tokens_cached"] > 0
    _, fresh = post(srv, "/completion", greedy("And God said" + first["content"] + " and", n_predict=3,
                                                cache_prompt=False))
    assert fresh["tokens_cached"] == 0 and fresh["content"] == second["content"]


def test_mamba_prompt_cache_reuses_an_exact_prompt(srv):
    # the state before the prompt's last token is kept: the same prompt again runs one token
    req = greedy("Blessed are the meek", n_predict=8)
    _, fresh = post(srv, "/completion", dict(req, cache_prompt=False))
    _, first = post(srv, "/completion", req)
    _, again = post(srv, "/completion", req)
    assert first["content"] == fresh["content"] == again["content"]
    assert again["tokens_evaluated"] == first["tokens_evaluated"] > 2
    assert again["tokens_cached"] == again["tokens_evaluated"] - 1


def test_mamba_more_requests_than_states_take_turns():
    # 2 states for 5 concurrent generations: the waiting requests do not wait for whole
    # generations to end; running sequences are saved and resumed in turn (time-slicing), and
    # every output is the one the request gives alone
    srv = wait_ready(Server(["-m", shared_model("mamba-spm-q8_0.gguf"), "--batch-tokens", "24",
                             "--max-seqs-recurrent", "2"]))
    try:
        assert metrics(srv)["uvlm_kv_cells_capacity"] == 2
        reqs = [greedy(p, n_predict=40, cache_prompt=False) for p in PROMPTS[:5]]
        alone = [post(srv, "/completion", r)[1]["content"] for r in reqs]
        assert metrics(srv)["uvlm_preemptions_total"] == 0
        together = run_concurrently([lambda r=r: post(srv, "/completion", r)[1] for r in reqs])
        assert [b["content"] for b in together] == alone and len(set(alone)) == 5
        assert all(b["tokens_predicted"] == 40 for b in together)
        m = metrics(srv)
        assert m["uvlm_preemptions_total"] > 0
        assert m["uvlm_preempted_sequences"] == 0 and m["uvlm_kv_cells_used"] == 0
        # with the prompt cache on, states also hold cache entries (evicted for waiting work)
        cached = run_concurrently([lambda r=r: post(srv, "/completion", dict(r, cache_prompt=True))[1]
                                   for r in reqs])
        assert [b["content"] for b in cached] == alone
        assert metrics(srv)["uvlm_preemptions_total"] > m["uvlm_preemptions_total"]
    finally:
        srv.check_clean_exit()
