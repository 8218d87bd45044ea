"""Config precedence (flags > env > file > defaults), --help, errors naming the key, logging."""
import os
import re
import subprocess

import pytest

from conftest import BIN, ROOT, free_port


def run(*args, env=None, timeout=10):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([BIN] + list(args), capture_output=True, text=True, env=e, timeout=timeout)


def key_works(srv, key):
    return srv.request("GET", "/debug/stats", headers={"X-Api-Key": key})[0] == 200


def test_precedence_flags_env_file_defaults(start_server, tmp_path):
    conf = tmp_path / "u.conf"
    conf.write_text("# comment\napi-key = from-file\n\nmax_body = 2k   \n")
    srv = start_server("--debug-endpoints", "--config", str(conf))
    assert key_works(srv, "from-file")
    assert srv.request("POST", "/debug/echo", b"x" * 2049, {"X-Api-Key": "from-file"})[0] == 413
    srv = start_server("--debug-endpoints", "--config", str(conf), env={"UVLM_API_KEY": "from-env"})
    assert key_works(srv, "from-env") and not key_works(srv, "from-file")
    srv = start_server("--debug-endpoints", "--api-key=from-flag", env={"UVLM_API_KEY": "from-env",
                                                                         "UVLM_CONFIG": str(conf)})
    assert key_works(srv, "from-flag") and not key_works(srv, "from-env") and not key_works(srv, "from-file")
    # the file still applies to what neither env nor flags set
    assert srv.request("POST", "/debug/echo", b"x" * 2049, {"X-Api-Key": "from-flag"})[0] == 413


def test_unknown_or_bad_settings_exit_2_naming_them(tmp_path):
    bad = tmp_path / "bad.conf"
    bad.write_text("port = 1\nno-such-key = 3\n")
    long_line = tmp_path / "long.conf"
    long_line.write_text("port = 1\n#" + " " * 5000 + "port = 2\n")
    cases = [
        (["--no-such-flag"], {}, "--no-such-flag"),
        (["--port", "70000"], {}, "port"),
        (["--port", "abc"], {}, "port"),
        (["--idle-timeout", "5 parsecs"], {}, "idle-timeout"),
        (["--log-level", "loud"], {}, "log-level"),
        (["--config", str(bad)], {}, "no-such-key"),
        (["--config", str(long_line)], {}, "long.conf:2: line longer than 4095 bytes"),
        (["--config", str(tmp_path / "missing.conf")], {}, "missing.conf"),
        ([], {"UVLM_MAX_BODY": "lots"}, "UVLM_MAX_BODY"),
        (["stray"], {}, "stray"),
    ]
    for args, env, named in cases:
        p = run(*(args or ["--port", "0", "--log-level", "info"]), env=env) if args else run("--port", "0", env=env)
        assert p.returncode == 2, (args, env, p.stderr)
        assert named in p.stderr, (args, env, p.stderr)


def test_help_lists_every_setting_and_conf_file_documents_them():
    p = run("--help")
    assert p.returncode == 0
    names = re.findall(r"--([a-z0-9-]+) ", p.stdout)
    assert {"host", "port", "api-key", "cors-origin", "max-body", "drain-timeout", "sse-queue-bytes"} <= set(names)
    with open(os.path.join(ROOT, "conf", "uvlm.conf")) as f:
        conf = f.read()
    for name in names:
        if name in ("config", "help", "help-markdown"):
            continue
        assert re.search(r"^#?\s*%s\s*=" % re.escape(name), conf, re.M), "conf/uvlm.conf must document every setting; it lacks " + name


def test_shipped_conf_file_loads(start_server):
    srv = start_server("--config", os.path.join(ROOT, "conf", "uvlm.conf"))
    assert srv.json("GET", "/health") == (200, {"status": "ok"})


def test_access_log_line_and_levels(start_server):
    srv = start_server("--debug-endpoints")
    srv.request("POST", "/debug/echo", body=b"12345")
    m = srv.wait_log(r'(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) INFO  127\.0\.0\.1:\d+ "POST /debug/echo" 200 '
                     r'(\d+\.\d)ms (\d+)B')
    assert int(m.group(3)) > 5
    quiet = start_server("--log-level", "warn", port=free_port())
    quiet.request("GET", "/health")
    assert "GET /health" not in quiet.log() and "INFO" not in quiet.log()


def _thread_nices(pid, field=19):
    """{tid: nice} of every thread of a process (field 19 of /proc/PID/task/TID/stat; 41: policy)."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
            out[int(tid)] = int(f.read().rsplit(")", 1)[1].split()[field - 3])
    return out


SCHED_OTHER, SCHED_IDLE = 0, 5


def test_compute_threads_default_to_the_loops_priority_and_policy(start_server):
    """The default (--compute-nice 0): no thread under the idle policy, which would starve generation
    beside any CPU-bound neighbour (scripts/bench.d/52-neighbours), and none below the loop's level;
    --compute-nice 20 puts exactly the compute threads under it."""
    base = os.nice(0)
    srv = start_server("--threads", "2")
    assert srv.json("POST", "/completion", b'{"prompt": "And God said", "n_predict": 4}')[0] == 200
    assert set(_thread_nices(srv.proc.pid, 41).values()) == {SCHED_OTHER}
    assert set(_thread_nices(srv.proc.pid).values()) == {base}
    srv.stop()
    srv = start_server("--compute-nice", "20", "--threads", "2")
    assert srv.json("POST", "/completion", b'{"prompt": "And God said", "n_predict": 4}')[0] == 200
    policies = _thread_nices(srv.proc.pid, 41)
    assert policies[srv.proc.pid] == SCHED_OTHER  # the loop thread
    assert sorted(policies.values()).count(SCHED_IDLE) == 2, policies  # the compute thread and its worker


def test_compute_nice_lowers_the_compute_threads_not_the_loop(start_server):
    base = os.nice(0)
    if base + 7 > 19:
        pytest.skip("the test runs at nice %d: no room below it" % base)
    srv = start_server("--compute-nice", "7", "--threads", "2")
    assert srv.json("POST", "/completion", b'{"prompt": "And God said", "n_predict": 4}')[0] == 200
    nices = _thread_nices(srv.proc.pid)
    assert nices[srv.proc.pid] == base  # the loop thread (main) keeps its level
    lowered = [t for t, n in nices.items() if n == base + 7]
    # the compute thread (which loaded and stepped) and the forward pass's one worker; the libuv
    # threadpool threads, which only wait for the compute thread, keep the loop's level (they
    # report finished work to the loop: see src/net/compute_thread.h)
    assert len(lowered) == 2, nices
    assert len([t for t, n in nices.items() if n == base]) >= 2, nices  # the loop + a threadpool thread
    assert all(n in (base, base + 7) for n in nices.values()), nices
    srv.stop()
    srv = start_server("--compute-nice", "0", "--threads", "2")
    assert srv.json("POST", "/completion", b'{"prompt": "And God said", "n_predict": 4}')[0] == 200
    assert set(_thread_nices(srv.proc.pid).values()) == {base}


def _thread_slices(pid):
    """{tid: se.slice in ns} of every thread of a process (Linux 6.12+'s /proc/PID/task/TID/sched)."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/sched" % (pid, tid)) as f:
                for line in f:
                    if line.startswith("se.slice"):
                        out[int(tid)] = int(line.split(":")[1])
        except OSError:  # a thread that has just exited, or no such file on this kernel
            continue
    return out


def test_loop_thread_asks_for_a_short_slice(start_server):
    srv = start_server("--threads", "2")
    assert srv.json("POST", "/completion", b'{"prompt": "And God said", "n_predict": 4}')[0] == 200
    slices = _thread_slices(srv.proc.pid)
    if not slices:
        pytest.skip("this kernel's /proc/PID/sched has no se.slice (Linux 6.12+ shows it)")
    # the loop runs on the main thread (tid == pid); the default --loop-slice-us is 500
    assert slices[srv.proc.pid] == 500 * 1000, slices
    # only the loop: the threads made from it (threadpool, compute) keep the kernel's slice
    assert all(s != 500 * 1000 for t, s in slices.items() if t != srv.proc.pid), slices
    srv.stop()
    srv = start_server("--loop-slice-us", "0", "--threads", "2")
    assert len(set(_thread_slices(srv.proc.pid).values())) == 1
