/* conn_test.c: the handler contract of api/http.h against the real server on a real loop: a
 * client thread talks to it over loopback with blocking sockets while the loop runs here. */
#include "test.h"
#include "api/router.h"
#include "common/err.h"
#include "net/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <sys/time.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

struct fixture {
    uv_loop_t loop;
    struct config cfg;
    struct app app;
    struct router router;   /* the request hook, as cmd/serve.c sets it */
    uv_async_t done;        /* the client thread is finished: drain the server */
    pthread_t client;
    void (*scenario)(struct fixture *f);
    /* what handlers saw */
    int cancels, send_rc, end_rc, events_sent, stops;
    uv_timer_t timer;
    struct http_request *req;
    char reply[4096];       /* what the client read */
    size_t reply_len;
    int read_end;           /* how the client's last read ended: 0 the server closed, else errno */
    struct app_faults faults; /* armed before the server starts */
    int in_drain;           /* requests handled inside app_drain */
    bool check_heads;       /* the head hook is the router's refusal, as cmd/serve.c sets it */
    int heads;              /* head hook calls */
};

static int client_connect(struct fixture *f, int rcvbuf) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf) setsockopt(s, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    struct timeval tv = {.tv_sec = 3}; /* a server that never answers fails the test, not hangs it */
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)f->app.port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT(connect(s, (struct sockaddr *)&a, sizeof a) == 0);
    return s;
}

static void client_send(int s, const char *text) {
    ASSERT(send(s, text, strlen(text), 0) == (ssize_t)strlen(text));
}

/* Read until `marker` shows up (or the peer closes); the bytes land in f->reply. */
static void client_read_until(struct fixture *f, int s, const char *marker) {
    while (f->reply_len < sizeof f->reply - 1) {
        ssize_t n = recv(s, f->reply + f->reply_len, sizeof f->reply - 1 - f->reply_len, 0);
        f->read_end = n < 0 ? errno : 0;
        if (n <= 0) break;
        f->reply_len += (size_t)n;
        f->reply[f->reply_len] = '\0';
        if (marker && strstr(f->reply, marker)) break;
    }
}

static void *client_main(void *arg) {
    struct fixture *f = arg;
    f->scenario(f);
    uv_async_send(&f->done);
    return NULL;
}

static void stop_hook(struct app *app, void *data) {
    struct fixture *f = data;
    f->stops++;
    uv_close((uv_handle_t *)&f->timer, NULL); /* what a scheduler does with its tick timer */
}

static void done_cb(uv_async_t *a) {
    struct fixture *f = a->data;
    uv_close((uv_handle_t *)a, NULL);
    app_drain(&f->app);
}

static void dispatch_cb(struct http_request *req, void *router) {
    router_dispatch(router, req);
}

static struct fixture *head_fixture; /* the head hook's data is the router's: the fixture here */
static bool head_cb(struct http_request *req, void *router) {
    head_fixture->heads++;
    return router_refuse(router, req);
}

/* Serve `route` with the given extra flags while `scenario` runs in a client thread. */
static int run_server(struct fixture *f, http_handler_fn route, void (*scenario)(struct fixture *),
                      const char *flag, const char *value) {
    char *argv[] = {"uvlm", "--port", "0", "--log-level", "off", "--drain-timeout", "2s", (char *)flag,
                    (char *)value, NULL};
    char msg[256];
    if (config_load(&f->cfg, flag ? 9 : 7, argv, NULL, msg, sizeof msg)) return -1;
    uv_loop_init(&f->loop);
    app_init(&f->app, &f->cfg, &f->loop);
    f->app.faults = f->faults;
    router_init(&f->router, &f->cfg.api_key, &f->cfg.cors_origin);
    f->app.on_request = dispatch_cb;
    f->app.request_data = &f->router;
    if (f->check_heads) {
        head_fixture = f;
        f->app.on_head = head_cb;
    }
    router_add(&f->router, "GET", "/t", route, f, 0);
    router_add(&f->router, "POST", "/t", route, f, 0); /* a request with model work (held when many) */
    uv_timer_init(&f->loop, &f->timer); /* a live handle of someone else's: closed by the stop hook */
    f->timer.data = f;
    app_on_stop(&f->app, stop_hook, f);
    uv_async_init(&f->loop, &f->done, done_cb);
    f->done.data = f;
    f->scenario = scenario;
    int rc = app_start(&f->app);
    if (!rc) {
        pthread_create(&f->client, NULL, client_main, f);
        uv_run(&f->loop, UV_RUN_DEFAULT);
        pthread_join(f->client, NULL);
    }
    if (!uv_is_closing((uv_handle_t *)&f->timer)) uv_close((uv_handle_t *)&f->timer, NULL);
    if (!uv_is_closing((uv_handle_t *)&f->done)) uv_close((uv_handle_t *)&f->done, NULL);
    app_close(&f->app);
    rc = rc ? rc : uv_loop_close(&f->loop);
    config_free(&f->cfg);
    return rc;
}

/* --- a stream whose client leaves: one cancel callback, and the timer stops in it ---------- */

static void counting_cancel_cb(struct http_request *req, void *data) {
    struct fixture *f = data;
    f->cancels++;
    uv_timer_stop(&f->timer);
}

static void tick_cb(uv_timer_t *t) {
    struct fixture *f = t->data;
    f->send_rc = http_sse_send(f->req, "{\"tick\":1}", 10);
    f->events_sent++;
}

static void stream_route(struct http_request *req, void *data) {
    struct fixture *f = data;
    f->req = req;
    if (http_sse_start(req, counting_cancel_cb, f)) return;
    f->end_rc = http_sse_send(req, "two\nlines", 9); /* refused: it would end the event */
    http_sse_send(req, "{\"first\":true}", 14);
    uv_timer_start(&f->timer, tick_cb, 5, 5);
}

static void leave_after_first_event(struct fixture *f) {
    int s = client_connect(f, 0);
    client_send(s, "GET /t HTTP/1.1\r\nHost: x\r\n\r\n");
    client_read_until(f, s, "data: {\"first\":true}\n\n");
    close(s);
    usleep(100 * 1000); /* let the server notice before the drain starts */
}

TEST(conn_stream_client_leaves_cancel_called_once) {
    static struct fixture f;
    memset(&f, 0, sizeof f);
    CHECK_EQ_INT(run_server(&f, stream_route, leave_after_first_event, NULL, NULL), 0);
    CHECK(strstr(f.reply, "HTTP/1.1 200 OK\r\n") && strstr(f.reply, "text/event-stream"));
    CHECK_EQ_INT(f.end_rc, -ERR_INVAL);
    CHECK(!strstr(f.reply, "two"));
    CHECK_EQ_INT(f.cancels, 1);
    CHECK_EQ_INT(f.stops, 1);
    CHECK_EQ_INT(f.app.counters.requests_cancelled, 1);
    CHECK_EQ_INT(f.app.counters.requests_inflight, 0);
}

/* --- a slow reader: send fails with TOOBIG, finishing the dead stream means no cancel ------ */

static void flood_route(struct http_request *req, void *data) {
    struct fixture *f = data;
    static char event[8192];
    memset(event, 'x', sizeof event);
    if (http_sse_start(req, counting_cancel_cb, f)) return;
    int rc = 0;
    for (int i = 0; i < 100000 && rc == 0; i++, f->events_sent++) rc = http_sse_send(req, event, sizeof event);
    f->send_rc = rc;
    f->end_rc = http_sse_end(req); /* the owner finishes: no cancel callback may follow */
}

static void never_read(struct fixture *f) {
    int s = client_connect(f, 4096);
    client_send(s, "GET /t HTTP/1.1\r\nHost: x\r\n\r\n");
    usleep(200 * 1000);
    close(s);
}

TEST(conn_backpressure_closes_and_finishing_suppresses_cancel) {
    static struct fixture f;
    memset(&f, 0, sizeof f);
    CHECK_EQ_INT(run_server(&f, flood_route, never_read, "--sse-queue-bytes", "64k"), 0);
    CHECK_EQ_INT(f.send_rc, -ERR_TOOBIG);
    CHECK(f.events_sent < 100000); /* bounded: the kernel buffers plus 64k, never 800 MB */
    CHECK_EQ_INT(f.end_rc, -ERR_CANCELLED);
    CHECK_EQ_INT(f.cancels, 0);
    CHECK_EQ_INT(f.app.counters.backpressure_closes, 1);
}

/* --- a late answer: the request stays valid until answered on the loop ------------------- */

static void late_cb(uv_timer_t *t) {
    struct fixture *f = t->data;
    f->end_rc = http_respond_json(f->req, 201, "{\"late\":true}");
}

static void late_route(struct http_request *req, void *data) {
    struct fixture *f = data;
    f->req = req;
    http_add_header(req, "X-Extra", "1");
    f->send_rc = http_add_header(req, "Bad", "a\r\nInjected: 1"); /* refused */
    http_on_cancel(req, counting_cancel_cb, f);
    uv_timer_start(&f->timer, late_cb, 50, 0);
}

static void read_whole_response(struct fixture *f) {
    int s = client_connect(f, 0);
    client_send(s, "GET /t HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    client_read_until(f, s, NULL);
    close(s);
}

TEST(conn_late_answer_is_delivered) {
    static struct fixture f;
    memset(&f, 0, sizeof f);
    CHECK_EQ_INT(run_server(&f, late_route, read_whole_response, NULL, NULL), 0);
    CHECK_EQ_INT(f.end_rc, 0);
    CHECK_EQ_INT(f.send_rc, -ERR_INVAL);
    CHECK_EQ_INT(f.cancels, 0);
    CHECK(strstr(f.reply, "HTTP/1.1 201 Created\r\n"));
    CHECK(strstr(f.reply, "X-Extra: 1\r\n"));
    CHECK(!strstr(f.reply, "Injected"));
    CHECK(strstr(f.reply, "Connection: close\r\n"));
    CHECK(strstr(f.reply, "\r\n\r\n{\"late\":true}"));
}

/* --- the response head stays in its buffer whatever a handler adds ------------------------ */

static void big_head_route(struct http_request *req, void *data) {
    struct fixture *f = data;
    char value[200], content_type[1024];
    memset(value, 'v', sizeof value - 1);
    value[sizeof value - 1] = '\0';
    int added = 0;
    while (http_add_header(req, "X-Fill", value) == 0) added++; /* the extra headers are full */
    memset(content_type, 't', sizeof content_type - 1);
    content_type[sizeof content_type - 1] = '\0';
    f->events_sent = added;
    f->end_rc = http_respond(req, 200, content_type, "{}", 2);
}

TEST(conn_response_head_is_bounded) {
    static struct fixture f;
    memset(&f, 0, sizeof f);
    CHECK_EQ_INT(run_server(&f, big_head_route, read_whole_response, NULL, NULL), 0);
    CHECK_EQ_INT(f.end_rc, 0);
    CHECK(f.events_sent >= 9); /* about 2 KiB of extra headers */
    CHECK(strstr(f.reply, "HTTP/1.1 200 OK\r\n") == f.reply);
    CHECK(strstr(f.reply, "\r\nX-Fill: vvv"));
    CHECK(strstr(f.reply, "\r\n\r\n{}"));
}

/* --- a finishing call whose write fails: the request is dead, closed, and no cancel follows -- */

enum finish_fault { RESPOND_NOMEM, RESPOND_WRITE_FAILS, SSE_END_WRITE_FAILS, SSE_START_NOMEM, SSE_SEND_NOMEM };

static void arm(struct fixture *f, enum finish_fault how) {
    if (how == RESPOND_WRITE_FAILS || how == SSE_END_WRITE_FAILS) f->app.faults.writes = 1;
    else f->app.faults.allocs = 1;
}

static void finish_later_cb(uv_timer_t *t) {
    struct fixture *f = t->data;
    arm(f, (enum finish_fault)f->events_sent);
    if (f->events_sent == SSE_END_WRITE_FAILS) f->end_rc = http_sse_end(f->req);
    else if (f->events_sent == SSE_SEND_NOMEM) f->send_rc = http_sse_send(f->req, "{}", 2);
    else f->end_rc = http_respond_json(f->req, 200, "{}");
}

/* f->events_sent says which call fails (enum finish_fault). */
static void failing_finish_route(struct http_request *req, void *data) {
    struct fixture *f = data;
    f->req = req;
    if (f->events_sent == SSE_START_NOMEM) {
        http_on_cancel(req, counting_cancel_cb, f); /* answered later, then it turns into a stream */
        arm(f, SSE_START_NOMEM);
        f->end_rc = http_sse_start(req, counting_cancel_cb, f);
        return;
    }
    if (f->events_sent == SSE_END_WRITE_FAILS || f->events_sent == SSE_SEND_NOMEM) {
        if (http_sse_start(req, counting_cancel_cb, f)) return;
        http_sse_send(req, "{\"first\":true}", 14);
    } else {
        http_on_cancel(req, counting_cancel_cb, f);
    }
    uv_timer_start(&f->timer, finish_later_cb, 20, 0);
}

static int run_failing_finish(struct fixture *f, enum finish_fault how) {
    memset(f, 0, sizeof *f);
    f->events_sent = how;
    f->end_rc = f->send_rc = 1;
    return run_server(f, failing_finish_route, read_whole_response, NULL, NULL);
}

TEST(conn_failed_respond_closes_and_no_cancel_follows) {
    static struct fixture f;
    for (enum finish_fault how = RESPOND_NOMEM; how <= SSE_START_NOMEM; how++) {
        CHECK_EQ_INT(run_failing_finish(&f, how), 0);
        CHECK_EQ_INT(f.end_rc, -ERR_CANCELLED); /* finished: the owner may free its state now */
        CHECK_EQ_INT(f.cancels, 0);
        CHECK_EQ_INT(f.read_end, 0); /* the client sees the connection closed, not a silence */
        CHECK(!strstr(f.reply, "\r\n0\r\n\r\n") && !strstr(f.reply, "{}"));
        CHECK_EQ_INT(f.app.counters.requests_inflight, 0);
        CHECK_EQ_INT(f.app.counters.requests_cancelled, 0);
    }
}

TEST(conn_failed_sse_send_closes_and_cancel_follows) {
    static struct fixture f;
    CHECK_EQ_INT(run_failing_finish(&f, SSE_SEND_NOMEM), 0);
    CHECK_EQ_INT(f.send_rc, -ERR_CANCELLED);
    CHECK_EQ_INT(f.cancels, 1); /* the owner waits for it: it comes, once */
    CHECK_EQ_INT(f.read_end, 0);
    CHECK(strstr(f.reply, "data: {\"first\":true}\n\n"));
    CHECK_EQ_INT(f.app.counters.requests_inflight, 0);
}

/* --- no memory for a connection: it is taken and closed, and the listener keeps accepting --- */

static void ok_route(struct http_request *req, void *data) {
    http_respond_json(req, 200, "{\"ok\":true}");
}

/* Opens f->faults.allocs + 1 connections at once, each sending a request; the first finds no
 * memory. How many more are dropped depends on timing (one that waits for the busy spare
 * handle tries to allocate again), but none may be left without either an answer or a close.
 * f->events_sent counts the ones closed unanswered, f->send_rc the ones left silent. */
static void connect_at_once(struct fixture *f) {
    static const char get[] = "GET /t HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    int s[4], n = f->faults.allocs + 1;
    ASSERT(n <= 4);
    for (int i = 0; i < n; i++) s[i] = client_connect(f, 0);
    for (int i = 0; i < n; i++) send(s[i], get, sizeof get - 1, MSG_NOSIGNAL); /* may meet a close */
    for (int i = 0; i < n; i++) {
        f->reply_len = 0;
        client_read_until(f, s[i], NULL);
        if (f->reply_len == 0 && (f->read_end == 0 || f->read_end == ECONNRESET)) f->events_sent++;
        else if (!strstr(f->reply, "\r\n\r\n{\"ok\":true}")) f->send_rc++;
        close(s[i]);
    }
}

TEST(conn_accept_out_of_memory_keeps_listening) {
    static struct fixture f;
    for (int faults = 1; faults <= 3; faults += 2) {
        memset(&f, 0, sizeof f);
        f.faults.allocs = faults;
        CHECK_EQ_INT(run_server(&f, ok_route, connect_at_once, NULL, NULL), 0);
        CHECK_EQ_INT(f.send_rc, 0); /* none left silent */
        CHECK(f.events_sent >= 1);
        CHECK_EQ_INT((int)f.app.counters.connections_dropped, f.events_sent);
        CHECK_EQ_INT((int)f.app.counters.connections_total + f.events_sent, faults + 1);
        CHECK(f.app.counters.connections_total >= 1); /* the listener still accepts */
        if (faults == 1) CHECK(strstr(f.reply, "\r\n\r\n{\"ok\":true}")); /* the last one was served */
    }
}

/* --- many requests with work at once: a few per loop iteration, the rest held, in order --- */

static void echo_order_route(struct http_request *req, void *data) {
    struct fixture *f = data;
    f->events_sent++;
    if (f->events_sent == 6) f->send_rc = f->app.counters.requests_inflight; /* held ones count */
    http_respond(req, 200, "text/plain", req->body, req->body_len);
}

static void pipelined_posts(struct fixture *f) {
    char all[2048];
    size_t n = 0;
    for (int i = 0; i < 10; i++)
        n += (size_t)snprintf(all + n, sizeof all - n, "POST /t HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n<%d>", i);
    int s = client_connect(f, 0);
    client_send(s, all); /* one segment: ten complete requests in one read */
    client_read_until(f, s, "<9>");
    close(s);
}

TEST(conn_requests_with_work_are_paced_and_keep_their_order) {
    static struct fixture f;
    memset(&f, 0, sizeof f);
    CHECK_EQ_INT(run_server(&f, echo_order_route, pipelined_posts, "--debug-endpoints", "true"), 0);
    CHECK_EQ_INT(f.events_sent, 10);
    const char *at = f.reply;
    for (int i = 0; i < 10; i++) { /* every answer, in request order */
        char want[16];
        snprintf(want, sizeof want, "<%d>", i);
        const char *next = strstr(at, want);
        CHECK(next != NULL);
        if (!next) break;
        at = next;
    }
    /* 4 in the iteration that read them, the 5th held for a later iteration, which dispatches
     * it and the ones after it within that iteration's budget of 4 */
    CHECK(f.app.counters.requests_held >= 2);
    CHECK_EQ_INT(f.app.loop_stats.requests_iter_max, 4);
    CHECK_EQ_INT(f.send_rc, 1); /* the 6th, dispatched from the hold, was still in flight */
    CHECK_EQ_INT(f.app.counters.requests_inflight, 0);
}

/* Pipelined POSTs followed by a half-close (shutdown(SHUT_WR), e.g. `printf ... | nc -N`): the EOF
 * finds requests HELD by the pacing; they are still owed their answers (it once closed the
 * connection as "client gone" and requests 4..9 got none). */

static void pipelined_posts_then_half_close(struct fixture *f) {
    char all[2048];
    size_t n = 0;
    for (int i = 0; i < 10; i++)
        n += (size_t)snprintf(all + n, sizeof all - n, "POST /t HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n<%d>", i);
    int s = client_connect(f, 0);
    client_send(s, all);
    shutdown(s, SHUT_WR); /* done sending; still reading the answers */
    client_read_until(f, s, NULL); /* until the server closes */
    close(s);
}

TEST(conn_half_close_after_held_requests_answers_all) {
    static struct fixture f;
    memset(&f, 0, sizeof f);
    CHECK_EQ_INT(run_server(&f, echo_order_route, pipelined_posts_then_half_close, NULL, NULL), 0);
    fprintf(stderr, "  handled %d of 10, held %llu, reply has <3>: %d, <9>: %d\n", f.events_sent,
            (unsigned long long)f.app.counters.requests_held, strstr(f.reply, "<3>") != NULL,
            strstr(f.reply, "<9>") != NULL);
    CHECK_EQ_INT(f.events_sent, 10);
    CHECK(strstr(f.reply, "<9>") != NULL);
}

/* --- clients that leave: their place is free at once, and the owner hears of it before its
 * (paced) cancel callback: it can stop the work at once ------------------------------------ */

#define LEAVERS 12 /* more than the cancel callbacks run per iteration (8) */

struct leaver {
    struct fixture *f;
    struct http_request *req;
    int aborted, cancelled;
    int open_at_cancel;      /* connections_open when its cancel callback ran */
};
static struct leaver leavers[LEAVERS];
static int n_leavers;

static void leaver_abort_cb(struct http_request *req, void *data) {
    struct leaver *l = data;
    l->aborted++;
    l->f->events_sent++; /* aborts seen */
}

static void leaver_cancel_cb(struct http_request *req, void *data) {
    struct leaver *l = data;
    l->cancelled += 1 + l->aborted * 10; /* 11: its abort came first */
    l->open_at_cancel = l->f->app.counters.connections_open;
    l->f->send_rc = l->open_at_cancel; /* the last one's stays */
    l->f->cancels++;
}

static void leaver_route(struct http_request *req, void *data) {
    struct fixture *f = data;
    ASSERT(n_leavers < LEAVERS);
    struct leaver *l = &leavers[n_leavers++];
    *l = (struct leaver){.f = f, .req = req, .open_at_cancel = -1};
    if (http_sse_start(req, leaver_cancel_cb, l)) return;
    http_on_abort(req, leaver_abort_cb);
    http_sse_send(req, "{\"first\":true}", 14);
}

static void streams_then_all_leave(struct fixture *f) {
    int s[LEAVERS];
    for (int i = 0; i < LEAVERS; i++) {
        s[i] = client_connect(f, 0);
        client_send(s[i], "GET /t HTTP/1.1\r\nHost: x\r\n\r\n");
        f->reply_len = 0;
        client_read_until(f, s[i], "data: {\"first\":true}\n\n");
    }
    for (int i = 0; i < LEAVERS; i++) close(s[i]); /* all at once */
    usleep(200 * 1000); /* let the server notice before the drain starts */
}

TEST(conn_clients_leaving_free_their_place_at_once_and_abort_before_cancel) {
    static struct fixture f;
    memset(&f, 0, sizeof f);
    n_leavers = 0;
    f.send_rc = -1;
    CHECK_EQ_INT(run_server(&f, leaver_route, streams_then_all_leave, NULL, NULL), 0);
    CHECK_EQ_INT(n_leavers, LEAVERS);
    CHECK_EQ_INT(f.cancels, LEAVERS);
    CHECK_EQ_INT(f.events_sent, LEAVERS);
    for (int i = 0; i < n_leavers; i++) {
        CHECK_EQ_INT(leavers[i].cancelled, 11); /* one cancel, after one abort */
        /* its own connection no longer counted (it was until its paced cancel had run: the
         * first cancel saw all twelve) */
        CHECK(leavers[i].open_at_cancel >= 0 && leavers[i].open_at_cancel < LEAVERS);
    }
    CHECK_EQ_INT(f.send_rc, 0); /* the last cancel: every one of them had closed */
    CHECK_EQ_INT(f.app.counters.connections_open, 0);
    CHECK_EQ_INT(f.app.counters.requests_inflight, 0);
    CHECK_EQ_INT(f.stops, 1);
}

/* A finishing call whose write fails: no abort (nor cancel) follows, the owner knows from the
 * return code. */
static void abort_counting_cb(struct http_request *req, void *data) {
    struct fixture *f = data;
    f->stops += 1000;
}

static void failing_end_route(struct http_request *req, void *data) {
    struct fixture *f = data;
    if (http_sse_start(req, counting_cancel_cb, f)) return;
    http_on_abort(req, abort_counting_cb);
    http_sse_send(req, "{\"first\":true}", 14);
    f->app.faults.writes = 1;
    f->end_rc = http_sse_end(req);
}

TEST(conn_failing_finish_calls_no_abort) {
    static struct fixture f;
    memset(&f, 0, sizeof f);
    CHECK_EQ_INT(run_server(&f, failing_end_route, read_whole_response, NULL, NULL), 0);
    CHECK_EQ_INT(f.end_rc, -ERR_CANCELLED);
    CHECK_EQ_INT(f.cancels, 0);
    CHECK_EQ_INT(f.stops, 1); /* the stop hook once, no abort */
}

/* --- a drain that finds many requests held: they are still paced (a few per iteration), served
 * (not refused as draining), and their responses say Connection: close --------------------- */

#define DRAIN_POSTS 24

static void drain_route(struct http_request *req, void *data) {
    struct fixture *f = data;
    if (!strcmp(req->method, "GET")) { /* the drain, as SIGTERM does it */
        int before = f->events_sent;
        app_drain(&f->app);
        f->in_drain = f->events_sent - before;
        http_respond(req, 200, "text/plain", "drain!", 6);
        return;
    }
    if (f->events_sent++ == 0) usleep(300 * 1000); /* the loop is busy while the others arrive */
    /* what serving_not_ready does: 503 when draining, unless held before the drain began */
    ASSERT(req->draining == (f->app.state == APP_DRAINING)); /* as dispatched */
    if (req->draining && !req->before_drain) http_respond(req, 503, "text/plain", "late!", 5);
    else http_respond(req, 200, "text/plain", "done!", 5);
}

static void posts_held_then_drain(struct fixture *f) {
    static const char post[] = "POST /t HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}";
    int s[DRAIN_POSTS + 1];
    for (int i = 0; i <= DRAIN_POSTS; i++) s[i] = client_connect(f, 0);
    client_send(s[0], post);
    usleep(100 * 1000); /* the server is in the first handler now */
    for (int i = 1; i < DRAIN_POSTS; i++) client_send(s[i], post);
    usleep(20 * 1000);
    client_send(s[DRAIN_POSTS], "GET /t HTTP/1.1\r\nHost: x\r\n\r\n"); /* after them: the drain */
    int ok = 0, closing = 0;
    for (int i = 1; i < DRAIN_POSTS; i++) {
        f->reply_len = 0;
        client_read_until(f, s[i], "!");
        ok += strstr(f->reply, "HTTP/1.1 200 ") && strstr(f->reply, "done!");
        closing += strstr(f->reply, "Connection: close\r\n") != NULL;
    }
    f->send_rc = ok;
    f->end_rc = closing;
    for (int i = 0; i <= DRAIN_POSTS; i++) close(s[i]);
}

TEST(conn_drain_keeps_pacing_held_requests_and_serves_them_with_close) {
    static struct fixture f;
    memset(&f, 0, sizeof f);
    CHECK_EQ_INT(run_server(&f, drain_route, posts_held_then_drain, "--debug-endpoints", "true"), 0);
    fprintf(stderr, "  held %llu, most requests in one iteration %llu, served %d, with close %d\n",
            (unsigned long long)f.app.counters.requests_held,
            (unsigned long long)f.app.loop_stats.requests_iter_max, f.send_rc, f.end_rc);
    CHECK(f.app.counters.requests_held >= 10); /* the drain found them held */
    CHECK_EQ_INT(f.in_drain, 0);               /* not all of them in the signal's callback */
    CHECK_EQ_INT(f.send_rc, DRAIN_POSTS - 1);  /* every one served, none refused as draining */
    /* those answered after the drain began (all held ones) say close: they once said keep-alive */
    CHECK(f.end_rc >= (int)f.app.counters.requests_held);
    /* paced: 4 from the hold plus what one iteration reads */
    CHECK(f.app.loop_stats.requests_iter_max <= 10);
    CHECK_EQ_INT(f.app.counters.requests_inflight, 0);
    CHECK_EQ_INT(f.stops, 1);
}

/* A request dispatched before the drain and answered during it: Connection: close (the head once
 * said keep-alive, decided at dispatch, and the connection was then closed under the client). */
static void drain_then_late_route(struct http_request *req, void *data) {
    struct fixture *f = data;
    f->req = req;
    http_on_cancel(req, counting_cancel_cb, f);
    uv_timer_start(&f->timer, late_cb, 50, 0);
    app_drain(&f->app);
}

static void keep_alive_request(struct fixture *f) {
    int s = client_connect(f, 0);
    client_send(s, "GET /t HTTP/1.1\r\nHost: x\r\n\r\n");
    client_read_until(f, s, "{\"late\":true}");
    client_read_until(f, s, NULL); /* then the server closes */
    close(s);
}

TEST(conn_answer_during_a_drain_says_close) {
    static struct fixture f;
    memset(&f, 0, sizeof f);
    CHECK_EQ_INT(run_server(&f, drain_then_late_route, keep_alive_request, NULL, NULL), 0);
    CHECK_EQ_INT(f.end_rc, 0);
    CHECK(strstr(f.reply, "HTTP/1.1 201 Created\r\n"));
    CHECK(strstr(f.reply, "Connection: close\r\n"));
    CHECK(!strstr(f.reply, "keep-alive"));
    CHECK_EQ_INT(f.read_end, 0);
    CHECK_EQ_INT(f.app.counters.requests_inflight, 0);
}

/* --- the head hook refuses a request before its body is read ------------------------------- */

static void counting_route(struct http_request *req, void *data) {
    struct fixture *f = data;
    f->events_sent++;
    http_respond(req, 200, "text/plain", req->body, req->body_len);
}

/* A request without the key announces a large body and waits for 100 Continue: the answer is the
 * 401 at once, then the close; with the key, 100 Continue and the body is read. */
static void head_requests(struct fixture *f) {
    int s = client_connect(f, 0);
    client_send(s, "POST /t HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\nExpect: 100-continue\r\n\r\n");
    client_read_until(f, s, NULL); /* the server answers and closes without a body byte */
    close(s);
    size_t refused_len = f->reply_len;
    s = client_connect(f, 0);
    client_send(s, "POST /t HTTP/1.1\r\nHost: x\r\nX-Api-Key: k\r\nContent-Length: 2\r\n"
                   "Expect: 100-continue\r\nConnection: close\r\n\r\n");
    client_read_until(f, s, "100 Continue\r\n\r\n");
    client_send(s, "ok");
    client_read_until(f, s, NULL);
    close(s);
    f->send_rc = (int)refused_len;
}

TEST(conn_head_hook_refuses_before_the_body_and_before_100_continue) {
    static struct fixture f;
    memset(&f, 0, sizeof f);
    f.check_heads = true;
    CHECK_EQ_INT(run_server(&f, counting_route, head_requests, "--api-key", "k"), 0);
    CHECK_EQ_INT(f.heads, 2);
    CHECK_EQ_INT(f.events_sent, 1); /* only the request with the key reached its handler */
    static const char unauthorized[] = "HTTP/1.1 401 Unauthorized\r\n";
    static const char continued[] = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n";
    CHECK(strncmp(f.reply, unauthorized, sizeof unauthorized - 1) == 0);
    char *second = f.reply + f.send_rc;
    CHECK(memmem(f.reply, (size_t)f.send_rc, "100 Continue", 12) == NULL);
    CHECK(memmem(f.reply, (size_t)f.send_rc, "Connection: close", 17) != NULL);
    CHECK(strncmp(second, continued, sizeof continued - 1) == 0);
    CHECK(strstr(second, "\r\n\r\nok") != NULL);
    CHECK_EQ_INT(f.app.counters.requests_total, 2);
    CHECK_EQ_INT(f.app.counters.requests_inflight, 0);
}
