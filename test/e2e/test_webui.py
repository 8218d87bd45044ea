"""The chat page at GET / (src/api/webui.h): its files and their headers, --no-webui, and the page
itself in headless Chromium (Debian's chromium, driven by playwright-core from test/e2e/node, which
runs webui.mjs): tokens arrive one by one, n choices side by side, Stop cancels the sequence,
Markdown is rendered and nothing in it runs, settings survive a reload, and the --api-key flow.
Each browser run saves a screenshot in a temporary directory and prints its path."""
import json
import os
import re
import shutil
import subprocess
import tempfile

from conftest import need
from serving_helpers import start

NODE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node")
CHROMIUM = os.environ.get("UVLM_CHROMIUM", "/usr/bin/chromium")
KEY = "webui-test-key"


def csp_directives(value):
    return {d.split()[0]: d.split()[1:] for d in value.split(";") if d.strip()}


def test_page_files_are_served_with_a_strict_policy():
    srv = start()
    try:
        for path, kind in (("/", "text/html"), ("/webui.js", "text/javascript"), ("/webui.css", "text/css")):
            status, headers, body = srv.request("GET", path)
            assert status == 200, (path, status)
            assert headers["content-type"].startswith(kind), headers
            assert headers["x-content-type-options"] == "nosniff"
            csp = csp_directives(headers["content-security-policy"])
            assert csp["default-src"] == ["'self'"] and csp["script-src"] == ["'self'"], csp
            assert csp["frame-ancestors"] == ["'none'"] and csp["object-src"] == ["'none'"], csp
            assert csp["require-trusted-types-for"] == ["'script'"], csp
        page = srv.request("GET", "/")[2].decode()
        # no inline script or style for the policy to refuse: the code comes from its own files
        assert re.findall(r"<script[^>]*>", page) == ['<script src="/webui.js" defer>']
        assert "<style" not in page and " style=" not in page
        assert not re.search(r"<[^>]+\son[a-z]+=", page), "inline event handler in the page"
        assert "http://" not in page and "https://" not in page, "the page loads nothing from elsewhere"
    finally:
        srv.check_clean_exit()


def test_page_needs_no_key_but_the_api_does():
    srv = start("--api-key", KEY)
    try:
        assert srv.request("GET", "/")[0] == 200
        assert srv.request("GET", "/webui.js")[0] == 200
        assert srv.request("GET", "/v1/models")[0] == 401
    finally:
        srv.check_clean_exit()


def test_no_webui_flag_serves_no_page():
    srv = start("--no-webui")
    try:
        for path in ("/", "/webui.js", "/webui.css"):
            assert srv.request("GET", path)[0] == 404, path
        assert srv.json("GET", "/health")[0] == 200
    finally:
        srv.check_clean_exit()


def run_browser(srv, mode, name):
    node = shutil.which("node")
    need(node, "node is not installed (scripts/install-deps installs it)")
    need(os.path.isdir(os.path.join(NODE_DIR, "node_modules", "playwright-core")),
         "playwright-core is not installed: (cd test/e2e/node && npm ci)")
    need(os.access(CHROMIUM, os.X_OK), "%s is missing (scripts/install-deps installs Debian's chromium)" % CHROMIUM)
    shot = os.path.join(tempfile.mkdtemp(prefix="uvlm-webui-"), name + ".png")
    out = subprocess.run([node, "webui.mjs", "http://127.0.0.1:%d" % srv.port, mode, shot], cwd=NODE_DIR,
                         capture_output=True, text=True, timeout=180,
                         env=dict(os.environ, UVLM_CHROMIUM=CHROMIUM))
    assert out.returncode == 0, out.stderr + out.stdout + srv.log()
    print("webui screenshot (%s): %s" % (mode.split(":")[0], shot))
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert os.path.getsize(shot) > 10000, shot
    # no error in the page: no exception, no refusal by the policy (CSP, Trusted Types)
    assert got["pageErrors"] == [], got["pageErrors"]
    refused = [m for m in got["console"] if re.search(r"Content Security Policy|Trusted Type|Refused", m)]
    assert refused == [], refused
    return got


def test_chat_page_in_chromium_streams_stops_renders_and_keeps_settings():
    srv = start("--kv-tokens", "20000")  # 16 choices of a whole context each: no waiting for memory
    try:
        got = run_browser(srv, "open", "chat")
        assert srv.log().count(" 499 ") == 1, srv.log()  # the stopped answer, and only it
    finally:
        srv.check_clean_exit()
    assert got["console"] == [], got["console"]
    assert re.match(r"ok · queue 0 · sequences \d+ · KV in use \d+ / 20000 cells \(\d+%\)", got["status"]), got["status"]
    assert got["model"] == "kjv-tiny-q8_0.gguf"

    # the request carries the settings, streams, and names the system prompt
    req = got["answer"]["request"]
    assert req["stream"] is True and req["n"] == 2 and req["max_tokens"] == 400
    assert req["temperature"] == 0.7 and req["top_p"] == 0.9
    assert req["messages"] == [{"role": "system", "content": "You answer in the words of the King James Bible."},
                               {"role": "user", "content": "And God said"}]
    a, b = got["answer"]["choices"]
    assert a["state"] == b["state"] == "done" and a["text"] and b["text"] and a["text"] != b["text"]
    assert a["y"] == b["y"] and b["x"] >= a["x"] + a["width"], "the two choices stand side by side"
    for c in (a, b):  # with n > 1 the page counts the pieces it received: about the tokens
        m = re.match(r"first token \d+ ms · [\d.]+ tokens/s · ≈(\d+) tokens · length$", c["stats"])
        assert m and 360 <= int(m.group(1)) <= 400, c["stats"]

    # tokens arrive one by one: the text grew over several DOM updates during one answer, never shrinking
    st = got["stop"]
    assert st["request"]["n"] == 16 and len(st["choices"]) == 16
    assert st["updates"] >= 5 and st["lengths"] == sorted(st["lengths"]), st["lengths"]
    # Stop: the answer ends where it was, and the server cancelled the request's sequences
    assert st["stopDisabled"] is True
    for c in st["choices"]:
        assert c["state"] == "stopped" and c["stats"].endswith("· stopped"), c
    assert st["cancelledBefore"] == 0 and st["cancelledAfter"] == 1, st
    assert st["health"]["active_sequences"] == 0 and st["health"]["active_requests"] == 0, st["health"]

    # Markdown: headings, emphasis, code, lists, quotes, safe links; raw HTML stays text
    md = got["markdown"]
    assert md["h2"] == ["Title"] and md["strong"] == ["bold"] and md["em"] == ["italic"], md
    assert md["inlineCode"] == ["a <b> code"] and md["pre"] == ["const x = 1 < 2;"] and md["lang"] == ["js"]
    assert md["ul"] == ["one", "two"] and md["ol"] == ["first", "second"] and md["quote"] == ["quoted"]
    assert md["links"] == ["https://example.com/a?b=1&c=2"], "a javascript: link must stay text"
    assert set(md["elements"]) <= {"a", "blockquote", "code", "em", "h2", "li", "ol", "p", "pre", "span", "strong",
                                   "ul", "br"}, md["elements"]
    assert "<img src=x" in md["text"] and "<script>" in md["text"] and md["pwned"] is None

    # settings survive a reload
    assert got["reloaded"] == {"system": "You answer in the words of the King James Bible.", "temperature": "0.7",
                               "top_p": "0.9", "max_tokens": "400", "n": "1"}, got["reloaded"]


def test_chat_page_in_chromium_asks_for_the_api_key():
    srv = start("--api-key", KEY)
    try:
        got = run_browser(srv, "key:" + KEY, "api-key")
    finally:
        srv.check_clean_exit()
    # the browser reports each 401 in its console; nothing else goes there
    assert all("401" in m for m in got["console"]), got["console"]
    assert got["firstAsk"] == "This server needs an API key."
    assert got["secondAsk"] == "The server refused this key."
    # no key, the wrong key, then the right one: the same request three times
    assert got["sentKeys"] == [None, "Bearer not-the-key", "Bearer " + KEY], got["sentKeys"]
    (answer,) = got["answer"]
    assert answer["state"] == "done" and answer["text"], answer
    assert answer["stats"].endswith(" 24 tokens · length"), answer  # n = 1: the usage's exact count
    assert got["sessionKey"] == KEY and got["keyInLocalStorage"] is False
    # after a reload the tab still has the key: no question, the model shows
    assert got["modelAfterReload"] == "kjv-tiny-q8_0.gguf"
    after = got["afterReload"]
    assert after["asked"] is False and after["sentKeys"] == ["Bearer " + KEY]
    assert after["answer"][0]["state"] == "done" and after["answer"][0]["text"]
