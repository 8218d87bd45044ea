"""uvlm tokenize: the shared vocabularies' test files reproduced id for id, the reference models'
prompt tokens (add_special) reproduced from full model files, the CLI's errors, and a vocabulary
whose pre-tokenizer uvlm does not know refused by every command that loads one unless
--allow-unknown-pretokenizer."""
import json
import os
import subprocess
import tempfile
import unittest

from conftest import Server, shared_file

UVLM = os.environ.get("UVLM_BIN", os.path.join(os.path.dirname(__file__), "..", "..", "uvlm"))
VOCABS = ["llama-spm", "phi-3", "gpt-2", "llama-bpe", "qwen2", "deepseek-coder", "refact", "gemma-4", "qwen35"]
MODELS = ["llama-spm-q8_0", "llama3-bpe-q8_0", "qwen2-q8_0", "kjv-tiny-q8_0", "llama32-rope-q8_0", "qwen3-q8_0",
          "gemma3-q8_0", "phi3-q8_0", "qwen35-q8_0"]


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
                    expected = [[int(x) for x in line.split()] for line in f.read().decode().splitlines()]
                got = [[int(x) for x in line.split()] for line in r.stdout.decode().splitlines()]
                self.assertGreaterEqual(len(expected), 40)
                self.assertEqual(len(got), len(expected))
                for i, (g, e) in enumerate(zip(got, expected)):
                    self.assertEqual(g, e, "test %d" % i)

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


def unknown_pre_vocab(tmp):
    """The gpt-2 vocabulary with its tokenizer.ggml.pre renamed (same length: the file stays valid)."""
    with open(shared("vocab", "ggml-vocab-gpt-2.gguf"), "rb") as f:
        data = f.read()
    key = b"tokenizer.ggml.pre"
    at = data.index(key) + len(key) + 4 + 8  # value type (u32), string length (u64)
    assert data[at:at + 5] == b"gpt-2"
    path = os.path.join(tmp, "vocab-zzz.gguf")
    with open(path, "wb") as f:
        f.write(data[:at] + b"zzz-9" + data[at + 5:])
    return path


def run(*args):
    return subprocess.run([UVLM, *args], capture_output=True, timeout=120)


class UnknownPretokenizer(unittest.TestCase):
    """No command splits text some other way unasked: each refuses the vocabulary, naming its
    tokenizer.ggml.pre and the flag, and loads it with the flag (warning that it splits as
    'default')."""

    def test_every_command_refuses_it_unless_allowed(self):
        with tempfile.TemporaryDirectory() as tmp:
            vocab = unknown_pre_vocab(tmp)
            model = os.path.join(tmp, "tiny.gguf")
            r = run("mkmodel", "--out", model, "--vocab", vocab, "--n-embd", "64", "--n-layer", "1", "--n-head", "2",
                    "--n-head-kv", "1", "--n-ff", "128", "--type", "q8_0")
            self.assertEqual(r.returncode, 0, r.stderr)
            prompts = os.path.join(tmp, "prompts.txt")
            with open(prompts, "w") as f:
                f.write("Hello world")
            commands = [("tokenize", "--model", vocab, "--text", "Hello world"),
                        ("generate", "--model", model, "--prompt", "Hello", "--n-predict", "2"),
                        ("eval-logits", "--model", model, "--prompts", prompts, "--n-gen", "1", "--topk", "2")]
            for cmd in commands:
                with self.subTest(cmd=cmd[0]):
                    r = run(*cmd)
                    self.assertEqual(r.returncode, 1, r.stderr)
                    self.assertIn(b"tokenizer.ggml.pre 'zzz-9' is not a pre-tokenizer uvlm knows", r.stderr)
                    self.assertIn(b"--allow-unknown-pretokenizer", r.stderr)
                    r = run(*cmd, "--allow-unknown-pretokenizer")
                    self.assertEqual(r.returncode, 0, r.stderr)
                    self.assertIn(b"unknown pre-tokenizer 'zzz-9', splitting as 'default'", r.stderr)
            # the default split is GPT-2's with digit runs cut: the same ids as gpt-2 here
            r = run("tokenize", "--model", vocab, "--allow-unknown-pretokenizer", "--text", "Hello world")
            self.assertEqual(r.stdout, b" 15496 995\n")
            # the server: refused at load (exit 2 as for an unsupported model, the reason logged),
            # served with the flag (the warning logged)
            r = subprocess.run([UVLM, "--port", "0", "-m", model], capture_output=True, timeout=60)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(b"tokenizer.ggml.pre 'zzz-9' is not a pre-tokenizer uvlm knows", r.stderr)
            srv = Server(["-m", model, "--allow-unknown-pretokenizer"])
            try:
                self.assertEqual(srv.json("GET", "/health")[0], 200)
                self.assertIn("unknown pre-tokenizer 'zzz-9'", srv.log())
            finally:
                srv.check_clean_exit()


if __name__ == "__main__":
    unittest.main()
