/* serving.h: what the serving endpoints share (the engine, the scheduler, the chat template,
 * counters for /metrics, a way to wake the driver), and the engine interface the driver runs.
 * No libuv here: serving owns the model engine (sched/model_engine.h) and the scheduler
 * (sched/sched.h); the driver (net/engine_driver.h) owns the threads and timers and calls
 * serving_ops on the threads each operation names. The handlers (generate.c: the completion
 * endpoints of every API, with responses.c and anthropic.c for those two APIs' shapes; info.c:
 * everything else) run on the loop thread.
 *
 *   loop thread                                  compute thread (the driver's)
 *   ───────────                                  ──────────────
 *   driver: app->load ─────────────────────────> serving_ops.load (map the model, size memory)
 *   serving_ops.start: log it, load the chat  <─┘
 *     template, create the scheduler (then every model endpoint answers)
 *   serving_ops.build_step (a request came or went, or the driver's tick)
 *                    ──────────────────────────> serving_ops.compute_step (forward + sampling)
 *   serving_ops.complete_step, in parts       <─┘
 *     (sink callbacks: tokens to the clients)
 *
 * Request path of a completion: params.h parses and validates the body; the prompt is tokenized
 * (chat: rendered by the chat template first, chat_prompt.h), both off the loop for a body over
 * offload_bytes (http_queue_work); sched_submit queues it with a sink whose
 * callbacks detokenize (the engine's streaming detokenizer), match stop strings (stream_text.h)
 * and send JSON (render.h) at once or as SSE events; the HTTP cancel callback calls sched_cancel.
 *
 *   struct serving srv;
 *   serving_init(&srv, &cfg, &app.log);          // resolves the model path
 *   serving_routes_add(&router, &srv);           // /health and every model endpoint
 *   engine_driver_init(&drv, &app, &serving_ops, &srv);
 *   srv.kick = engine_driver_kick; srv.driver = &drv;
 *   ... run the loop ...
 *   serving_free(&srv);                          // no step in flight: after the loop
 *
 * Until the engine has started (srv->sched == NULL) every model endpoint answers 503 loading;
 * once the server drains (req->draining) they answer 503 shutting down, except for requests the
 * server held before the drain began (req->before_drain).
 */
#ifndef UVLM_API_SERVING_H
#define UVLM_API_SERVING_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "api/chat_prompt.h"
#include "api/http.h"
#include "api/params.h"
#include "api/router.h"
#include "api/tool_calls.h"
#include "common/config.h"
#include "common/log.h"

struct sched;
struct sched_step;
struct model_engine;

/* Served when --model is empty; looked up in the working directory, then next to the binary. */
#define SERVING_DEFAULT_MODEL "models/kjv-tiny-q8_0.gguf"

#define SERVING_STATUS_SLOTS 16

/* Request bodies up to this size are parsed (and their prompts tokenized) on the loop thread;
 * larger ones on the server's thread pool (http_queue_work), so that the loop keeps answering
 * meanwhile: about 0.1 ms of loop time per KiB here (JSON and BPE), so 1 ms at most, while a
 * chat request of a few KiB skips the hand-over. scripts/bench.d/55-heavy-body shows /health
 * while 16 MB bodies and 1 MB prompts arrive. */
#define SERVING_OFFLOAD_BYTES 8192

struct serving_metrics {
    uint64_t requests_total;                  /* answered by a serving endpoint */
    int status[SERVING_STATUS_SLOTS];         /* the statuses seen, first come ... */
    uint64_t by_status[SERVING_STATUS_SLOTS]; /* ... and how often */
    int n_status;
};

struct serving {
    const struct config *cfg;
    const struct log *log;        /* the server's: loading, the model, the chat template, steps */
    char model_path[PATH_MAX];    /* the file served (--model, or the default model's path) */
    char model_name[256];         /* --alias, else its file name: the model id clients see */
    char fingerprint[24];         /* OpenAI's system_fingerprint: "fp_" + a hash of the build and
                                   * the model served */
    struct model_engine *engine;  /* NULL until started */
    struct sched *sched;          /* NULL until started */
    struct chat_prompt chat;      /* how chats become prompts (after start) */
    struct tool_dialect tools;    /* how the model writes tool calls and reasoning (after start) */
    char *chat_template_text;     /* the template's text as /props reports it (--chat-template-file's,
                                   * else the model's), or NULL when there is none; owned */
    struct params_defaults defaults; /* --seed, --temp, ...: what requests that omit them get */
    int64_t created;              /* unix seconds of the start */
    uint64_t seed_state;          /* seeds for requests without one */
    size_t offload_bytes;         /* SERVING_OFFLOAD_BYTES (a test may lower it) */
    void (*kick)(void *driver);   /* a request was submitted or cancelled: build a step soon */
    void *driver;
    struct serving_metrics metrics;
    /* serving_ops' state */
    struct model_engine *loaded;  /* loaded on the compute thread, not started yet */
    char load_why[256];           /* why the load failed */
    struct sched_step *step;      /* built and not completed yet, or NULL */
    double step_built_ms;
    int step_parts;               /* complete_step calls for this step so far */
};

/* The engine as the driver runs it. `engine` is the data given with the table (a struct serving
 * for serving_ops). One load, then one step at a time: build, compute, complete. */
struct serving_engine_ops {
    /* Compute thread: load the model (reads the whole file). 0 or an error, kept for start. */
    int (*load)(void *engine);
    /* Loop thread, after the load (load_rc: its result, or the driver's error): log the outcome
     * and, loaded, start serving. 0, or the error (logged): the server stops (app_loaded). */
    int (*start)(void *engine, int load_rc);
    /* Loop thread: build the next step; true when one must run (compute, then complete it). */
    bool (*build_step)(void *engine);
    /* Compute thread: run the step built. */
    void (*compute_step)(void *engine);
    /* Loop thread: hand the output of at most max_outputs sequences of the computed step to the
     * clients (<= 0: all); true while some remain (call again after a poll), false when the step
     * is done and the next may be built. */
    bool (*complete_step)(void *engine, int max_outputs);
};
extern const struct serving_engine_ops serving_ops;

/* cfg and log must outlive srv. Resolves the model path: --model, else SERVING_DEFAULT_MODEL in
 * the working directory, else next to the binary (./uvlm or build-check/uvlm in the repository). */
void serving_init(struct serving *srv, const struct config *cfg, const struct log *log);
/* The scheduler and the engine. No step in flight (after the loop has run out). */
void serving_free(struct serving *srv);

/* Milliseconds on the monotonic clock the scheduler is driven with. */
double serving_now_ms(void);

/* Register /health (and /v1/health; with ?detail=1 and stall detection), /completion, /v1/completions,
 * /v1/chat/completions, /v1/responses, /v1/messages (+ /count_tokens, ROUTE_ANTHROPIC),
 * /infill, /v1/embeddings (+ /embedding, /embeddings), /v1/models (+ /{id}), /props, /slots,
 * /metrics, /tokenize, /detokenize and /apply-template.
 * 0 or router_add's error. */
int serving_routes_add(struct router *r, struct serving *srv);

/* The prompt-cache partition of a completion request (sched_request.cache_partition): requests
 * share cached or live prompt cells only within one. With --api-key, each key is a partition of
 * its own (the key the request authenticated with, http_api_key), and a cache_salt (params.h)
 * splits it further; without keys and salt everything is partition 0. A 64-bit hash: keys and
 * salts are secrets of their clients, and a collision needs about 2^64 guesses. */
uint64_t serving_cache_partition(const struct serving *srv, const struct http_request *req, const char *salt,
                                 size_t salt_len);

/* Count a response status for /metrics. */
void serving_count(struct serving *srv, int status);

/* Answer with a status, counting it. */
int serving_respond_json(struct serving *srv, struct http_request *req, int status, const char *json);
/* 503 {"error": ... "Loading model" / "Server is shutting down"} unless the engine has started
 * and the request may be served; returns true when it answered. */
bool serving_not_ready(struct serving *srv, struct http_request *req);

/* Answer with what compute(srv, req, &status) returns (a malloc'd JSON body, NULL: 500 out of
 * memory), counted; compute runs on the loop thread for a body up to offload_bytes, else on the
 * thread pool (http_queue_work), so it may read only the request and immutable serving state
 * (the configuration, the engine's tokenizer and chat family). */
typedef char *(*serving_compute_fn)(struct serving *srv, const struct http_request *req, int *status);
void serving_respond_computed(struct serving *srv, struct http_request *req, serving_compute_fn compute);

/* /slots: what the completion request behind a scheduler owner (sched_slot.owner: generate.c's)
 * asked for, and whether its choice `choice` has generated a new line. */
struct slot_info;
void serving_gen_slot(const void *owner, int32_t choice, struct slot_info *out);

/* The route handlers (data: struct serving *). */
void serving_completion_handle(struct http_request *req, void *data);    /* POST /completion */
void serving_oai_completion_handle(struct http_request *req, void *data);/* POST /v1/completions */
void serving_infill_handle(struct http_request *req, void *data);        /* POST /infill (infill.h) */
void serving_embeddings_handle(struct http_request *req, void *data);    /* POST /embedding(s) (embeddings.h) */
void serving_oai_embeddings_handle(struct http_request *req, void *data);/* POST /v1/embeddings */
void serving_oai_chat_handle(struct http_request *req, void *data);      /* POST /v1/chat/completions */
void serving_oai_responses_handle(struct http_request *req, void *data); /* POST /v1/responses */
void serving_anthropic_messages_handle(struct http_request *req, void *data); /* POST /v1/messages */
void serving_anthropic_count_handle(struct http_request *req, void *data);/* .../messages/count_tokens */
void serving_health_handle(struct http_request *req, void *data);
void serving_models_handle(struct http_request *req, void *data);
void serving_model_handle(struct http_request *req, void *data);         /* GET /v1/models/{id} */
void serving_props_handle(struct http_request *req, void *data);
void serving_slots_handle(struct http_request *req, void *data);
void serving_metrics_handle(struct http_request *req, void *data);
void serving_tokenize_handle(struct http_request *req, void *data);
void serving_detokenize_handle(struct http_request *req, void *data);
void serving_apply_template_handle(struct http_request *req, void *data);

#endif
