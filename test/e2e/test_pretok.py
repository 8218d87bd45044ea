"""The pre-tokenizers (`uvlm tokenize --split PRE`) against an independent model of the reference's
regex splitter: each family's regexes run by Python's `re` the way llama.cpp runs them with
std::regex (unicode_regex_split): a regex that uses \\p{..} classes matches a "collapsed" text in
which every non-ASCII code point is replaced by one marker byte for its class (letter, number,
punctuation, mark, symbol, other; whitespace by \\v), the class written as that marker plus its
ASCII members; a regex without them matches the code points, non-ASCII whitespace replaced by \\v.
Every regex is applied to each word the previous one left, and text no alternative matches stays a
word. The corpus: every ../shared vocabulary test text, strings aimed at each regex's corners
(digit groups, contractions, case, marks, CJK, whitespace runs, punctuation) and seeded random
strings over those characters."""
import json
import os
import random
import re
import subprocess
import tempfile
import unicodedata

import pytest

from conftest import BIN, ROOT

SHARED = os.environ.get("UVLM_SHARED", os.path.join(ROOT, "..", "shared"))
SEP = "\n__ggml_vocab_test__\n"

CONTR = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3 = CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2 = CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
CJK_KANA = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
DS_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
DS3_WORDS = (r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
             r"| ?[\p{P}\p{S}]+")
UPPER_LOWER = (r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+%s"
               r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*%s")
CASE_WORDS = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:%s)?"
              r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:%s)?") % (CONTR, CONTR)
PORO = " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"
DS_LETTERS = ("A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af"
              "\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5"
              "\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba"
              "\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45"
              "\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe"
              "\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc"
              "\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134"
              "\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee"
              "\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf"
              "\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
              "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df"
              "\U0001e900-\U0001e943")

# One name per distinct regex sequence (pretok.h), with the regexes as the reference lists them.
REGEXES = {
    "default": [r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"],
    "gpt-2": [GPT2],
    "llama-bpe": [LLAMA3],
    "dbrx": [LLAMA3],
    "qwen2": [QWEN2],
    "bailingmoe": [r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                   r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"],
    "qwen35": [CONTR + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+"
               r"|\s+(?!\S)|\s+"],
    "seed-coder": [CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "ufakzeka": [r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "minicpm5": [r"\p{N}{1,3}", CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "jais-2": [CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
               r"|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)"
               r"|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}"],
    "laguna": [r"[^\n]+|[\n]+", QWEN2],
    "refact": [r"\p{N}", GPT2],
    "falcon": [r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"],
    "deepseek-llm": [r"[\r\n]", r"\s?[" + DS_LETTERS + r"]+",
                     "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+", r"\s+$", DS_CJK, r"\p{N}+"],
    "deepseek-coder": [r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", DS_CJK, r"\p{N}"],
    "deepseek-v3": [r"\p{N}{1,3}", CJK_KANA, DS3_WORDS + r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "spark2_5": [r"\p{N}{1,3}", CJK_KANA, DS3_WORDS + r"|[\r\n]|\s+(?!\S)|\s+", r"\p{N}"],
    "youtu": ["[\uac00-\ud7a3\u3131-\u318e]+|[\uff01\u2026\u201c\u201d\u2018\u2019\u2014\uff1a\uff1b\uff0c"
              "\u3001-\u303f\ufe30-\ufe4f]+|[\u3105-\u312f]+|" + CJK_KANA,
              CASE_WORDS + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "gpt-4o": [UPPER_LOWER % ((CONTR + "?",) * 2) + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "granite-embed-multi-97m": [(UPPER_LOWER % ((CONTR + "?",) * 2)).replace(r"(?=[\p{L}])", r"(?=[\p{L}\p{M}])")
                                + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "tekken": [UPPER_LOWER % ("", "") + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "tiny_aya": [r"\d{1,3}(?=(?:\d{3})*\b)",
                 CASE_WORDS + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "superbpe": [r"\p{N}+", r"(?=(\d{3})+(?!\d))"],
    "exaone-moe": [CONTR + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?"
                   r"|\s*[\r\n]|\s+(?!\S)|\s+"],
    "poro-chat": [PORO],
    "viking": [PORO, r"\p{N}"],
    "chameleon": [r"<sentinel:[0-9]+>", r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", r"([\t\n]|    |  )", r"\p{N}",
                  r"[\p{P}!-/:-@\[-`{-~]", GPT2],
    "gemma4": [r"[^\n]+|[\n]+"],
}

# --- the model of the reference's splitter --------------------------------------------------------

WHITE_SPACE = set([0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000] + list(range(0x2000, 0x200B)))
MARKER = {"N": "\xd1", "L": "\xd2", "P": "\xd3", "M": "\xd4", "S": "\xd5"}
ASCII_MEMBERS = {"N": "0-9", "L": "A-Za-z", "P": r"!-#%-*,-/:-;?-@\[-\]_\{\}", "M": "", "S": r"\$\+<->^`\|"}
UCAT = {r"\p{N}": "N", r"\p{L}": "L", r"\p{P}": "P", r"\p{M}": "M", r"\p{S}": "S", r"\p{Lu}": "L",
        r"\p{Ll}": "L", r"\p{Lt}": "L", r"\p{Lm}": "L", r"\p{Lo}": "L"}


def collapse_text(cps):
    out = []
    for c in cps:
        if c < 128:
            out.append(chr(c))
        elif c in WHITE_SPACE:
            out.append("\x0b")
        else:
            out.append(MARKER.get(unicodedata.category(chr(c))[0], "\xd0"))
    return "".join(out)


def collapse_regex(rx):
    out, inside, i = [], False, 0
    while i < len(rx):
        ch = rx[i]
        if ch == "[" and (i == 0 or rx[i - 1] != "\\"):
            inside = True
        elif inside and ch == "]" and rx[i - 1] != "\\":
            inside = False
        elif rx.startswith(r"\p{", i):
            end = rx.index("}", i)
            cat = UCAT[rx[i:end + 1]]
            cls = MARKER[cat] + ASCII_MEMBERS[cat]
            out.append(cls if inside else "[" + cls + "]")
            i = end + 1
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def reference_split(text, regexes):
    cps = [ord(c) for c in text]
    collapsed = collapse_text(cps)
    wide = "".join("\x0b" if c > 0x7F and c in WHITE_SPACE else chr(c) for c in cps)
    offsets = [len(cps)]
    for rx in regexes:
        if r"\p{" in rx:
            target, expr = collapsed, re.compile(collapse_regex(rx), re.ASCII)
        else:
            target, expr = wide, re.compile(rx.replace("$", r"\Z"), re.ASCII)
        new, start = [], 0
        for length in offsets:
            word, prev = target[start:start + length], 0
            for m in expr.finditer(word):
                if m.start() > prev:
                    new.append(m.start() - prev)
                new.append(m.end() - m.start())
                prev = m.end()
            if prev < length:
                new.append(length - prev)
            start += length
        offsets = new
    words, start = [], 0
    for length in offsets:
        if length:
            words.append(text[start:start + length])
        start += length
    return words


# --- the corpus -----------------------------------------------------------------------------------

CORNERS = [
    "1234567 x 12.5 3,000,000 \u0663\u0664\u0665 \u00b2\u00bd \u216b 12ab 123_ 1234a", "I'm HE'LL they'Re we'VE don't 'll 's",
    "Hello World HELLOworld helloWORLD \u00c9cole \u00c4PFEL \u00dfen \u017fs \u212aelvin \u2126hm",
    "re\u0301sume\u0301 \u0915\u093f\u0924\u093e\u092c \u0300x a\u0301\u0302b",
    "\u4f60\u597d\u4e16\u754c\u3002\u3053\u3093\u306b\u3061\u306f\u30ab\u30bf\u30ab\u30ca \ud55c\uad6d\uc5b4 \u3131\u3134 \u3105\u3106",
    "\u0e44\u0e17\u0e22 \u1780\u17d2 \u1000\u1039 \u2f00", "  a   b    c\t\td\n\ne \r\n f  \n  \n   ",
    "end   ", "    ", "\u3000\u3000x\u00a0y\u2028z", "x ...\n\ny !!! ?!? ~~~ `x` $x ^y |z", "(a) [b] {c} <d> \"e\" 'f'",
    "a/b//c\n/d", "<sentinel:12> IMGIMGABZ IMGIMGABCDEZ IMGIMGZ", "\U0001f600\U0001f680 \u2705x", "\u2026\u201c\u201d\u2018\u2019\u2014",
    "\uff01\uff1f\uff0c\u3001\ufe30 \uff21\uff42 \uff5e", "\u0964\u06d4\u060c a.b,c!d?e", "\u1f5f\u1f7d \u1fd3 \u0390",
    "hello world foo  bar", "A B  C", "x\u0301 y", "\t\n\x0b\x0c\r", "'", "a'", "'s", "''s", "1", "", " ",
]
POOL = ("aAbZz09 \t\n\r'\"!?.,;:-_/\\$+<=>^~|`@#%&*()[]{}" + "\u00e9\u00c4\u00df\u017f\u0301\u0300\u4f60\u597d"
        "\u3042\u30ab\ud55c\u3131\u3105\u0e44\u0915\u093f\u00b2\u00bd\u0663\u216b\U0001f600\u2705\uff21\uff01\uff5e"
        "\u3000\u00a0\u2028\u3002\u3001\u2026\u201c\u2019\u2014\u0964\u06d4\u060c\u212a\u2126\u1fd3\u0085")


def corpus():
    texts = list(CORNERS)
    vocab_dir = os.path.join(SHARED, "vocab")
    if not os.path.isdir(vocab_dir):
        pytest.skip("shared test data missing: " + vocab_dir)
    for name in sorted(os.listdir(vocab_dir)):
        if name.endswith(".inp"):
            with open(os.path.join(vocab_dir, name), encoding="utf-8") as f:
                texts += [t for t in f.read().split(SEP) if t]
    rng = random.Random(19)
    texts += ["".join(rng.choice(POOL) for _ in range(rng.randint(1, 40))) for _ in range(400)]
    return texts


@pytest.fixture(scope="module")
def corpus_file():
    texts = corpus()
    with tempfile.NamedTemporaryFile("w", suffix=".inp", encoding="utf-8", delete=False) as f:
        for t in texts:
            f.write(t + SEP)
    yield f.name, texts
    os.unlink(f.name)


@pytest.mark.parametrize("name", sorted(REGEXES))
def test_split_matches_the_reference_regexes(name, corpus_file):
    path, texts = corpus_file
    r = subprocess.run([BIN, "tokenize", "--split", name, "--file", path], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().split("\n")
    assert len(lines) == len(texts) + 1 and lines[-1] == ""
    bad = []
    for text, line in zip(texts, lines):
        want = reference_split(text, REGEXES[name])
        got = json.loads(line)
        if got != want:
            bad.append((text, got, want))
    assert not bad, "%d of %d texts split differently, e.g. %r:\n uvlm      %r\n reference %r" % (
        len(bad), len(texts), *bad[0])


def test_split_usage_errors():
    r = subprocess.run([BIN, "tokenize", "--split", "no-such-pre", "--text", "x"], capture_output=True, timeout=30)
    assert r.returncode == 2 and b"'no-such-pre' is not a pre-tokenizer uvlm knows" in r.stderr
    r = subprocess.run([BIN, "tokenize", "--split", "gpt-2", "--model", "m.gguf", "--text", "x"], capture_output=True,
                       timeout=30)
    assert r.returncode == 2
