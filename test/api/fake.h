/* fake.h: test doubles for the API layer, so that the router and the endpoints are tested without
 * sockets (implemented in fake_test.c, which also tests them).
 *
 * fake_http: a request and its responder (api/http.h's struct http_responder) that records what
 * the handler answered: status, content type, body, added headers, SSE events. It keeps http.h's
 * contract like the server does: -ERR_STATE for a call in the wrong state, -ERR_CANCELLED once
 * the client is gone (fake_http_disconnect: the abort callback at once; fake_http_closed: the
 * cancel callback, which the server runs later from the connection's close, unless a finishing
 * call came in between), and it counts how the owner heard of the end (`ends`: a finishing call
 * or the cancel callback), which must come to exactly one.
 *
 * fake_serving: the serving state (api/serving.h) over the repository's model
 * (SERVING_DEFAULT_MODEL: models/kjv-tiny-q8_0.gguf, found from the working directory or next to
 * the test runner), started through serving_ops as the engine driver starts it, with its routes
 * in a router. fake_serving_request dispatches a request through the router, then runs steps on
 * the calling thread (build, compute, complete in parts) until none is left.
 *
 *   struct fake_serving fs;
 *   CHECK_EQ_INT(fake_serving_open(&fs, NULL), 0);
 *   struct fake_http f;
 *   fake_http_init(&f, "POST", "/completion", "{\"prompt\":\"And God said\",\"n_predict\":4}");
 *   fake_serving_request(&fs, &f);
 *   CHECK_EQ_INT(f.status, 200);  ... f.body ...
 *   fake_http_free(&f);
 *   fake_serving_close(&fs);
 */
#ifndef UVLM_TEST_API_FAKE_H
#define UVLM_TEST_API_FAKE_H

#include "api/router.h"
#include "api/serving.h"
#include "common/config.h"
#include "common/log.h"

#include <stdbool.h>
#include <stddef.h>

#define FAKE_HTTP_MAX_HEADERS 16
#define FAKE_HTTP_MAX_EVENTS 512

enum fake_http_state { FAKE_HANDLING, FAKE_STREAMING, FAKE_FINISHED, FAKE_DEAD };

struct fake_http {
    struct http_request req;        /* resp and resp_ctx point at this fake */
    struct http_header in[FAKE_HTTP_MAX_HEADERS];
    char path[256];
    enum fake_http_state state;
    /* what the handler did */
    int status;                     /* 0 until answered; 200 once a stream started */
    char content_type[64];
    char *body;                     /* a complete response's body, NUL-terminated (malloc'd) */
    size_t body_len;
    const char *out_name[FAKE_HTTP_MAX_HEADERS], *out_value[FAKE_HTTP_MAX_HEADERS]; /* malloc'd */
    int n_out;
    char *events[FAKE_HTTP_MAX_EVENTS]; /* SSE events' data, NUL-terminated (malloc'd) */
    char *event_names[FAKE_HTTP_MAX_EVENTS]; /* their "event:" names, NULL for none (malloc'd) */
    int n_events;
    http_cancel_cb cancel_cb, abort_cb;
    void *cancel_data;
    int ends;                       /* finishing calls + cancel callbacks: must end at 1 */
    int cancels;                    /* cancel callbacks run */
};

/* A complete request: method, target ("/path?query") and body (NULL: none); the strings must
 * outlive the fake. */
void fake_http_init(struct fake_http *f, const char *method, const char *target, const char *body);
/* Add a request header (strings must outlive the fake). */
void fake_http_header(struct fake_http *f, const char *name, const char *value);
/* A response header the handler added, or NULL. */
const char *fake_http_out(const struct fake_http *f, const char *name);
/* The client goes away: an open request dies (its abort callback runs now). */
void fake_http_disconnect(struct fake_http *f);
/* The dead request's connection has closed: its cancel callback runs, if still registered. */
void fake_http_closed(struct fake_http *f);
void fake_http_free(struct fake_http *f);

struct fake_serving {
    struct config cfg;
    struct log log;
    struct serving srv;
    struct router router;
    int kicks;                      /* srv.kick calls */
    int steps;                      /* steps run */
};

/* Serve the repository's model with --threads 1 --kv-tokens 512 --log-level off and `flags`
 * (NULL-terminated, or NULL). 0, or the load's or the start's error (everything freed). */
int fake_serving_open(struct fake_serving *fs, const char *const *flags);
void fake_serving_close(struct fake_serving *fs);
/* Run steps until none can be built (at most 10000: then -1); none before the engine started. */
int fake_serving_run(struct fake_serving *fs);
/* Dispatch f's request through the router, then fake_serving_run. */
int fake_serving_request(struct fake_serving *fs, struct fake_http *f);

#endif
