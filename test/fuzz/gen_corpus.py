#!/usr/bin/env python3
"""Writes the fuzz seed corpora under test/fuzz/corpus/ (committed; re-run to regenerate):
  gguf/       small GGUF v2/v3 files: every metadata type, tiny SPM and BPE vocabularies, tensors
  tokenizer/  byte 0 = vocabulary index, byte 1 = flags (1 add_special, 2 parse_special,
              4 render special), then a text snippet
  sampler/    big-endian u32 fields read by sampler_fuzz.c: vocabulary, window, parameters
              (float bits), biases, accepted tokens, then rows of logits
  jinja/      a chat template, then optionally a NUL byte and a JSON object of its variables
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64 = range(13)
FMT = {T_U8: 'B', T_I8: 'b', T_U16: 'H', T_I16: 'h', T_U32: 'I', T_I32: 'i', T_F32: 'f',
       T_BOOL: '?', T_U64: 'Q', T_I64: 'q', T_F64: 'd'}


def s(x):
    b = x.encode() if isinstance(x, str) else x
    return struct.pack('<Q', len(b)) + b


def val(t, v):
    if t == T_STR:
        return s(v)
    if t == T_ARR:
        et, items = v
        return struct.pack('<IQ', et, len(items)) + b''.join(val(et, i) for i in items)
    return struct.pack('<' + FMT[t], v)


def gguf(kvs, tensors=(), version=3, align=32):
    out = b'GGUF' + struct.pack('<I', version)
    out += struct.pack('<QQ', len(tensors), len(kvs))
    for k, t, v in kvs:
        out += s(k) + struct.pack('<I', t) + val(t, v)
    offset = 0
    blobs = []
    for name, dims, ttype, data in tensors:
        out += s(name) + struct.pack('<I', len(dims)) + b''.join(struct.pack('<Q', d) for d in dims)
        out += struct.pack('<IQ', ttype, offset)
        blobs.append(data + b'\0' * (-len(data) % align))
        offset += len(blobs[-1])
    out += b'\0' * (-len(out) % align)
    return out + b''.join(blobs)


def spm_vocab():
    toks = ['<unk>', '<s>', '</s>'] + ['<0x%02X>' % i for i in range(256)]
    toks += ['\u2581', 'a', 'b', 'ab', '\u2581a', '\u2581ab', 'H', 'e', 'l', 'o', 'll', 'He', 'llo', '\u2581He']
    scores = [0.0] * 259 + [-float(i) for i in range(len(toks) - 259)]
    types = [2, 3, 3] + [6] * 256 + [1] * (len(toks) - 259)
    return [('tokenizer.ggml.model', T_STR, 'llama'),
            ('tokenizer.ggml.tokens', T_ARR, (T_STR, toks)),
            ('tokenizer.ggml.scores', T_ARR, (T_F32, scores)),
            ('tokenizer.ggml.token_type', T_ARR, (T_I32, types)),
            ('tokenizer.ggml.bos_token_id', T_U32, 1),
            ('tokenizer.ggml.eos_token_id', T_U32, 2),
            ('tokenizer.ggml.add_bos_token', T_BOOL, True)]


def bpe_vocab(pre):
    toks = [chr(c) for c in range(0x21, 0x7F)] + ['\u0120', '\u0120H', 'He', 'll', 'llo', '<|endoftext|>']
    merges = ['\u0120 H', 'H e', 'l l', 'll o', 'He llo']
    return [('tokenizer.ggml.model', T_STR, 'gpt2'),
            ('tokenizer.ggml.pre', T_STR, pre),
            ('tokenizer.ggml.tokens', T_ARR, (T_STR, toks)),
            ('tokenizer.ggml.token_type', T_ARR, (T_I32, [1] * (len(toks) - 1) + [3])),
            ('tokenizer.ggml.merges', T_ARR, (T_STR, merges)),
            ('tokenizer.ggml.eos_token_id', T_U32, len(toks) - 1)]


def all_types():
    return [('u8', T_U8, 7), ('i8', T_I8, -7), ('u16', T_U16, 700), ('i16', T_I16, -700),
            ('u32', T_U32, 70000), ('i32', T_I32, -70000), ('f32', T_F32, 1.5), ('bool', T_BOOL, True),
            ('str', T_STR, 'h\u00e9llo'), ('u64', T_U64, 1 << 40), ('i64', T_I64, -(1 << 40)),
            ('f64', T_F64, 2.25), ('arr.i32', T_ARR, (T_I32, [1, 2, 3])),
            ('arr.str', T_ARR, (T_STR, ['x', '', 'yz'])), ('arr.empty', T_ARR, (T_U8, []))]


def write(dirname, name, data):
    d = os.path.join(HERE, 'corpus', dirname)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data)


def main():
    f32 = struct.pack('<8f', *range(8))
    q8 = struct.pack('<e', 0.5) + bytes(range(32))  # one Q8_0 block: f16 scale + 32 int8
    tensors = [('tok.weight', [4, 2], 0, f32), ('q.weight', [32, 1], 8, q8)]
    write('gguf', 'all-types-v3.gguf', gguf(all_types() + [('general.architecture', T_STR, 'llama')]))
    write('gguf', 'all-types-v2.gguf', gguf(all_types(), version=2))
    write('gguf', 'tensors.gguf', gguf([('general.alignment', T_U32, 64)], tensors, align=64))
    write('gguf', 'spm-vocab.gguf', gguf(spm_vocab(), tensors[:1]))
    write('gguf', 'bpe-llama3.gguf', gguf(bpe_vocab('llama-bpe')))
    write('gguf', 'bpe-qwen2.gguf', gguf(bpe_vocab('qwen2')))
    write('gguf', 'bpe-unknown-pre.gguf', gguf(bpe_vocab('nonesuch')))
    write('gguf', 'empty.gguf', gguf([]))

    snippets = ['Hello world', ' Hello, y\'all! How are you \U0001F601 ?\u6211\u60f3\u5728apple\u5de5\u4f5c1314151\u5929\uff5e',
                '   leading spaces\n\n\ttabs\r\n', "it's I'LL we've 1234567 3.14",
                '\u1780\u17b6\u1793\u17cb \U0001F680 (normal) \U0001F636\u200d\U0001F32b\ufe0f',
                '<|im_start|>user\nhi<|im_end|>', '<s>[INST] hi [/INST]</s>', '<|user|>\n  x<|end|>',
                '<|begin_of_text|><|start_header_id|>', '[PAD151650]', 'a' * 300,
                '\xe4pfel \u00bd', 'bad \udcff utf8', '']
    for i, text in enumerate(snippets):
        raw = text.encode('utf-8', 'surrogateescape')
        for v in range(5):
            write('tokenizer', 's%02d-v%d' % (i, v), bytes([v, (i * 3 + v) % 8]) + raw)
    sampler_seeds()
    jinja_seeds()


def sampler_seed(n_vocab, window, params, biases, accepted, rows):
    """params: temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, presence,
    frequency, n_probs, seed (ints for top_k, repeat_last_n, n_probs, seed)."""
    u = lambda v: struct.pack('>I', v & 0xffffffff)
    f = lambda v: struct.pack('>f', v)
    temp, top_k, top_p, min_p, rep, last_n, pres, freq, n_probs, seed = params
    out = u(n_vocab - 1) + u(window) + f(temp) + u(top_k) + f(top_p) + f(min_p) + f(rep) + u(last_n)
    out += f(pres) + f(freq) + u(len(biases)) + u(n_probs) + u(seed)
    for tok, b in biases:
        out += u(tok) + f(b)
    out += u(len(accepted)) + b''.join(u(t) for t in accepted)
    for row in rows:
        out += b''.join(f(x) for x in row)
    return out


def sampler_seeds():
    inf, nan = float('inf'), float('nan')
    row = [float(i % 7) - 3 for i in range(16)]
    write('sampler', 'greedy', sampler_seed(16, 8, (0, 0, 1, 0, 1, 64, 0, 0, 0, 1), [], [1, 2], [row]))
    write('sampler', 'chain', sampler_seed(16, 8, (0.8, 5, 0.9, 0.05, 1.1, 8, 0.1, 0.1, 3, 7),
                                           [(3, -inf), (4, 2.0)], [4, 4, 5], [row, row[::-1]]))
    # the request that crashed the server: FLT_MAX twice and a ban on one token, top_k 1
    write('sampler', 'summed-bias', sampler_seed(16, 8, (1, 1, 1, 0.05, 1, 64, 0, 0, 1, 3),
                                                 [(0, 3.4e38), (0, 3.4e38), (0, -inf)], [], [row]))
    write('sampler', 'nan-row', sampler_seed(16, 8, (1, 40, 0.95, 0.05, 1, 64, 0, 0, 2, 3), [], [1], [[nan] * 16]))
    write('sampler', 'inf-row', sampler_seed(16, 8, (0.7, 0, 0.5, 2.0, 1.3, -1, 0, 0, 20, 3), [],
                                             [0, 1, 2], [[inf, -inf] * 8]))
    write('sampler', 'banned', sampler_seed(4, 0, (nan, 2, nan, nan, nan, 5, 3e38, -3e38, 1, 0), [],
                                            [], [[-inf] * 4]))


# Templates written for the seeds: each construct chat templates use, in the shapes they use it.
JINJA_SEEDS = {
    'chatml': "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
              "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
    'system-first': "{{ bos_token }}{%- if messages[0]['role'] == 'system' %}\n    {%- set sys = messages[0].content %}\n"
                    "    {%- set rest = messages[1:] %}\n{%- else %}\n    {%- set sys = '' %}{%- set rest = messages %}\n"
                    "{%- endif %}\n[{{ sys|trim }}]\n{%- for m in rest %}\n{{ m.role|upper }}: {{ m.content }}{{ eos_token }}"
                    "\n{%- endfor %}\n",
    'tools': "{%- if tools %}{%- for t in tools %}{{ t|tojson }}{{ '\\n' if not loop.last }}{%- endfor %}\n"
             "{{ tools|map(attribute='function')|tojson(indent=2) }}{% endif %}\n"
             "{%- for m in messages if m.role != 'system' %}\n{%- if m.tool_calls %}{%- for c in m.tool_calls %}"
             "<call>{{ c.function.name }}{{ c.function.arguments if c.function.arguments is string "
             "else c.function.arguments|tojson }}</call>{%- endfor %}{%- elif m.role == 'tool' %}<result>"
             "{{ m.content }}</result>{%- else %}{{ m.content }}{%- endif %}{%- endfor %}",
    'namespace': "{%- set ns = namespace(last=-1, seen=[]) %}{%- for m in messages %}{%- if m.role == 'user' %}"
                 "{%- set ns.last = loop.index0 %}{%- set _ = ns.seen.append(m.content) %}{%- endif %}{%- endfor %}"
                 "{{ ns.last }}:{{ ns.seen|join(',') }}{% for m in messages[::-1] %}{{ loop.revindex }}"
                 "{% endfor %}",
    'macros': "{%- macro render(v, depth=0) -%}{%- if v is mapping -%}{ {%- for k, x in v.items() -%}"
              "{{ k }}={{ render(x, depth + 1) }}{{ ',' if not loop.last }}{%- endfor -%} }{%- elif v is string -%}"
              "'{{ v }}'{%- elif v is iterable -%}[{%- for x in v %}{{ render(x, depth + 1) }}{% endfor %}]"
              "{%- else -%}{{ v }}{%- endif -%}{%- endmacro -%}{{ render(tools) }}",
    'strings': "{{ messages[1].content.split(' ')|reverse|join(' ') }}|{{ 'a<think>b</think>c'.split('</think>')[-1] }}"
               "|{{ '  x '.strip() ~ 'Y'.lower() }}|{{ messages|selectattr('role', 'equalto', 'user')|list|length }}"
               "|{{ raise_exception('seed raised') if messages|length > 99 }}{{ strftime_now('%Y-%m-%d') }}",
    'filters': "{% set d = {'b': 2, 'a': 1} %}{{ d|dictsort }}{{ [3, 1, 2]|sort|first }}{{ 'x'|default('y') }}"
               "{{ missing|default('z') }}{{ '7'|int + 1 }}{{ 'a\\nb'|indent(2, true) }}{{ range(3)|list }}"
               "{{ [1, 1, 2]|unique|list }}{{ '{\\\"k\\\": [1]}'|from_json }}{% filter upper %}up{% endfilter %}",
    'whitespace': "a\n  {%- if true -%}\n  b\n  {%- endif %}\n  {# c #}\n{{- ' d ' -}}\n{% raw %}{{ e }}{% endraw %}\n",
    'limits': "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    'recursion': "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    'broken': "{% for m in messages %}{{ m.content",
}
JINJA_VARS = {
    'kwargs': ('chatml', {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                    {"type": "text", "text": "b"}]}],
                          "chat_template_kwargs": {"enable_thinking": False}, "add_generation_prompt": True}),
    'numbers': ('filters', {"messages": [], "n": 1.5, "big": 12345678901234567890, "z": None, "t": True}),
}


def jinja_seeds():
    for name, text in JINJA_SEEDS.items():
        write('jinja', name, text.encode())
    for name, (tmpl, variables) in JINJA_VARS.items():
        write('jinja', name, JINJA_SEEDS[tmpl].encode() + b'\0' + json.dumps(variables).encode())


if __name__ == '__main__':
    main()
