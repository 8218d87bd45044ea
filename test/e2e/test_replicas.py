"""Scale-out: scripts/replicas runs 3 uvlm replicas behind HAProxy (conf/haproxy.cfg.in) on loopback.

Shown here: draining one replica (SIGTERM) during traffic moves new requests to the others with no
failed request, streams and POSTed completions alike; requests with the same X-Session-Id go to one replica, and a multi-turn chat hits
its prompt cache (visible in that replica's /metrics); a replica busy prefilling long prompts is
never marked down by HAProxy's active /health checks.
"""
import asyncio
import csv
import http.client
import io
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from conftest import BIN, ROOT, SANITIZER_MARKS, need

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import uvlmload  # noqa: E402


@pytest.fixture(autouse=True)
def _haproxy_installed():
    need(shutil.which("haproxy"), "haproxy is not installed (scripts/install-deps installs it)")


def free_ports(n):
    """n consecutive loopback ports that were free a moment ago, below the kernel's ephemeral range
    (there an outgoing connection's source port can take one before HAProxy binds it)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    for _ in range(200):
        base = random.randrange(10000, max(10001, ephemeral - n))
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                s.bind(("127.0.0.1", p))
                socks.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise AssertionError("no %d consecutive free ports" % n)


class Cluster:
    def __init__(self, tmp_path, n, uvlm_args):
        self.n = n
        self.dir = str(tmp_path / "replicas")
        self.port = free_ports(2)
        self.stats_port = self.port + 1
        self.base = free_ports(n)
        env = dict(os.environ, UVLM_BIN=BIN)
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
        self.out = open(str(tmp_path / "replicas.out"), "w")
        self.proc = subprocess.Popen(
            [os.path.join(ROOT, "scripts", "replicas"), "-n", str(n), "--port", str(self.port),
             "--stats-port", str(self.stats_port), "--base-port", str(self.base), "--dir", self.dir, "--"]
            + list(uvlm_args), stdout=self.out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        deadline = time.monotonic() + 120
        while not os.path.exists(os.path.join(self.dir, "ready")):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("scripts/replicas did not get ready:\n" + self.output())
            time.sleep(0.05)

    def output(self):
        self.out.flush()
        return open(self.out.name).read()

    def pid(self, i):
        return int(open(os.path.join(self.dir, "replica-%d.pid" % i)).read())

    def replica_log(self, i):
        return open(os.path.join(self.dir, "replica-%d.log" % i), errors="replace").read()

    def haproxy_log(self):
        return open(os.path.join(self.dir, "haproxy.log"), errors="replace").read()

    def stats(self):
        """HAProxy's view of each replica: {name: row of its stats CSV}."""
        with urllib.request.urlopen("http://127.0.0.1:%d/stats;csv" % self.stats_port, timeout=5) as r:
            text = r.read().decode().lstrip("# ")
        return {row["svname"]: row for row in csv.DictReader(io.StringIO(text))
                if row["pxname"] == "uvlm_replicas" and row["svname"].startswith("r")}

    def wait_status(self, name, status, timeout=10):
        deadline = time.monotonic() + timeout
        while self.stats()[name]["status"] != status:
            assert time.monotonic() < deadline, "HAProxy never saw %s %s: %s" % (name, status, self.stats())
            time.sleep(0.1)

    def get(self, path, headers=None, port=None, method="GET", body=None):
        res = asyncio.run(uvlmload.request("127.0.0.1", port or self.port, method, path, body, headers))
        assert res.error is None, res.error
        return res

    def stop(self):
        """Stops HAProxy and drains the replicas; the script exits 0 when every replica did."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(60)
        logs = "".join(self.replica_log(i) for i in range(self.n))
        assert not any(m in logs for m in SANITIZER_MARKS), logs
        assert rc == 0, self.output()


@pytest.fixture
def cluster(tmp_path):
    made = []

    def make(*uvlm_args, n=3):
        c = Cluster(tmp_path, n, uvlm_args)
        made.append(c)
        return c
    yield make
    for c in made:
        c.stop()


def test_drain_one_replica_moves_traffic_with_no_failed_request(cluster):
    c = cluster("--debug-endpoints", "--drain-timeout", "20s")
    assert set(c.stats()) == {"r0", "r1", "r2"}

    async def load_and_drain():
        # streams in flight on every replica when r1 gets SIGTERM at 1 s; traffic goes on 3 s more
        async def drain_r1():
            await asyncio.sleep(1.0)
            os.kill(c.pid(1), signal.SIGTERM)
        tally, _ = await asyncio.gather(
            uvlmload.run_mix("127.0.0.1", c.port, uvlmload.debug_mix(), 24, 4.0, 0.0), drain_r1())
        return tally
    tally = asyncio.run(load_and_drain())
    assert tally.failed == 0, tally.failures
    assert tally.ok > 20 and tally.statuses == {200: tally.ok}, tally.statuses
    # r1 finished what it had and exited 0; HAProxy took it out of the pool
    log1 = c.replica_log(1)
    assert "draining" in log1 and "drained: exiting" in log1, log1
    c.wait_status("r1", "DOWN")
    served = [c.get("/debug/delay?ms=1").headers["x-uvlm-replica"] for _ in range(12)]
    assert set(served) == {"r0", "r2"}, served


def post_loop(port, until, results):
    """POST completions back to back on one kept-alive client connection to HAProxy (so HAProxy
    reuses its idle connections to the replicas) until `until`; appends (status, error) to results."""
    conn = None
    while time.monotonic() < until:
        body = json.dumps({"prompt": random.choice(uvlmload.PROMPTS), "n_predict": 4, "temperature": 0.8})
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("POST", "/completion", body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
            results.append((r.status, None if r.status == 200 else data[:200]))
            if r.getheader("Connection", "").lower() == "close":
                conn.close()
                conn = None
        except (OSError, http.client.HTTPException) as e:
            results.append((0, repr(e)))
            conn.close()
            conn = None
    if conn is not None:
        conn.close()


def test_drains_during_post_completions_fail_no_client_request(cluster):
    """Completions POSTed on kept-alive client connections through HAProxy while two of the three
    replicas drain one after the other: every client request succeeds. A replica closes its idle
    connections when its drain begins, serves what reaches it on connections opened before, and
    says Connection: close from then on; HAProxy retries what met a closed connection on another
    replica (conf/haproxy.cfg.in)."""
    c = cluster("--drain-timeout", "20s")
    results = []
    until = time.monotonic() + 6.0
    workers = [threading.Thread(target=post_loop, args=(c.port, until, results)) for _ in range(12)]
    for w in workers:
        w.start()
    time.sleep(1.5)
    os.kill(c.pid(1), signal.SIGTERM)
    time.sleep(2.0)
    os.kill(c.pid(2), signal.SIGTERM)
    for w in workers:
        w.join(60)
    failed = [r for r in results if r[0] != 200]
    assert not failed and len(results) > 200, (len(results), failed[:10])
    for i in (1, 2):
        log = c.replica_log(i)
        assert "drained: exiting" in log and "shutting down" not in log, log[-3000:]
    c.wait_status("r1", "DOWN")
    c.wait_status("r2", "DOWN")


def test_same_session_id_goes_to_the_same_replica(cluster):
    c = cluster("--debug-endpoints")
    for s in range(6):
        seen = {c.get("/health", {"X-Session-Id": "chat-%d" % s}).headers["x-uvlm-replica"] for _ in range(5)}
        assert len(seen) == 1, (s, seen)
    spread = {c.get("/health").headers["x-uvlm-replica"] for _ in range(9)}
    assert len(spread) > 1, spread  # no header: round-robin


def metric(c, i, name):
    res = c.get("/metrics", port=c.base + i)
    return uvlmload.parse_metrics(res.body.decode()).get(name, 0.0)


def test_multi_turn_chat_with_session_id_hits_one_replicas_prompt_cache(cluster):
    c = cluster("--kv-tokens", "2048")
    session = {"X-Session-Id": "user-42"}
    messages = [{"role": "system", "content": "You are a scribe of the King James Bible."},
                {"role": "user", "content": "And God said"}]
    served = set()
    for turn in range(3):
        res = c.get("/v1/chat/completions", session, method="POST",
                    body={"messages": messages, "max_tokens": 8, "temperature": 0})
        assert res.status == 200, res.body
        served.add(res.headers["x-uvlm-replica"])
        reply = json.loads(res.body)["choices"][0]["message"]["content"]
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": "And then?"}]
    assert len(served) == 1, served
    i = int(served.pop()[1:])
    assert metric(c, i, "uvlm_cached_prompt_tokens_total") > 0
    others = [metric(c, j, "uvlm_requests_total") for j in range(3) if j != i]
    assert others == [0, 0], others


def test_replica_prefilling_long_prompts_is_never_marked_down(cluster):
    c = cluster("--kv-tokens", "8192", "--threads", "1")
    long_prompt = " ".join(["And the LORD spake unto Moses, saying, Speak unto the children of Israel"] * 50)  # ~950 tokens of 1023

    async def prefill_load():
        kinds = [uvlmload.Kind("long_prefill", 1, "POST", "/completion",
                               {"prompt": long_prompt, "n_predict": 4, "cache_prompt": False}, False,
                               lambda r: uvlmload.check_json_200(r, ("content",)),
                               {"X-Session-Id": "heavy"})]  # all on one replica
        return await uvlmload.run_mix("127.0.0.1", c.port, kinds, 4, 6.0)
    tally = asyncio.run(prefill_load())
    assert tally.failed == 0, tally.failures
    busy = [name for name, row in c.stats().items() if int(row["stot"] or 0) > 0]
    assert busy, c.stats()
    for name, row in c.stats().items():
        assert row["status"] == "UP" and row["chkfail"] in ("", "0") and row["chkdown"] in ("", "0"), row
    assert "is DOWN" not in c.haproxy_log()


def syscall_group(name):
    """The calls of a systemd syscall group (@name), nested groups expanded, or {name}."""
    if not name.startswith("@"):
        return {name}
    out = subprocess.run(["systemd-analyze", "syscall-filter", name], capture_output=True, text=True,
                         check=True).stdout
    calls = set()
    for line in out.splitlines()[1:]:
        line = line.strip()
        if line and not line.startswith("#"):
            calls |= syscall_group(line)
    return calls


def test_systemd_unit_lets_the_server_set_its_threads_scheduling():
    """SystemCallFilter= lines, read as systemd does (the first decides allow- or deny-list, each
    later line adds to or takes from it): the sandbox denies the @resources calls but the three that
    set --compute-nice and --loop-slice-us (else they fail with EPERM and the compute threads
    compete with /health as equals), and no other of them."""
    need(shutil.which("systemd-analyze"), "systemd-analyze is not installed")
    unit = open(os.path.join(ROOT, "conf", "uvlm.service")).read()
    allowed = None
    for line in unit.splitlines():
        if not line.startswith("SystemCallFilter="):
            continue
        words = line.split("=", 1)[1].split()
        deny = words[0].startswith("~")
        calls = set().union(*(syscall_group(w.lstrip("~")) for w in words))
        assert allowed is not None or not deny, "the unit's filter starts as an allow-list"
        allowed = calls if allowed is None else (allowed - calls if deny else allowed | calls)
    scheduling = {"sched_setattr", "sched_setscheduler", "setpriority"}
    assert scheduling <= allowed, scheduling - allowed
    assert not (syscall_group("@resources") - scheduling) & allowed


def test_systemd_unit_verifies_and_its_command_line_serves(tmp_path, start_server):
    """conf/uvlm.service: systemd accepts it, and its ExecStart (with this checkout's binary,
    config and model in place of the installed paths) starts a server that answers /health."""
    unit = open(os.path.join(ROOT, "conf", "uvlm.service")).read()
    subst = {"/usr/local/bin/uvlm": BIN, "/etc/uvlm/uvlm.conf": os.path.join(ROOT, "conf", "uvlm.conf"),
             "/var/lib/uvlm/model.gguf": os.path.join(ROOT, "models", "kjv-tiny-q8_0.gguf")}
    for k, v in subst.items():
        unit = unit.replace(k, v)
    exec_start = [l.split("=", 1)[1].split() for l in unit.splitlines() if l.startswith("ExecStart=")]
    assert len(exec_start) == 1 and exec_start[0][0] == BIN, exec_start
    if shutil.which("systemd-analyze"):
        path = tmp_path / "uvlm.service"
        path.write_text(unit)
        p = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True)
        assert p.returncode == 0 and not p.stderr.strip(), p.stderr
        p = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--threshold=30", str(path)],
                           capture_output=True, text=True)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr  # exposure 3.0 or better
    assert os.path.exists(subst["/var/lib/uvlm/model.gguf"]), "the shipped default model is missing"
    assert exec_start[0][1] == "serve", exec_start
    # the same flags after start_server's --host/--port (flags alone run serve); SIGTERM -> exit 0
    srv = start_server(*exec_start[0][2:])
    assert srv.json("GET", "/health")[0] == 200
