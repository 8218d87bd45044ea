"""A request's grammar is compiled off the loop thread: while grammars slow to compile (about a
tenth of a second each in the release build) are compiled, /health keeps answering at once; each
such request still gets its own answer (here the 400 that says why the grammar is refused), and a grammar
compiled once is found in the engine's cache by the next request."""
import json
import threading
import time

from serving_helpers import PROMPT, post, sse_events, start

# Three blocks of 9000 optional characters: the compile builds them before refusing the start as
# too ambiguous: about 0.1 s on an idle machine with the default model (a fourth block passes the
# state limit instead). A distinct text per request, so that none is found compiled.
SLOW = "root ::= (.?){9000} (.?){9000} (.?){%d}\n"
HEALTH_MAX_S = 0.1  # a compile on the loop would hold it about as long, eight of them 0.4 s


def poll_health(srv, stop, lat):
    """GET /health on one kept-alive connection until stop is set: each answer's latency in lat."""
    c = srv.conn(timeout=10)
    try:
        while not stop.is_set():
            t0 = time.monotonic()
            c.request("GET", "/health")
            r = c.getresponse()
            r.read()
            lat.append((time.monotonic() - t0, r.status))
            time.sleep(0.002)
    finally:
        c.close()


def test_slow_grammars_do_not_stall_health():
    srv = start()
    try:
        stop, lat = threading.Event(), []
        poller = threading.Thread(target=poll_health, args=(srv, stop, lat))
        poller.start()
        time.sleep(0.2)  # the poller is answered before the grammars come
        answers = [None] * 8  # on 2 cores four rounds of compiles: 0.3-0.5 s in all

        def one(i):
            answers[i] = post(srv, "/completion", {"prompt": PROMPT, "n_predict": 4, "grammar": SLOW % (9001 + i)})

        t0 = time.monotonic()
        senders = [threading.Thread(target=one, args=(i,)) for i in range(len(answers))]
        for t in senders:
            t.start()
        for t in senders:
            t.join()
        spent = time.monotonic() - t0
        n_during = len(lat)
        time.sleep(0.1)
        stop.set()
        poller.join()
        for status, body in answers:
            assert status == 400, body
            assert body["error"]["param"] == "grammar" and "ambiguous" in body["error"]["message"], body
        assert spent > 0.2, spent  # the grammars were slow enough for the check below to mean something
        assert n_during >= 10, lat  # /health was polled all along
        assert all(status == 200 for _, status in lat), lat
        worst = max(s for s, _ in lat)
        assert worst < HEALTH_MAX_S, "a /health answer took %.0f ms" % (worst * 1e3)

        # a grammar that compiles: generated under it, then found compiled the next time
        for _ in range(2):
            status, body = post(srv, "/completion", {"prompt": PROMPT, "n_predict": 8,
                                                     "grammar": 'root ::= " yes" | " no"'})
            assert status == 200 and body["content"] in (" yes", " no"), body
    finally:
        srv.check_clean_exit()


# Stacks that double with every byte while each walks 33,000 empty positions: the matcher stops at
# its work bound per call (sampler/grammar.h) within milliseconds; without one it ran for seconds
# on the compute thread, inside the steps the other requests share.
AMBIGUOUS = 'root ::= p\np ::= . ""{0,6}{5517} p*? p*\n'
GAP_MAX_S = 1.0  # release: a few ms between tokens; ASan: tens of ms


def test_ambiguous_grammar_fails_alone_without_stalling_other_streams():
    srv = start()
    try:
        times, stop = [], threading.Event()

        def other():
            c = srv.conn(timeout=60)
            try:
                c.request("POST", "/completion", json.dumps({"prompt": PROMPT, "n_predict": 100000, "ignore_eos": True,
                                                             "stream": True}), {"Content-Type": "application/json"})
                r = c.getresponse()
                assert r.status == 200
                for _ in sse_events(r):
                    times.append(time.monotonic())
                    if stop.is_set():
                        break
            finally:
                c.close()

        streamer = threading.Thread(target=other)
        streamer.start()
        while len(times) < 20:  # the stream is under way
            time.sleep(0.01)
        t0 = time.monotonic()
        for body in ({"prompt": PROMPT, "n_predict": 16, "grammar": AMBIGUOUS},
                     {"prompt": PROMPT, "n_predict": 16, "grammar": AMBIGUOUS, "stream": True}):
            c = srv.conn(timeout=60)
            c.request("POST", "/completion", json.dumps(body), {"Content-Type": "application/json"})
            r = c.getresponse()
            if body.get("stream"):  # the head is sent: the error comes as the last event
                assert r.status == 200
                err = json.loads(list(sse_events(r))[-1])["error"]
            else:
                assert r.status == 400
                err = json.loads(r.read())["error"]
            c.close()
            assert err["code"] == 400 and err["type"] == "invalid_request_error", err
            assert "too ambiguous" in err["message"], err
        t1 = time.monotonic()
        time.sleep(0.2)
        stop.set()
        streamer.join()
        during = [b - a for a, b in zip(times, times[1:]) if t0 <= b <= t1 + 0.2]
        assert len(during) >= 5, (t1 - t0, len(times))  # the other stream ran all along
        assert max(during) < GAP_MAX_S, "the other stream paused %.2f s" % max(during)
    finally:
        srv.check_clean_exit()
