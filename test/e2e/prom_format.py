"""A strict checker of the Prometheus text exposition format (version 0.0.4) and of the naming
rules `promtool check metrics` lints, for the tests of GET /metrics. Python stdlib only.

    errors = check(text)           # [] when the exposition is valid
    families = parse(text)         # {name: {"type": ..., "help": ..., "samples": [(name, labels, value)]}}

What it holds the text to:
  - every line is "# HELP name text", "# TYPE name type" or a sample "name{l="v",...} value";
    the text ends with a newline, has no blank lines, no other comments, no timestamps;
  - metric and label names match the format's grammar; label values use only the escapes \\\\,
    \\" and \\n; no label name twice in a sample, no label named __*;
  - each family has one HELP then one TYPE, before its samples, which are contiguous; no family
    twice; type is counter, gauge or histogram (what uvlm writes);
  - a counter's name ends in _total and its values are >= 0; a gauge's name does not end in
    _total, _count, _sum or _bucket; names carry base units (_seconds, _bytes), never _ms or
    _milliseconds, and no ':' unless allowed (llama.cpp's families);
  - a histogram has, per label set, _bucket samples with an le label in strictly increasing order
    ending with le="+Inf", cumulative (non-decreasing) counts, then _sum and _count, with _count
    equal to the +Inf bucket;
  - no two samples with the same name and labels; values parse as Go's ParseFloat would
    (NaN, +Inf, -Inf included).
"""
import math
import re

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r"[a-zA-Z_][a-zA-Z0-9_]*"
TYPES = ("counter", "gauge", "histogram")


def parse_value(s):
    if s in ("NaN", "+Inf", "-Inf", "Inf"):
        return {"NaN": math.nan, "+Inf": math.inf, "Inf": math.inf, "-Inf": -math.inf}[s]
    if not re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", s):
        raise ValueError("bad value %r" % s)
    return float(s)


def parse_labels(s):
    """The inside of {...} -> list of (name, value); raises ValueError."""
    out = []
    i = 0
    while i < len(s):
        m = re.match(r"(%s)=\"" % LABEL, s[i:])
        if not m:
            raise ValueError("bad label at %r" % s[i:])
        name = m.group(1)
        i += m.end()
        value = []
        while True:
            if i >= len(s):
                raise ValueError("unterminated label value")
            c = s[i]
            if c == "\\":
                if i + 1 >= len(s) or s[i + 1] not in "\\\"n":
                    raise ValueError("bad escape in label value")
                value.append({"\\": "\\", '"': '"', "n": "\n"}[s[i + 1]])
                i += 2
            elif c == '"':
                i += 1
                break
            elif c == "\n":
                raise ValueError("newline in label value")
            else:
                value.append(c)
                i += 1
        out.append((name, "".join(value)))
        if i < len(s):
            if s[i] != ",":
                raise ValueError("expected ',' between labels")
            i += 1
    return out


def parse(text):
    """Families in order of appearance; raises ValueError on a line it cannot read."""
    families = {}
    current = None
    for line in text.split("\n")[:-1]:
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            kind, rest = line[2:6], line[7:]
            name, _, arg = rest.partition(" ")
            fam = families.setdefault(name, {"type": None, "help": None, "samples": [], "order": []})
            fam["order"].append(kind)
            if kind == "HELP":
                fam["help"] = arg
            else:
                fam["type"] = arg
            current = name
            continue
        m = re.fullmatch(r"(%s)(?:\{(.*)\})? (\S+)" % NAME, line)
        if not m:
            raise ValueError("unreadable line %r" % line)
        labels = parse_labels(m.group(2)) if m.group(2) is not None else []
        families.setdefault(current, {"type": None, "help": None, "samples": [], "order": []})
        families[current]["samples"].append((m.group(1), labels, parse_value(m.group(3))))
        families[current]["order"].append("sample")
    return families


def check(text, allow_colon_prefixes=()):
    """The list of everything wrong with the exposition (empty when it is valid)."""
    errors = []
    if not text.endswith("\n"):
        errors.append("the exposition does not end with a newline")
        return errors
    seen_families = []
    current, sampled = None, False
    for n, line in enumerate(text.split("\n")[:-1], 1):
        if line == "":
            errors.append("line %d: blank line" % n)
        elif not line.startswith("#"):
            sampled = True
        else:
            m = re.fullmatch(r"# (HELP|TYPE) (%s) ?(.*)" % NAME, line)
            if not m:
                errors.append("line %d: not a HELP or TYPE line: %r" % (n, line))
                continue
            if m.group(2) == current and sampled:
                errors.append("line %d: family %s appears twice" % (n, current))
            if m.group(2) != current:
                sampled = False
                if m.group(2) in seen_families:
                    errors.append("line %d: family %s appears twice" % (n, m.group(2)))
                seen_families.append(m.group(2))
                current = m.group(2)
                if m.group(1) != "HELP":
                    errors.append("line %d: %s: TYPE before HELP" % (n, current))
            if m.group(1) == "HELP" and re.sub(r"\\[\\n]", "", m.group(3)).count("\\"):
                errors.append("line %d: bad escape in HELP" % n)
    if errors:
        return errors
    try:
        families = parse(text)
    except ValueError as e:
        return [str(e)]
    for name, fam in families.items():
        if name is None:
            errors.append("samples before any HELP/TYPE: %s" % [s[0] for s in fam["samples"]])
            continue
        order = fam["order"]
        if order[:2] != ["HELP", "TYPE"] or "HELP" in order[2:] or "TYPE" in order[2:]:
            errors.append("%s: expected one HELP then one TYPE before the samples, got %s" % (name, order[:4]))
        t = fam["type"]
        if t not in TYPES:
            errors.append("%s: unknown type %r" % (name, t))
            continue
        if ":" in name and not any(name.startswith(p) for p in allow_colon_prefixes):
            errors.append("%s: ':' is reserved for recording rules" % name)
        if re.search(r"_(ms|milliseconds|microseconds|us|kb|mb|kib|mib)(_|$)", name):
            errors.append("%s: a name should use base units (seconds, bytes)" % name)
        keys = set()
        for sname, labels, value in fam["samples"]:
            key = (sname, tuple(sorted(labels)))
            if key in keys:
                errors.append("%s: duplicate sample %s%s" % (name, sname, labels))
            keys.add(key)
            lnames = [l for l, _ in labels]
            if len(set(lnames)) != len(lnames):
                errors.append("%s: a label twice in %s" % (name, labels))
            if any(l.startswith("__") for l in lnames):
                errors.append("%s: reserved label name in %s" % (name, labels))
        if t == "counter":
            if not name.endswith("_total"):
                errors.append("%s: a counter's name should end in _total" % name)
            for sname, labels, value in fam["samples"]:
                if sname != name:
                    errors.append("%s: sample %s outside its family" % (name, sname))
                if not value >= 0:
                    errors.append("%s: a counter at %r" % (name, value))
        elif t == "gauge":
            if re.search(r"_(total|count|sum|bucket)$", name):
                errors.append("%s: a gauge's name must not end in _total, _count, _sum or _bucket" % name)
            for sname, _, _ in fam["samples"]:
                if sname != name:
                    errors.append("%s: sample %s outside its family" % (name, sname))
        else:
            errors += check_histogram(name, fam["samples"])
    return errors


def check_histogram(name, samples):
    errors = []
    if re.search(r"_(total|count|sum|bucket)$", name):
        errors.append("%s: a histogram's name must not end in _total, _count, _sum or _bucket" % name)
    series = {}  # label set without le -> {"buckets": [(le, v)], "sum": v, "count": v, "done": bool}
    for sname, labels, value in samples:
        rest = tuple(sorted((l, v) for l, v in labels if l != "le"))
        s = series.setdefault(rest, {"buckets": [], "sum": None, "count": None})
        if sname == name + "_bucket":
            le = [v for l, v in labels if l == "le"]
            if len(le) != 1:
                errors.append("%s: a bucket without le: %s" % (name, labels))
                continue
            if s["sum"] is not None or s["count"] is not None:
                errors.append("%s: a bucket after _sum or _count" % name)
            try:
                s["buckets"].append((parse_value(le[0]), value))
            except ValueError:
                errors.append("%s: bad le %r" % (name, le[0]))
        elif sname == name + "_sum":
            s["sum"] = value
        elif sname == name + "_count":
            s["count"] = value
        else:
            errors.append("%s: sample %s outside its family" % (name, sname))
    for rest, s in series.items():
        b = s["buckets"]
        if not b or b[-1][0] != math.inf:
            errors.append("%s%s: the last bucket is not le=\"+Inf\"" % (name, rest))
            continue
        for (le0, v0), (le1, v1) in zip(b, b[1:]):
            if not le1 > le0:
                errors.append("%s%s: le %r after %r" % (name, rest, le1, le0))
            if v1 < v0:
                errors.append("%s%s: bucket counts not cumulative (%r after %r)" % (name, rest, v1, v0))
        if any(v < 0 or v != int(v) for _, v in b):
            errors.append("%s%s: a bucket count that is not a natural number" % (name, rest))
        if s["sum"] is None or s["count"] is None:
            errors.append("%s%s: missing _sum or _count" % (name, rest))
        elif s["count"] != b[-1][1]:
            errors.append("%s%s: _count %r differs from the +Inf bucket %r" % (name, rest, s["count"], b[-1][1]))
    return errors
