"""uvlm tokenize: the shared vocabularies' test files reproduced byte for byte, the reference
models' prompt tokens (add_special) reproduced from full model files, and the CLI's errors."""
import json
import os
import subprocess
import tempfile
import unittest

from conftest import shared_file

UVLM = os.environ.get("UVLM_BIN", os.path.join(os.path.dirname(__file__), "..", "..", "uvlm"))
VOCABS = ["llama-spm", "phi-3", "gpt-2", "llama-bpe", "qwen2"]
MODELS = ["llama-spm-q8_0", "llama3-bpe-q8_0", "qwen2-q8_0", "kjv-tiny-q8_0"]


def tokenize(*args, stdin=None):
    return subprocess.run([UVLM, "tokenize", *args], input=stdin, capture_output=True, timeout=60)


shared = shared_file


class TokenizeVocabFiles(unittest.TestCase):
    def test_every_vocab_test_file_matches_its_out_file(self):
        for name in VOCABS:
            with self.subTest(vocab=name):
                model = shared("vocab", "ggml-vocab-%s.gguf" % name)
                r = tokenize("--model", model, "--file", model + ".inp")
                self.assertEqual(r.returncode, 0, r.stderr)
                with open(model + ".out", "rb") as f:
                    expected = f.read()
                self.assertEqual(r.stdout.decode().splitlines(), expected.decode().splitlines())
                self.assertEqual(r.stdout, expected)

    def test_text_and_stdin(self):
        model = shared("vocab", "ggml-vocab-llama-spm.gguf")
        r = tokenize("--model", model, "--text", "Hello world")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, b" 15043 3186\n")
        r = tokenize("--model", model, stdin=b"Hello world")
        self.assertEqual(r.stdout, b" 15043 3186\n")
        r = tokenize("--model", model, "--text", "<s>Hello", "--add-special", "--parse-special")
        self.assertEqual(r.stdout, b" 1 1 15043\n")


class TokenizeModelPrompts(unittest.TestCase):
    def test_reference_prompt_tokens(self):
        for name in MODELS:
            with self.subTest(model=name):
                model = shared("models", name + ".gguf")
                with open(shared("reference", name + ".json")) as f:
                    ref = json.load(f)
                # All prompts in one run, in the .inp format: one output line per prompt.
                with tempfile.NamedTemporaryFile(suffix=".inp") as inp:
                    for case in ref["cases"]:
                        inp.write(case["prompt"].encode() + b"\n__ggml_vocab_test__\n")
                    inp.flush()
                    r = tokenize("--model", model, "--add-special", "--file", inp.name)
                self.assertEqual(r.returncode, 0, r.stderr)
                lines = r.stdout.decode().split("\n")
                self.assertEqual(len(lines), len(ref["cases"]) + 1)
                for case, line in zip(ref["cases"], lines):
                    self.assertEqual([int(x) for x in line.split()], case["tokens"], case["prompt"][:40])


class TokenizeErrors(unittest.TestCase):
    def test_usage_and_bad_files(self):
        self.assertEqual(tokenize().returncode, 2)
        self.assertEqual(tokenize("--model").returncode, 2)
        self.assertEqual(tokenize("--help").returncode, 0)
        r = tokenize("--model", "/nonexistent.gguf", "--text", "x")
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"/nonexistent.gguf", r.stderr)
        r = tokenize("--model", shared("vocab", "ggml-vocab-qwen2.gguf.inp"), "--text", "x")
        self.assertEqual(r.returncode, 1)
        self.assertTrue(r.stderr)


if __name__ == "__main__":
    unittest.main()
