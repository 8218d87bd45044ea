/* fake_test.c: the API layer's test doubles (fake.h), and tests that they keep http.h's contract. */
#include "test.h"
#include "api/fake.h"
#include "common/err.h"

#include <stdlib.h>
#include <string.h>

/* --- fake_http --------------------------------------------------------------------------------- */

static struct fake_http *fake_of(struct http_request *req) { return req->resp_ctx; }

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    ASSERT(d);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

/* A finishing call on a dead request: finished, no cancel callback follows. */
static int finish_dead(struct fake_http *f) {
    if (f->cancel_cb) f->ends++;
    f->cancel_cb = NULL;
    return -ERR_CANCELLED;
}

static int fake_add_header(struct http_request *req, const char *name, const char *value) {
    struct fake_http *f = fake_of(req);
    if (f->n_out == FAKE_HTTP_MAX_HEADERS) return -ERR_TOOBIG;
    f->out_name[f->n_out] = dup_n(name, strlen(name));
    f->out_value[f->n_out++] = dup_n(value, strlen(value));
    return 0;
}

static int fake_respond(struct http_request *req, int status, const char *content_type, const char *body, size_t len) {
    struct fake_http *f = fake_of(req);
    if (f->state == FAKE_DEAD) return finish_dead(f);
    if (f->state != FAKE_HANDLING) return -ERR_STATE;
    f->status = status;
    snprintf(f->content_type, sizeof f->content_type, "%s", content_type ? content_type : "application/json");
    f->body = dup_n(body, len);
    f->body_len = len;
    f->state = FAKE_FINISHED;
    f->cancel_cb = f->abort_cb = NULL;
    f->ends++;
    return 0;
}

static void fake_on_cancel(struct http_request *req, http_cancel_cb cb, void *data) {
    struct fake_http *f = fake_of(req);
    f->cancel_cb = cb;
    f->cancel_data = data;
}

static void fake_on_abort(struct http_request *req, http_cancel_cb cb) {
    struct fake_http *f = fake_of(req);
    if (f->state != FAKE_DEAD) f->abort_cb = cb;
}

static int fake_sse_start(struct http_request *req, http_cancel_cb cb, void *data) {
    struct fake_http *f = fake_of(req);
    if (f->state == FAKE_DEAD) return finish_dead(f);
    if (f->state != FAKE_HANDLING) return -ERR_STATE;
    f->state = FAKE_STREAMING;
    f->status = 200;
    snprintf(f->content_type, sizeof f->content_type, "text/event-stream");
    f->cancel_cb = cb;
    f->cancel_data = data;
    return 0;
}

static int fake_sse_send(struct http_request *req, const char *event, const char *data, size_t len) {
    struct fake_http *f = fake_of(req);
    if (f->state == FAKE_DEAD) return -ERR_CANCELLED;
    if (f->state != FAKE_STREAMING) return -ERR_STATE;
    if (f->n_events == FAKE_HTTP_MAX_EVENTS) return -ERR_TOOBIG;
    f->event_names[f->n_events] = event ? dup_n(event, strlen(event)) : NULL;
    f->events[f->n_events++] = dup_n(data, len);
    return 0;
}

static int fake_sse_end(struct http_request *req) {
    struct fake_http *f = fake_of(req);
    if (f->state == FAKE_DEAD) return finish_dead(f);
    if (f->state != FAKE_STREAMING) return -ERR_STATE;
    f->state = FAKE_FINISHED;
    f->cancel_cb = f->abort_cb = NULL;
    f->ends++;
    return 0;
}

static const struct http_responder fake_responder = {
    .add_header = fake_add_header,
    .respond = fake_respond,
    .on_cancel = fake_on_cancel,
    .on_abort = fake_on_abort,
    .sse_start = fake_sse_start,
    .sse_send = fake_sse_send,
    .sse_end = fake_sse_end,
};

void fake_http_init(struct fake_http *f, const char *method, const char *target, const char *body) {
    memset(f, 0, sizeof *f);
    const char *q = strchr(target, '?');
    size_t plen = q ? (size_t)(q - target) : strlen(target);
    ASSERT(plen < sizeof f->path);
    memcpy(f->path, target, plen);
    f->req = (struct http_request){
        .method = method,
        .target = target,
        .path = f->path,
        .query = q ? q + 1 : "",
        .headers = f->in,
        .body = body ? body : "",
        .body_len = body ? strlen(body) : 0,
        .remote = "127.0.0.1:1",
        .resp = &fake_responder,
        .resp_ctx = f,
    };
}

void fake_http_header(struct fake_http *f, const char *name, const char *value) {
    ASSERT(f->req.n_headers < FAKE_HTTP_MAX_HEADERS);
    f->in[f->req.n_headers++] = (struct http_header){name, value};
}

const char *fake_http_out(const struct fake_http *f, const char *name) {
    for (int i = 0; i < f->n_out; i++)
        if (!strcmp(f->out_name[i], name)) return f->out_value[i];
    return NULL;
}

void fake_http_disconnect(struct fake_http *f) {
    if (f->state != FAKE_HANDLING && f->state != FAKE_STREAMING) return;
    f->state = FAKE_DEAD;
    if (f->cancel_cb && f->abort_cb) {
        http_cancel_cb abort = f->abort_cb;
        f->abort_cb = NULL;
        abort(&f->req, f->cancel_data);
    }
}

void fake_http_closed(struct fake_http *f) {
    if (f->state != FAKE_DEAD || !f->cancel_cb) return;
    http_cancel_cb cb = f->cancel_cb;
    f->cancel_cb = NULL;
    f->cancels++;
    f->ends++;
    cb(&f->req, f->cancel_data);
}

void fake_http_free(struct fake_http *f) {
    free(f->body);
    for (int i = 0; i < f->n_out; i++) {
        free((char *)f->out_name[i]);
        free((char *)f->out_value[i]);
    }
    for (int i = 0; i < f->n_events; i++) {
        free(f->events[i]);
        free(f->event_names[i]);
    }
    memset(f, 0, sizeof *f);
}

/* --- fake_serving ------------------------------------------------------------------------------ */

static void count_kick(void *driver) { ((struct fake_serving *)driver)->kicks++; }

int fake_serving_open(struct fake_serving *fs, const char *const *flags) {
    memset(fs, 0, sizeof *fs);
    char *argv[32] = {"uvlm", "--threads", "1", "--kv-tokens", "512", "--log-level", "off"};
    int argc = 7;
    for (int i = 0; flags && flags[i]; i++) {
        ASSERT(argc < 31);
        argv[argc++] = (char *)flags[i];
    }
    char msg[256];
    int rc = config_load(&fs->cfg, argc, argv, NULL, msg, sizeof msg);
    if (rc) {
        fprintf(stderr, "  fake_serving_open: %s\n", msg);
        config_free(&fs->cfg);
        return rc < 0 ? rc : -ERR_INVAL;
    }
    log_init(&fs->log, LOG_OFF, stderr);
    serving_init(&fs->srv, &fs->cfg, &fs->log);
    fs->srv.kick = count_kick;
    fs->srv.driver = fs;
    router_init(&fs->router, &fs->cfg.api_key, &fs->cfg.cors_origin);
    rc = serving_routes_add(&fs->router, &fs->srv);
    if (!rc) rc = serving_ops.start(&fs->srv, serving_ops.load(&fs->srv)); /* as the driver does */
    if (rc) {
        fprintf(stderr, "  fake_serving_open: %s: %s\n", fs->srv.model_path, fs->srv.load_why);
        fake_serving_close(fs);
    }
    return rc;
}

void fake_serving_close(struct fake_serving *fs) {
    serving_free(&fs->srv);
    config_free(&fs->cfg);
}

int fake_serving_run(struct fake_serving *fs) {
    if (!fs->srv.sched) return 0; /* not started: the driver builds no step either */
    for (int n = 0; n < 10000; n++) {
        if (!serving_ops.build_step(&fs->srv)) return 0;
        serving_ops.compute_step(&fs->srv);
        fs->steps++;
        while (serving_ops.complete_step(&fs->srv, 1)) { /* one sequence's output per part */
        }
    }
    return -1;
}

int fake_serving_request(struct fake_serving *fs, struct fake_http *f) {
    router_dispatch(&fs->router, &f->req);
    return fake_serving_run(fs);
}

/* --- the fakes keep http.h's contract ------------------------------------------------------------- */

static int cancelled;
static void note_cancel(struct http_request *req, void *data) { cancelled++; }

TEST(fake_http_keeps_the_handler_contract) {
    struct fake_http f;
    fake_http_init(&f, "GET", "/x?a=1", NULL);
    CHECK_EQ_STR(f.req.path, "/x");
    CHECK_EQ_STR(f.req.query, "a=1");
    CHECK_EQ_INT(http_add_header(&f.req, "X-A", "1"), 0);
    CHECK_EQ_INT(http_add_header(&f.req, "Bad:Name", "1"), -ERR_INVAL); /* checked by http.c */
    CHECK_EQ_INT(http_sse_send(&f.req, "x", 1), -ERR_STATE);         /* not streaming */
    CHECK_EQ_INT(http_respond_json(&f.req, 201, "{}"), 0);
    CHECK_EQ_INT(http_respond_json(&f.req, 200, "{}"), -ERR_STATE);  /* finished already */
    CHECK_EQ_INT(f.status, 201);
    CHECK_EQ_STR(f.body, "{}");
    CHECK_EQ_STR(fake_http_out(&f, "X-A"), "1");
    CHECK_EQ_INT(f.ends, 1);
    fake_http_free(&f);

    /* a stream whose client leaves: refused sends, then one cancel callback */
    cancelled = 0;
    fake_http_init(&f, "GET", "/s", NULL);
    CHECK_EQ_INT(http_sse_start(&f.req, note_cancel, NULL), 0);
    CHECK_EQ_INT(http_sse_send(&f.req, "a\nb", 3), -ERR_INVAL);       /* checked by http.c */
    CHECK_EQ_INT(http_sse_send_event(&f.req, "a\nb", "{}", 2), -ERR_INVAL); /* the name too */
    CHECK_EQ_INT(http_sse_send(&f.req, "{}", 2), 0);
    CHECK_EQ_INT(http_sse_send_event(&f.req, "ping", "{}", 2), 0);
    CHECK(f.event_names[0] == NULL);
    CHECK_EQ_STR(f.event_names[1], "ping");
    fake_http_disconnect(&f);
    CHECK_EQ_INT(http_sse_send(&f.req, "{}", 2), -ERR_CANCELLED);
    CHECK_EQ_INT(cancelled, 0);
    fake_http_closed(&f);
    CHECK_EQ_INT(cancelled, 1);
    CHECK_EQ_INT(f.n_events, 2);
    CHECK_EQ_INT(f.ends, 1);
    fake_http_free(&f);

    /* finishing a dead request: -ERR_CANCELLED, and no cancel callback follows */
    fake_http_init(&f, "GET", "/s", NULL);
    CHECK_EQ_INT(http_sse_start(&f.req, note_cancel, NULL), 0);
    fake_http_disconnect(&f);
    CHECK_EQ_INT(http_sse_end(&f.req), -ERR_CANCELLED);
    fake_http_closed(&f);
    CHECK_EQ_INT(cancelled, 1);
    CHECK_EQ_INT(f.ends, 1);
    fake_http_free(&f);
}
