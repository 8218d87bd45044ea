/* serving.h: what the serving endpoints share: the loaded engine, the scheduler, the chat family,
 * counters for /metrics, and a way to wake the driver. No libuv here: the driver
 * (net/engine_driver.h) owns a struct serving, fills it when the model is loaded and sets `kick`;
 * the handlers (generate.c: the three completion endpoints; info.c: everything else) only read
 * it and call the scheduler on the loop thread.
 *
 * Request path of a completion: params.h parses and validates the body; the prompt is tokenized
 * (chat: formatted by the model's chat family first); sched_submit queues it with a sink whose
 * callbacks detokenize (streaming detokenizer), match stop strings (stream_text.h) and send JSON
 * (render.h) at once or as SSE events; the HTTP cancel callback calls sched_cancel.
 *
 *   serving_routes_add(&app->router, &driver->srv);   // every endpoint of issue 5, /health too
 *
 * Until the model is loaded (srv->sched == NULL) every model endpoint answers 503 loading.
 */
#ifndef UVLM_API_SERVING_H
#define UVLM_API_SERVING_H

#include <stdbool.h>
#include <stdint.h>

#include "api/health.h"
#include "api/http.h"
#include "api/router.h"
#include "common/config.h"

struct sched;
struct model_engine;

#define SERVING_STATUS_SLOTS 16

struct serving_metrics {
    uint64_t requests_total;                  /* answered by a serving endpoint */
    int status[SERVING_STATUS_SLOTS];         /* the statuses seen, first come ... */
    uint64_t by_status[SERVING_STATUS_SLOTS]; /* ... and how often */
    int n_status;
};

struct serving {
    const struct config *cfg;
    const enum app_state *state;  /* the app's lifecycle (loading/ready/draining) */
    struct model_engine *engine;  /* NULL until loaded */
    struct sched *sched;          /* NULL until loaded */
    int chat_family;              /* enum chat_family */
    char model_name[128];         /* the file name, reported as "model" */
    const char *model_path;       /* the file served (--model, or the default model's path) */
    int64_t created;              /* unix seconds of the load */
    uint64_t next_id;             /* for response ids */
    uint64_t seed_state;          /* seeds for requests without one */
    void (*kick)(void *driver);   /* a request was submitted or cancelled: build a step soon */
    void *driver;
    struct serving_metrics metrics;
};

/* Milliseconds on the monotonic clock the scheduler is driven with. */
double serving_now_ms(void);

/* Register /health (with ?detail=1 and stall detection), /completion, /v1/completions,
 * /v1/chat/completions, /v1/models, /props, /slots, /metrics, /tokenize, /detokenize and
 * /apply-template. 0 or router_add's error. */
int serving_routes_add(struct router *r, struct serving *srv);

/* Count a response status for /metrics. */
void serving_count(struct serving *srv, int status);

/* Answer with a status, counting it. */
int serving_respond_json(struct serving *srv, struct http_request *req, int status, const char *json);
/* 503 {"error": ... "Loading model"} unless the engine is ready; returns true when it answered. */
bool serving_not_ready(struct serving *srv, struct http_request *req);

/* The route handlers (data: struct serving *). */
void serving_completion_handle(struct http_request *req, void *data);    /* POST /completion */
void serving_oai_completion_handle(struct http_request *req, void *data);/* POST /v1/completions */
void serving_oai_chat_handle(struct http_request *req, void *data);      /* POST /v1/chat/completions */
void serving_health_handle(struct http_request *req, void *data);
void serving_models_handle(struct http_request *req, void *data);
void serving_props_handle(struct http_request *req, void *data);
void serving_slots_handle(struct http_request *req, void *data);
void serving_metrics_handle(struct http_request *req, void *data);
void serving_tokenize_handle(struct http_request *req, void *data);
void serving_detokenize_handle(struct http_request *req, void *data);
void serving_apply_template_handle(struct http_request *req, void *data);

#endif
