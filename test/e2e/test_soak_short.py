"""Short soak runs of scripts/soak (the full one is 10 minutes with 500 connections: see
docs/reliability.md). Each run starts its own uvlm ($UVLM_BIN, an ASan build under make check, whose
LeakSanitizer report at exit fails the run), mixes streaming and non-streaming requests with 20%
of the streams left mid-way, and drains the server on SIGTERM during the load: every request not
left on purpose must get a complete, valid answer. The /health bound is loose here (a shared
2-core machine also runs the load generator); the full soak's figures are in docs/reliability.md."""
import json
import os
import subprocess

from conftest import BIN, ROOT

PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"


def soak(tmp_path, *args):
    out = tmp_path / "soak.json"
    p = subprocess.run([PY, os.path.join(ROOT, "scripts", "soak"), "--bin", BIN, "--json", str(out),
                        "--health-p99-ms", "250", "--rss-growth", "0.5"] + list(args),
                       capture_output=True, text=True, timeout=240, cwd=ROOT)
    print(p.stdout, p.stderr)
    assert p.returncode == 0, p.stdout + p.stderr
    summary = json.loads(out.read_text())
    assert summary["failed"] == 0 and summary["ok"] > 0
    return summary


def test_soak_http_layer_with_drain_under_load(tmp_path):
    s = soak(tmp_path, "--debug", "--duration", "8", "--connections", "100", "--sigterm-at", "6")
    assert s["disconnected"] > 0
    assert s["refused_while_draining"] > 0  # the load went on into the drain, which refused it


def test_soak_model_short(tmp_path):
    s = soak(tmp_path, "--duration", "14", "--connections", "64", "--max-tokens", "8", "--window", "5")
    assert s["disconnected"] > 0
    assert all(c["pass"] for c in s["checks"])
    # /health figures per window ("throughout"), each within the run's bound
    wins = s["health_windows"]
    assert len(wins) >= 3 and all(w["polls"] > 0 and w["p99_ms"] <= 250 for w in wins), wins
    assert sum(w["polls"] for w in wins) == s["health_polls"]
    # the server's own loop figures: every iteration counted once by wall and by CPU time
    loop = s["loop"]
    assert loop["iterations"] > 0 and loop["busy_ms_max"] > 0
    assert sum(h["n"] for h in loop["hist"]) == loop["iterations"] == sum(h["n"] for h in loop["cpu_hist"])


def test_sigterm_during_model_load_drops_no_request(tmp_path):
    s = soak(tmp_path, "--duration", "8", "--connections", "48", "--max-tokens", "24", "--sigterm-at", "5")
    assert s["refused_while_draining"] > 0  # the load went on into the drain
