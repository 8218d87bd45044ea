"""uvlm eval-logits against ../shared/reference (field by field: tokens from the tokenizer, logits
within the README's bars), and uvlm mkmodel: every weight type it writes loads and computes
logits close to the F32 model of the same seed (so each type's encoding and decoding agree)."""
import json
import math
import os
import struct
import subprocess
import tempfile
import unittest

from conftest import shared_file

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
UVLM = os.environ.get("UVLM_BIN", os.path.join(ROOT, "uvlm"))
TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k", "q4_k_m",
         "q2_k", "q3_k", "iq4_nl", "iq4_xs"]


shared = shared_file


def uvlm(*args):
    r = subprocess.run([UVLM, *args], capture_output=True, timeout=300)
    if r.returncode != 0:
        raise AssertionError("uvlm %s failed (%d): %s" % (args[0], r.returncode, r.stderr.decode()))
    return r.stdout


def row_bar(row, tol):
    return tol * max(abs(l) for _, l in row)


class EvalLogitsMatchesReference(unittest.TestCase):
    """kjv-tiny-q8_0 (the trained model) and mamba-spm-q8_0 (the recurrent architecture); the C
    golden tests cover the others without the tokenizer. The bars of ../shared/README.md, as
    test/model/golden_test.c: every listed logit within the bar, top-1 and greedy rules exact."""

    def test_kjv_tiny_all_prompts(self):
        self.check_all_prompts("kjv-tiny-q8_0")

    def test_mamba_all_prompts(self):
        self.check_all_prompts("mamba-spm-q8_0")

    def check_all_prompts(self, name):
        model = shared("models", name + ".gguf")
        ref = json.load(open(shared("reference", name + ".json")))
        out = json.loads(uvlm("eval-logits", "--model", model, "--prompts",
                              shared("reference", "prompts.txt"), "--topk", "20", "--n-gen", "32"))
        self.assertEqual(out["model"], ref["model"])
        self.assertEqual(out["n_vocab"], ref["n_vocab"])
        self.assertEqual(out["topk"], ref["topk"])
        self.assertEqual(len(out["cases"]), len(ref["cases"]))
        tol = 0.03
        for ours, want in zip(out["cases"], ref["cases"]):
            self.assertEqual(ours["prompt"], want["prompt"])
            self.assertEqual(ours["tokens"], want["tokens"])
            self.assertEqual(len(ours["prompt_topk"]), len(want["prompt_topk"]))
            self.assertEqual(len(ours["greedy"]), len(want["greedy"]))
            # rows comparable: every prompt row, and greedy rows while the tokens agree
            pairs = list(zip(ours["prompt_topk"], want["prompt_topk"]))
            chosen_from = [want["prompt_topk"][-1]] + want["greedy_topk"][:-1]
            for i, (g, wg) in enumerate(zip(ours["greedy"], want["greedy"])):
                if g != wg:
                    row = chosen_from[i]
                    self.assertLessEqual(row[0][1] - row[1][1], row_bar(row, tol),
                                         "greedy diverged at %d after a clear step" % i)
                    break
                pairs.append((ours["greedy_topk"][i], want["greedy_topk"][i]))
            for mine, row in pairs:
                bar = row_bar(row, tol)
                mine = dict(mine)
                # our top-K lists only our 20 best: a reference id missing from it must be below
                # our 20th logit, which is itself within reach of the reference's value
                floor = min(mine.values())
                errs = [abs(mine[i] - l) if i in mine else max(0.0, floor - l) for i, l in row]
                self.assertLessEqual(max(errs), bar)
                if row[0][1] - row[1][1] > bar:
                    self.assertEqual(max(mine, key=mine.get), row[0][0])


class MkmodelTypes(unittest.TestCase):
    def test_every_type_loads_and_tracks_the_f32_model(self):
        vocab = shared("vocab", "ggml-vocab-llama-spm.gguf")
        with tempfile.TemporaryDirectory() as d:
            prompts = os.path.join(d, "p.txt")
            with open(prompts, "w") as f:
                f.write("The quick brown fox jumps over the lazy dog")
            logits = {}
            for t in TYPES:
                path = os.path.join(d, t + ".gguf")
                uvlm("mkmodel", "--out", path, "--vocab", vocab, "--type", t, "--n-layer", "2",
                     "--n-ff", "512", "--tied", "--seed", "7")
                out = json.loads(uvlm("eval-logits", "--model", path, "--prompts", prompts,
                                      "--topk", "5", "--n-gen", "0"))
                logits[t] = out["cases"][0]["prompt_topk"]
            ref = logits["f32"]
            # Relative to each row's max |logit|: quantization noise, never a wrong decoding
            # (which gives errors of the order of the logits themselves).
            # (measured: f16 0.0001, bf16 0.001, q8_0 0.004, q6_k 0.008, q5_* 0.016, q4_* 0.037,
            # iq4_* 0.028, q3_k 0.054, q2_k 0.078)
            bars = {"f16": 0.002, "bf16": 0.01, "q8_0": 0.015, "q6_k": 0.03, "q5_0": 0.06, "q5_1": 0.06,
                    "q5_k": 0.06, "q4_0": 0.12, "q4_1": 0.12, "q4_k": 0.12, "q4_k_m": 0.12,
                    "q2_k": 0.25, "q3_k": 0.18, "iq4_nl": 0.12, "iq4_xs": 0.12}
            for t, bar in bars.items():
                with self.subTest(type=t):
                    worst = 0.0
                    for mine, row in zip(logits[t], ref):
                        self.assertTrue(all(math.isfinite(l) for _, l in mine))
                        m = dict(mine)
                        scale = max(abs(l) for _, l in row)
                        for i, l in row:
                            if i in m:
                                worst = max(worst, abs(m[i] - l) / scale)
                    print("mkmodel %s: worst %.4f (bar %.2f)" % (t, worst, bar))
                    self.assertLess(worst, bar)
                    # the top-1 agrees on most positions
                    agree = sum(a[0][0] == b[0][0] for a, b in zip(logits[t], ref))
                    self.assertGreaterEqual(agree, len(ref) * (0.8 if bar <= 0.03 else 0.5))


class CliErrors(unittest.TestCase):
    def test_unknown_architecture_is_refused_by_name(self):
        with tempfile.TemporaryDirectory() as d:
            prompts = os.path.join(d, "p.txt")
            with open(prompts, "w") as f:
                f.write("hi")
            model = os.path.join(d, "rwkv6.gguf")  # GGUF v3, no tensors, one key: the architecture
            with open(model, "wb") as f:
                key, val = b"general.architecture", b"rwkv6"
                f.write(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key +
                        struct.pack("<IQ", 8, len(val)) + val)
            r = subprocess.run([UVLM, "eval-logits", "--model", model, "--prompts", prompts],
                               capture_output=True, timeout=60)
            self.assertEqual(r.returncode, 1)
            self.assertIn(b"architecture 'rwkv6' is not supported", r.stderr)

    def test_bad_usage(self):
        r = subprocess.run([UVLM, "eval-logits", "--model"], capture_output=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        r = subprocess.run([UVLM, "mkmodel", "--out", "/nonexistent/x.gguf", "--type", "q3_k"],
                           capture_output=True, timeout=60)
        self.assertEqual(r.returncode, 2)
