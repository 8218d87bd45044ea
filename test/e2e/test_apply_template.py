"""uvlm apply-template: the prompt for a template file and JSON messages, printed exactly: the
template run as Jinja (the goldens of ../shared/chat/tools.jsonl, the clock pinned to the day they
were rendered with libfaketime) and the native families (templates.jsonl)."""
import json
import os
import subprocess
import tempfile
import unittest

from conftest import need, shared_file

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


# libfaketime (Debian's faketime package): the clock of the process starts at the day the
# goldens were rendered, so strftime_now and the date variables print that day.
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def golden_day_env():
    need(os.path.exists(FAKETIME_LIB), "libfaketime missing (scripts/install-deps installs faketime)")
    env = dict(os.environ, LD_PRELOAD=FAKETIME_LIB, FAKETIME="@2026-11-26 12:00:00",
               FAKETIME_DONT_FAKE_MONOTONIC="1")
    # a sanitizer build wants its runtime first among the preloaded libraries
    env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0").lstrip(":")
    return env


def run(*args, stdin=None, env=None):
    return subprocess.run([UVLM, "apply-template", *args], input=stdin,
                          capture_output=True, timeout=30, env=env)


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

    def test_native_family_prints_exactly_the_expected_prompt(self):
        templates = self.shared_templates()
        for name in PICKED:
            tmpl = self.write("t.jinja", templates[name]["template"])
            for conv in templates[name]["conversations"]:
                self.assertTrue(conv["add_generation_prompt"])
                msgs = self.write("m.json", json.dumps(conv["messages"]))
                r = run("--template-file", tmpl, "--messages", msgs, "--native")
                with self.subTest(template=name):
                    self.assertEqual(r.returncode, 0, r.stderr)
                    self.assertEqual(r.stdout.decode("utf-8"), conv["expected"])

    def test_jinja_prints_exactly_the_reference_prompt_with_tools(self):
        with open(shared_file("chat", "tools.jsonl"), encoding="utf-8") as f:
            rows = list(map(json.loads, f))
        self.assertEqual(len(rows), 40)
        env = golden_day_env()
        for row in rows:
            tmpl = self.write("t.jinja", row["template"])
            for i, conv in enumerate(row["conversations"]):
                args = ["--template-file", tmpl, "--messages", self.write("m.json", json.dumps(conv["messages"]))]
                if conv.get("tools"):
                    args += ["--tools", self.write("tools.json", json.dumps(conv["tools"]))]
                r = run(*args, env=env)
                with self.subTest(template=row["name"], conversation=i):
                    self.assertEqual(r.returncode, 0, r.stderr)
                    self.assertEqual(r.stdout.decode("utf-8"), conv["expected"])

    def test_model_chat_template_runs_as_jinja(self):
        # the model's template writes a default system turn, which the native chatml does not
        model = shared_file("models", "qwen2-q8_0.gguf")
        msgs = self.write("m.json", json.dumps([{"role": "user", "content": "Hi"}]))
        r = run("--model", model, "--messages", msgs)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, b"<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
                                   b"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
        self.assertEqual(r.stderr, b"")
        r = run("--model", model, "--messages", msgs, "--native")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, b"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")

    def test_continue_the_assistant(self):
        tmpl = self.write("t.jinja", "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}"
                                     "{% if add_generation_prompt %}<assistant>{% endif %}")
        msgs = self.write("m.json", json.dumps([{"role": "user", "content": "Hi"},
                                                {"role": "assistant", "content": [{"type": "text", "text": "Hel"},
                                                                                  {"type": "text", "text": "lo"}]}]))
        r = run("--template-file", tmpl, "--messages", msgs)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, b"<user>Hi</user><assistant>Hel\nlo")
        r = run("--template-file", tmpl, "--messages", msgs, "--no-generation-prompt")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, b"<user>Hi</user><assistant>Hel\nlo</assistant>")

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

    def test_kwargs_reach_the_template(self):
        tmpl = self.write("t.jinja", "{{ messages[0].content }}{% if enable_thinking %} think{% endif %}")
        msgs = self.write("m.json", json.dumps([{"role": "user", "content": "Hi"}]))
        self.assertEqual(run("--template-file", tmpl, "--messages", msgs).stdout, b"Hi think")
        r = run("--template-file", tmpl, "--messages", msgs, "--kwargs", '{"enable_thinking": false}')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, b"Hi")

    def test_template_that_raises_is_an_error(self):
        tmpl = self.write("t.jinja", "{{ raise_exception('only one message, please') }}")
        msgs = self.write("m.json", json.dumps([{"role": "user", "content": "Hi"}]))
        r = run("--template-file", tmpl, "--messages", msgs)
        self.assertEqual(r.returncode, 2)
        self.assertIn(b"only one message, please", r.stderr)

    def test_unrunnable_template_falls_back_to_chatml_with_a_warning(self):
        tmpl = self.write("t.jinja", "{% for m in messages %}{{ m.content }}")  # no endfor
        msgs = self.write("m.json", json.dumps([{"role": "user", "content": "Hi"}]))
        r = run("--template-file", tmpl, "--messages", msgs)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, b"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
        self.assertIn(b"chatml", r.stderr)
        self.assertIn(b"endfor", r.stderr)

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
