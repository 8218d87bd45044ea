"""GET /metrics for Prometheus: a strictly valid exposition (prom_format.py checks what the format
and `promtool check metrics` require), per-request histograms that count what happened, KV cells
split between live sequences and the prompt cache, the process's figures, llama.cpp's names on
request, and conf/grafana-uvlm.json querying only metrics that exist."""
import json
import math
import os
import re
import threading
import time

import pytest

from conftest import ROOT
from prom_format import check, parse
from serving_helpers import PROMPT, greedy, metrics, post, start, stream


def scrape(srv):
    status, headers, data = srv.request("GET", "/metrics")
    assert status == 200
    assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    return data.decode()


def exercise(srv):
    """Some of everything: a plain completion, a stream, n choices, a stop string, a 400."""
    assert post(srv, "/completion", greedy(n_predict=6))[0] == 200
    assert stream(srv, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    assert post(srv, "/v1/completions", {"prompt": PROMPT, "max_tokens": 3, "n": 2, "temperature": 0})[0] == 200
    assert post(srv, "/completion", greedy(n_predict=16, stop=["Thou"]))[0] == 200
    assert post(srv, "/completion", {"prompt": PROMPT, "n_predict": "x"})[0] == 400


@pytest.fixture(scope="module")
def llamacpp_srv():
    s = start("--max-n", "4", "--metrics-names", "llamacpp")
    exercise(s)
    yield s
    s.check_clean_exit()


# --- the checker itself fails on what it must refuse ----------------------------------------------

GOOD = "# HELP a_total A.\n# TYPE a_total counter\na_total 1\n"
HIST = ('# HELP h H.\n# TYPE h histogram\nh_bucket{le="0.1"} 1\nh_bucket{le="1"} 3\nh_bucket{le="+Inf"} 4\n'
        'h_sum 2.5\nh_count 4\n')


@pytest.mark.parametrize("text,what", [
    ("# HELP g_total G.\n# TYPE g_total gauge\ng_total 1\n", "gauge's name"),
    ("# HELP c C.\n# TYPE c counter\nc 1\n", "counter's name"),
    ("# HELP c_total C.\n# TYPE c_total counter\nc_total -1\n", "a counter at"),
    ("# TYPE a_total counter\n# HELP a_total A.\na_total 1\n", "TYPE before HELP"),
    (GOOD + GOOD, "twice"),
    (GOOD + "\n", "blank line"),
    (GOOD[:-1], "newline"),
    (GOOD + "a_total{x=\"1\"} 2 1700000000\n", "unreadable"),
    ('# HELP g G.\n# TYPE g gauge\ng{x="a\\q"} 1\n', "escape"),
    ('# HELP g G.\n# TYPE g gauge\ng{x="1",x="2"} 1\n', "label twice"),
    ('# HELP g G.\n# TYPE g gauge\ng{x="1"} 1\ng{x="1"} 2\n', "duplicate"),
    ("# HELP g_ms G.\n# TYPE g_ms gauge\ng_ms 1\n", "base units"),
    ("# HELP a:b A.\n# TYPE a:b gauge\na:b 1\n", "reserved"),
    (HIST.replace('le="1"', 'le="0.05"'), "le"),
    (HIST.replace('h_bucket{le="1"} 3', 'h_bucket{le="1"} 0'), "cumulative"),
    (HIST.replace('h_bucket{le="+Inf"} 4\n', ""), "+Inf"),
    (HIST.replace("h_count 4", "h_count 5"), "_count"),
    (HIST.replace("h_sum 2.5\n", ""), "missing _sum"),
    (HIST.replace('h_bucket{le="0.1"} 1', 'h_bucket 1'), "without le"),
    ("# HELP h_bucket H.\n# TYPE h_bucket histogram\nh_bucket_bucket{le=\"+Inf\"} 0\nh_bucket_sum 0\n"
     "h_bucket_count 0\n", "histogram's name"),
    ('# HELP g G.\n# TYPE g gauge\ng 1\nother 2\n', "outside its family"),
])
def test_the_checker_refuses_what_promtool_would(text, what):
    errors = check(text)
    assert errors and any(what in e for e in errors), errors


def test_the_checker_accepts_a_valid_exposition():
    assert check(GOOD + HIST + '# HELP g G "q" \\\\ \\n.\n# TYPE g gauge\ng{a="x\\"y\\\\",b="\\n"} NaN\n') == []


# --- the server's exposition ---------------------------------------------------------------------

def test_exposition_is_valid_with_llamacpp_names(llamacpp_srv):
    text = scrape(llamacpp_srv)
    assert check(text, allow_colon_prefixes=("llamacpp:",)) == []
    fams = parse(text)
    names = {"llamacpp:prompt_tokens_total", "llamacpp:prompt_seconds_total", "llamacpp:tokens_predicted_total",
             "llamacpp:tokens_predicted_seconds_total", "llamacpp:n_decode_total", "llamacpp:prompt_tokens_seconds",
             "llamacpp:predicted_tokens_seconds", "llamacpp:kv_cache_usage_ratio", "llamacpp:kv_cache_tokens",
             "llamacpp:requests_processing", "llamacpp:requests_deferred", "llamacpp:n_busy_slots_per_decode"}
    assert names <= set(fams)
    m = metrics(llamacpp_srv)
    assert m["llamacpp:prompt_tokens_total"] == m["uvlm_prompt_tokens_total"] > 0
    assert m["llamacpp:tokens_predicted_total"] == m["uvlm_generated_tokens_total"] > 0
    assert m["llamacpp:n_decode_total"] == m["uvlm_steps_total"] > 0
    assert m["llamacpp:kv_cache_tokens"] == m["uvlm_kv_cells_used"] > 0
    assert m["llamacpp:kv_cache_usage_ratio"] == m["uvlm_kv_cells_used"] / m["uvlm_kv_cells_capacity"]
    assert m["llamacpp:n_busy_slots_per_decode"] == m["uvlm_step_sequences_total"] / m["uvlm_steps_total"] >= 1
    assert m["llamacpp:predicted_tokens_seconds"] > 0 and m["llamacpp:requests_processing"] == 0


def test_default_names_pass_every_lint_rule():
    srv = start()
    try:
        assert check(scrape(srv)) == []  # before any request too: empty families, zero histograms
        exercise(srv)
        text = scrape(srv)
        assert check(text) == []  # no ':' anywhere, every rule as promtool lints it
        assert "llamacpp:" not in text
        fams = parse(text)
        assert fams["uvlm_kv_cells_capacity"]["type"] == "gauge"
        assert "uvlm_kv_cells_total" not in fams
        for name in ("uvlm_time_to_first_token_seconds", "uvlm_inter_token_latency_seconds",
                     "uvlm_e2e_request_latency_seconds", "uvlm_request_queue_time_seconds",
                     "uvlm_request_prefill_time_seconds", "uvlm_request_decode_time_seconds",
                     "uvlm_request_prompt_tokens", "uvlm_request_generation_tokens", "uvlm_step_seconds"):
            assert fams[name]["type"] == "histogram", name
            assert len([s for s in fams[name]["samples"] if s[0].endswith("_bucket")]) >= 10, name
    finally:
        srv.check_clean_exit()


def test_request_histograms_count_what_happened():
    srv = start("--max-n", "4")
    try:
        _, a = post(srv, "/completion", greedy(n_predict=5))
        _, b = post(srv, "/v1/completions", {"prompt": PROMPT, "max_tokens": 3, "n": 2, "temperature": 0})
        _, c = post(srv, "/completion", greedy(n_predict=16, stop=["Thou"]))
        assert post(srv, "/completion", {"prompt": PROMPT, "n_predict": "x"})[0] == 400
        assert a["stop_type"] == "limit" and c["stop_type"] == "word"
        m = metrics(srv)
        assert m['uvlm_requests_finished_total{reason="limit"}'] == 1 + 2
        assert m['uvlm_requests_finished_total{reason="word"}'] == 1
        assert m['uvlm_requests_finished_total{reason="eos"}'] == 0
        assert m['uvlm_requests_finished_total{reason="context"}'] == 0
        for name in ("uvlm_time_to_first_token_seconds", "uvlm_e2e_request_latency_seconds",
                     "uvlm_request_queue_time_seconds", "uvlm_request_prefill_time_seconds",
                     "uvlm_request_decode_time_seconds", "uvlm_request_prompt_tokens",
                     "uvlm_request_generation_tokens"):
            assert m[name + "_count"] == 3, name
            assert m[name + '_bucket{le="+Inf"}'] == 3, name
        prompt_tokens = a["tokens_evaluated"] + b["usage"]["prompt_tokens"] + c["tokens_evaluated"]
        generated = a["tokens_predicted"] + b["usage"]["completion_tokens"] + c["tokens_predicted"]
        assert m["uvlm_request_prompt_tokens_sum"] == prompt_tokens
        assert m["uvlm_request_generation_tokens_sum"] == generated == m["uvlm_generated_tokens_total"]
        # a gap between every two tokens of a choice: 4 + 2 x 2 + (c's - 1)
        assert m["uvlm_inter_token_latency_seconds_count"] == 4 + 2 * 2 + c["tokens_predicted"] - 1
        e2e, ttft = m["uvlm_e2e_request_latency_seconds_sum"], m["uvlm_time_to_first_token_seconds_sum"]
        assert 0 < ttft < e2e < 30
        parts = sum(m["uvlm_request_%s_time_seconds_sum" % p] for p in ("queue", "prefill", "decode"))
        assert math.isclose(parts, e2e, rel_tol=1e-6)
    finally:
        srv.check_clean_exit()


def test_slow_step_shows_in_queue_time_and_live_cells():
    """A step held for 1.5 s: the request in it holds live cells meanwhile; one arriving during it
    waits in the queue; both first tokens come after more than a second."""
    srv = start("--debug-endpoints")
    try:
        assert srv.json("POST", "/debug/slow-step?ms=1500") == (200, {"slow_step_ms": 1500})
        results = []
        run = lambda: results.append(post(srv, "/completion", greedy(n_predict=3)))
        first = threading.Thread(target=run)
        first.start()
        time.sleep(0.3)
        second = threading.Thread(target=run)
        second.start()
        time.sleep(0.3)
        during = metrics(srv)
        first.join(30)
        second.join(30)
        assert [r[0] for r in results] == [200, 200]
        assert during["uvlm_active_requests"] == 1 and during["uvlm_queue_length"] == 1
        assert during["uvlm_kv_cells_live"] >= results[0][1]["tokens_evaluated"]
        assert during["uvlm_kv_cells_live"] + during["uvlm_kv_cells_cached"] == during["uvlm_kv_cells_used"]
        after = metrics(srv)
        assert after["uvlm_kv_cells_live"] == 0
        assert after["uvlm_kv_cells_cached"] == after["uvlm_kv_cells_used"] > 0
        assert after['uvlm_request_queue_time_seconds_bucket{le="0.5"}'] == 1  # the second waited ~1.2 s
        assert after['uvlm_time_to_first_token_seconds_bucket{le="1"}'] == 0
        assert after["uvlm_time_to_first_token_seconds_count"] == 2
    finally:
        srv.check_clean_exit()


def test_process_metrics_match_proc(llamacpp_srv):
    m = metrics(llamacpp_srv)
    pid = llamacpp_srv.proc.pid
    with open("/proc/%d/status" % pid) as f:
        rss = int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1)) * 1024
    assert abs(m["process_resident_memory_bytes"] - rss) < 0.2 * rss
    assert m["process_virtual_memory_bytes"] >= m["process_resident_memory_bytes"]
    assert m["process_cpu_seconds_total"] > 0
    assert time.time() - 300 < m["process_start_time_seconds"] <= time.time() + 1  # started by the fixture
    assert 3 <= m["process_open_fds"] <= len(os.listdir("/proc/%d/fd" % pid)) + 2
    assert m["process_max_fds"] >= m["process_open_fds"]
    busy = m["process_cpu_seconds_total"]
    assert post(llamacpp_srv, "/completion", greedy(n_predict=64, cache_prompt=False))[0] == 200
    assert metrics(llamacpp_srv)["process_cpu_seconds_total"] >= busy


# --- the Grafana dashboard ------------------------------------------------------------------------

PROMQL_FUNCTIONS = {"sum", "rate", "irate", "increase", "histogram_quantile", "max", "min", "avg", "count",
                    "label_values", "clamp_min"}
PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
                   "unless", "offset"}


def promql_metric_names(expr):
    """The metric names a PromQL expression reads (label matchers, ranges, strings and grouping
    clauses removed; functions and keywords left out)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    e = re.sub(r"\blabel_values\(([^,]+),\s*\w+\)", r"label_values(\1)", e)  # Grafana's: (metric, label)
    e = re.sub(r"\{[^}]*\}", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r"\1", e)
    names = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", e):
        token, after = m.group(0), e[m.end():].lstrip()
        if token in PROMQL_KEYWORDS:
            continue
        if token in PROMQL_FUNCTIONS:  # an aggregation may come before its by (...)
            assert re.match(r"(\(|by\b|without\b)", after), "%s not called in %s" % (token, expr)
            continue
        assert not after.startswith("("), "unknown PromQL function %s in %s" % (token, expr)
        names.add(token)
    return names


def test_promql_metric_names_reads_only_metric_names():
    assert promql_metric_names('histogram_quantile(0.95, sum by (le) (rate(a_bucket{instance=~"$x"}[5m])))') \
        == {"a_bucket"}
    assert promql_metric_names("sum(rate(b_total[$__rate_interval])) / sum(c) + d:e") == {"b_total", "c", "d:e"}
    assert promql_metric_names("label_values(f_total, instance)") == {"f_total"}


def test_grafana_dashboard_queries_only_metrics_that_exist(llamacpp_srv):
    with open(os.path.join(ROOT, "conf", "grafana-uvlm.json")) as f:
        dash = json.load(f)
    fams = parse(scrape(llamacpp_srv))
    exposed = {name for fam in fams.values() for name, _, _ in fam["samples"]}
    panels = dash["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    exprs = []
    for p in panels:
        assert 0 <= p["gridPos"]["x"] and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24, p["title"]
        if p["type"] == "row":
            continue
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert p["targets"], p["title"]
        exprs += [(p["title"], t["expr"]) for t in p["targets"]]
    exprs += [("variable " + v["name"], v["definition"]) for v in dash["templating"]["list"] if v.get("definition")]
    used = set()
    for title, expr in exprs:
        names = promql_metric_names(expr)
        assert names, (title, expr)
        missing = names - exposed
        assert not missing, "%s: %s reads %s, which /metrics does not expose" % (title, expr, sorted(missing))
        used |= names
    # the dashboard shows what dashboards need: each per-request histogram, the finish reasons,
    # live and cached KV cells, RSS and CPU
    for name in ("uvlm_time_to_first_token_seconds_bucket", "uvlm_inter_token_latency_seconds_bucket",
                 "uvlm_e2e_request_latency_seconds_bucket", "uvlm_request_queue_time_seconds_bucket",
                 "uvlm_request_prefill_time_seconds_bucket", "uvlm_request_decode_time_seconds_bucket",
                 "uvlm_request_prompt_tokens_bucket", "uvlm_request_generation_tokens_bucket",
                 "uvlm_requests_finished_total", "uvlm_kv_cells_live", "uvlm_kv_cells_cached",
                 "process_resident_memory_bytes", "process_cpu_seconds_total"):
        assert name in used, name
