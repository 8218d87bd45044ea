"""Fault scenarios of scripts/faults, run small: slow readers, byte-by-byte request heads, more
connections than allowed, a missing/corrupt model at start, a full request queue and exhausted KV
memory under load. Each scenario judges itself (scripts/faults prints the same verdicts)."""
import importlib.machinery
import importlib.util
import os
import types

from conftest import BIN, ROOT

_loader = importlib.machinery.SourceFileLoader("faults", os.path.join(ROOT, "scripts", "faults"))
faults = importlib.util.module_from_spec(importlib.util.spec_from_loader("faults", _loader))
_loader.exec_module(faults)

# loose /health bound: this is a shared 2-core machine running a Python load generator too
ARGS = types.SimpleNamespace(bin=BIN, model=None, clients=16, health_ms=200)


def run(name, **kw):
    v = faults.SCENARIOS[name](types.SimpleNamespace(**dict(vars(ARGS), **kw)))
    print(v)
    assert v.ok, str(v)


def test_slow_readers_are_closed_with_bounded_memory():
    run("slow-readers")


def test_byte_by_byte_heads_time_out_with_408():
    run("byte-by-byte")


def test_connections_over_the_limit_get_503_retry_after_then_recover():
    run("conn-limit")


def test_missing_or_corrupt_model_fails_at_start_naming_the_file():
    run("bad-model", bad_model_exit=None)


def test_missing_or_corrupt_model_exits_2():
    run("bad-model")


def test_full_queue_gives_503_retry_after_then_recovers():
    run("queue-full", clients=24)


def test_exhausted_kv_memory_preempts_and_every_request_completes():
    run("kv-exhausted", clients=8)
