"""uvlm mkmodel --arch mamba: the written model loads (architecture dispatch, recurrent memory),
eval-logits runs it, and its quantized versions track the F32 one (so the SSM tensors are
written and read with the same layout and types)."""
import json
import os
import subprocess
import tempfile
import unittest

from conftest import shared_file

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
UVLM = os.environ.get("UVLM_BIN", os.path.join(ROOT, "uvlm"))


def run(*args):
    r = subprocess.run([UVLM, *args], capture_output=True, timeout=300)
    if r.returncode != 0:
        raise AssertionError("uvlm %s failed (%d): %s" % (args[0], r.returncode, r.stderr.decode()))
    return r


class MkmodelMamba(unittest.TestCase):
    def test_mamba_types_load_and_track_f32(self):
        vocab = shared_file("vocab", "ggml-vocab-llama-spm.gguf")
        with tempfile.TemporaryDirectory() as d:
            prompts = os.path.join(d, "p.txt")
            with open(prompts, "w") as f:
                f.write("In the beginning the state was zero\n---\nand then it was not")
            rows = {}
            for t in ["f32", "q8_0", "q4_k"]:
                path = os.path.join(d, "mamba-" + t + ".gguf")
                made = run("mkmodel", "--arch", "mamba", "--out", path, "--vocab", vocab, "--type", t,
                           "--n-embd", "128", "--n-layer", "2", "--tied", "--seed", "3")
                self.assertIn(b"mamba", made.stderr)
                out = json.loads(run("eval-logits", "--model", path, "--prompts", prompts,
                                     "--topk", "8", "--n-gen", "4").stdout)
                self.assertEqual(len(out["cases"]), 2)
                rows[t] = [r for c in out["cases"] for r in c["prompt_topk"] + c["greedy_topk"]]
                if t == "f32":  # the layers matter: the top-1 is mostly not the token just fed
                    fed = [(r[0][0], tok) for c in out["cases"] for r, tok in zip(c["prompt_topk"], c["tokens"])]
                    self.assertLess(sum(top == tok for top, tok in fed), len(fed) // 2)
            ref = rows["f32"]
            for t, bar in {"q8_0": 0.02, "q4_k": 0.15}.items():
                with self.subTest(type=t):
                    self.assertEqual(len(rows[t]), len(ref))
                    worst = 0.0
                    for mine, want in zip(rows[t], ref):
                        got, scale = dict(mine), max(abs(l) for _, l in want)
                        worst = max([worst] + [abs(got[i] - l) / scale for i, l in want if i in got])
                    print("mkmodel mamba %s: worst %.4f of the row's max |logit| (bar %.2f)" % (t, worst, bar))
                    self.assertLess(worst, bar)
