"""uvlm apply-template: the prompt for a template file and JSON messages, printed exactly."""
import json
import os
import subprocess
import tempfile
import unittest

from conftest import shared_file

UVLM = os.environ.get("UVLM_BIN", os.path.join(os.path.dirname(__file__), "..", "..", "uvlm"))

# One template per kind of format: role-named, per-role markers, system folded into user,
# mistral's [INST] blocks, and a default system turn.
PICKED = [
    "Qwen-Qwen2.5-7B-Instruct.jinja",
    "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "CohereForAI-c4ai-command-r-plus-tool_use.jinja",
    "google-gemma-2-2b-it.jinja",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja",
    "inclusionai-ling-3.0-flash.jinja",
    "deepseek-ai-DeepSeek-V3.1.jinja",
]


def run(*args, stdin=None):
    return subprocess.run([UVLM, "apply-template", *args], input=stdin,
                          capture_output=True, timeout=30)


class ApplyTemplate(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, data):
        path = os.path.join(self.tmp.name, name)
        with open(path, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        return path

    def shared_templates(self):
        with open(shared_file("chat", "templates.jsonl"), encoding="utf-8") as f:
            return {t["name"]: t for t in map(json.loads, f)}

    def test_prints_exactly_the_expected_prompt(self):
        templates = self.shared_templates()
        for name in PICKED:
            tmpl = self.write("t.jinja", templates[name]["template"])
            for conv in templates[name]["conversations"]:
                self.assertTrue(conv["add_generation_prompt"])
                msgs = self.write("m.json", json.dumps(conv["messages"]))
                r = run("--template-file", tmpl, "--messages", msgs)
                with self.subTest(template=name):
                    self.assertEqual(r.returncode, 0, r.stderr)
                    self.assertEqual(r.stdout.decode("utf-8"), conv["expected"])

    def test_model_chat_template(self):
        model = shared_file("models", "qwen2-q8_0.gguf")
        msgs = self.write("m.json", json.dumps([{"role": "user", "content": "Hi"}]))
        r = run("--model", model, "--messages", msgs)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, b"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
        self.assertEqual(r.stderr, b"")

    def test_messages_from_stdin_and_forced_family(self):
        msgs = json.dumps([{"role": "user", "content": "Hi"}])
        r = run("--chat-template", "llama3", "--messages", "-", stdin=msgs.encode())
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, b"<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                                   b"<|start_header_id|>assistant<|end_header_id|>\n\n")

    def test_no_generation_prompt(self):
        msgs = self.write("m.json", json.dumps([{"role": "user", "content": "Hi"}]))
        r = run("--chat-template", "chatml", "--messages", msgs, "--no-generation-prompt")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, b"<|im_start|>user\nHi<|im_end|>\n")

    def test_unknown_template_falls_back_to_chatml_with_a_warning(self):
        tmpl = self.write("t.jinja", "{% for m in messages %}{{ m.content }}{% endfor %}")
        msgs = self.write("m.json", json.dumps([{"role": "user", "content": "Hi"}]))
        r = run("--template-file", tmpl, "--messages", msgs)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, b"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
        self.assertIn(b"chatml", r.stderr)

    def test_bad_json_is_a_usage_error(self):
        tmpl = self.write("t.jinja", "<|im_start|>")
        for bad in ['[{"role": "user", "content": "Hi"}', '{"role": "user"}', '[{"content": "x"}]']:
            msgs = self.write("m.json", bad)
            r = run("--template-file", tmpl, "--messages", msgs)
            with self.subTest(json=bad):
                self.assertEqual(r.returncode, 2)
                self.assertEqual(r.stdout, b"")
                self.assertTrue(r.stderr)

    def test_bad_usage(self):
        msgs = self.write("m.json", "[]")
        for args in [(), ("--messages", msgs), ("--chat-template", "nope", "--messages", msgs),
                     ("--bogus",), ("--template-file",)]:
            r = run(*args)
            with self.subTest(args=args):
                self.assertEqual(r.returncode, 2)
                self.assertTrue(r.stderr)

    def test_missing_file_fails(self):
        msgs = self.write("m.json", "[]")
        r = run("--template-file", os.path.join(self.tmp.name, "absent"), "--messages", msgs)
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"absent", r.stderr)

    def test_help_lists_the_families(self):
        r = run("--help")
        self.assertEqual(r.returncode, 0)
        for name in [b"chatml", b"llama3", b"gemma", b"mistral-v7", b"deepseek3"]:
            self.assertIn(name, r.stdout)


if __name__ == "__main__":
    unittest.main()
