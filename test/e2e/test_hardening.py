"""Hostile or faulty requests and models: each gets its own clear answer and the server, and every
other client's request, go on (the sampler is total; a sequence with invalid logits ends alone)."""
import struct
import subprocess

from conftest import BIN, Server
from serving_helpers import KJV, post, start, stream, wait_ready

CRASHER = {"prompt": "a", "logit_bias": [[0, 3.4e38], [0, 3.4e38], [0, False]], "top_k": 1, "n_probs": 1,
           "n_predict": 4}


def test_summed_biases_ban_or_are_refused_and_the_server_goes_on():
    srv = start()
    try:
        check_summed_biases(srv)
    finally:
        srv.check_clean_exit()


def check_summed_biases(srv):
    status, body = post(srv, "/completion", CRASHER)
    assert status == 200, body  # FLT_MAX + FLT_MAX + false: a ban
    assert all(p["id"] != 0 for p in body["completion_probabilities"])
    events = stream(srv, "/completion", CRASHER)
    assert '"stop":true' in events[-1].replace(" ", ""), events[-1]
    status, body = post(srv, "/completion", dict(CRASHER, logit_bias=[[5, 3.4e38], [5, 3.4e38]]))
    assert status == 400 and body["error"]["param"] == "logit_bias", body
    assert srv.json("GET", "/health")[0] == 200


def test_repeat_last_n_is_capped_at_the_context():
    srv = start()
    try:
        check_repeat_window(srv)
    finally:
        srv.check_clean_exit()


def check_repeat_window(srv):
    status, body = post(srv, "/completion", {"prompt": "And God said", "n_predict": 4, "n": 16,
                                             "repeat_last_n": 2147483647, "repeat_penalty": 1.3})
    assert status == 200, body
    with open("/proc/%d/status" % srv.proc.pid) as f:
        rss_kib = int(next(line for line in f if line.startswith("VmRSS")).split()[1])
    assert rss_kib < 1 << 20, rss_kib  # far below 16 windows of 8 GiB


def gguf_tensor_data(path):
    """{tensor name: (absolute file offset of its data, type)} of a GGUF v3 file."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 4

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("Q")
        pos += n
        return data[pos - n:pos]

    sizes = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        return take(sizes[t])

    _version, n_tensors, n_kv = take("I"), take("Q"), take("Q")
    align = 32
    for _ in range(n_kv):
        key = string()
        v = value(take("I"))
        if key == b"general.alignment":
            align = v
    infos = {}
    for _ in range(n_tensors):
        name = string().decode()
        dims = [take("Q") for _ in range(take("I"))]
        infos[name] = (take("I"), take("Q"), dims)
    start_of_data = (pos + align - 1) // align * align
    return {k: (start_of_data + off, t) for k, (t, off, _dims) in infos.items()}


def test_a_model_that_computes_nan_fails_its_requests_alone(tmp_path):
    model = str(tmp_path / "nan.gguf")
    subprocess.run([BIN, "mkmodel", "--out", model, "--vocab", KJV, "--type", "f32", "--n-embd", "64",
                    "--n-layer", "1", "--n-head", "2", "--n-head-kv", "2", "--n-ff", "128"],
                   check=True, capture_output=True)
    off, typ = gguf_tensor_data(model)["output_norm.weight"]
    assert typ == 0  # F32
    with open(model, "r+b") as f:  # a corrupt model: its last norm holds NaN
        f.seek(off)
        f.write(struct.pack("<f", float("nan")) * 64)
    srv = wait_ready(Server(["--model", model]))
    try:
        check_nan_model(srv)
    finally:
        srv.check_clean_exit()


def check_nan_model(srv):
    for body in ({"prompt": [1, 2, 3], "n_predict": 4}, {"prompt": [1, 2, 3], "n_predict": 4, "n": 3}):
        status, out = post(srv, "/completion", body)
        assert status == 500 and "NaN" in out["error"]["message"], out
    events = stream(srv, "/completion", {"prompt": [1, 2], "n_predict": 4})
    assert "error" in events[-1], events
    assert srv.json("GET", "/health")[0] == 200
