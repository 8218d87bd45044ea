"""The OpenAI Node SDK (npm `openai`, pinned in test/e2e/node/package.json, installed by .ci/run
with npm ci) streams a chat completion and asks for a completion with n=2 against uvlm."""
import json
import os
import shutil
import subprocess

from conftest import need
from serving_helpers import start

NODE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node")


def test_openai_node_sdk_streams_chat_and_completion_n2():
    node = shutil.which("node")
    need(node, "node is not installed (scripts/install-deps installs it)")
    need(os.path.isdir(os.path.join(NODE_DIR, "node_modules", "openai")),
         "the OpenAI SDK is not installed: (cd test/e2e/node && npm ci)")
    srv = start()
    try:
        out = subprocess.run([node, "openai_sdk.mjs", "http://127.0.0.1:%d/v1" % srv.port], cwd=NODE_DIR,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr + srv.log()
        got = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        srv.check_clean_exit()
    chat = got["chat"]
    # streamed: several chunks of one id, the text, finish_reason and the usage chunk
    assert chat["chunks"] >= 3 and chat["ids"] == 1
    assert chat["text"] and chat["finish"] == "length"
    assert chat["usage"]["completion_tokens"] == 8
    comp = got["completion"]
    assert comp["object"] == "text_completion"
    assert [c["index"] for c in comp["choices"]] == [0, 1]
    assert all(c["text"] and c["finish"] == "length" for c in comp["choices"])
    assert comp["usage"]["completion_tokens"] == 12
