"""The documents stay true: README.md's flag table is what the binary prints, conf/uvlm.conf names
only real settings, relative links point at files that exist, and no document tells history."""
import os
import re
import subprocess

from conftest import BIN, ROOT

BEGIN, END = "<!-- flags:begin -->", "<!-- flags:end -->"


def read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def help_markdown():
    p = subprocess.run([BIN, "--help-markdown"], capture_output=True, text=True, timeout=10)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_readme_flag_table_is_what_the_binary_prints():
    table = help_markdown()
    readme = read("README.md")
    assert readme.count(BEGIN) == 1 and readme.count(END) == 1, "README.md needs one %s ... %s block" % (BEGIN, END)
    got = readme.split(BEGIN + "\n", 1)[1].split(END, 1)[0]
    assert got == table, "README.md's flag table differs from `uvlm --help-markdown`: run `make flags-table`"
    # every setting has its row: the header, the rule, then one row per flag of --help
    flags = re.findall(r"^\s+(?:-\w, )?--([a-z0-9-]+) ", subprocess.run(
        [BIN, "--help"], capture_output=True, text=True, timeout=10).stdout, re.M)
    flags = [f for f in flags if f not in ("help", "help-markdown")]
    rows = table.splitlines()[2:]
    assert len(rows) == len(flags) and all("`--%s` |" % f in row for f, row in zip(flags, rows)), rows


def test_serve_subcommand_prints_the_same_table():
    p = subprocess.run([BIN, "serve", "--help-markdown"], capture_output=True, text=True, timeout=10)
    assert p.returncode == 0 and p.stdout == help_markdown()


def test_conf_example_names_every_setting_once_at_its_default():
    defaults = dict(re.findall(r"^\| (?:`-\w`, )?`--[a-z0-9-]+` \| `([a-z0-9-]+)` \| `UVLM_\w+` \| "
                               r"`?([^`|]*?)`? \|", help_markdown(), re.M))
    assert defaults["kv-tokens"] == "4096" and defaults["model"] == "(none)" and "config" not in defaults
    named = re.findall(r"^#?\s*([a-z][a-z0-9_-]*)\s*=[ \t]*(.*)$", read("conf/uvlm.conf"), re.M)
    assert sorted(k for k, _ in named) == sorted(defaults), sorted(set(k for k, _ in named) ^ set(defaults))
    for key, value in named:
        assert (value.strip() or "(none)") == defaults[key], (key, value, defaults[key])


def test_relative_links_in_documents_resolve():
    docs = ["README.md"] + [os.path.join("docs", f) for f in sorted(os.listdir(os.path.join(ROOT, "docs")))]
    assert {"docs/design.md", "docs/performance.md", "docs/reliability.md"} <= set(docs)
    for doc in docs:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", read(doc)):
            if re.match(r"[a-z]+:", target):
                continue
            path = os.path.normpath(os.path.join(ROOT, os.path.dirname(doc), target))
            assert os.path.exists(path), "%s links to %s, which does not exist" % (doc, target)


def test_no_history_in_documents_and_build_files():
    """The tree speaks of the product: history belongs in git log."""
    words = re.compile(r"what moved|used to|session [0-9]|in session|issue [0-9]", re.I)
    paths = ["README.md", "Makefile"]
    for top in ("docs", "scripts", "conf"):
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            paths += [os.path.relpath(os.path.join(d, f), ROOT) for f in files]
    found = []
    for path in paths:
        try:
            text = read(path)
        except UnicodeDecodeError:
            continue
        found += ["%s:%d: %s" % (path, i + 1, line.strip()) for i, line in enumerate(text.splitlines())
                  if words.search(line)]
    assert not found, "\n".join(found)
