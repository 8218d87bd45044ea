#include "api/serving.h"

#include "api/errors.h"
#include "common/err.h"

#include <time.h>

double serving_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void serving_count(struct serving *srv, int status) {
    struct serving_metrics *m = &srv->metrics;
    m->requests_total++;
    for (int i = 0; i < m->n_status; i++)
        if (m->status[i] == status) {
            m->by_status[i]++;
            return;
        }
    if (m->n_status == SERVING_STATUS_SLOTS) return; /* more distinct statuses than we keep */
    m->status[m->n_status] = status;
    m->by_status[m->n_status++] = 1;
}

int serving_respond_json(struct serving *srv, struct http_request *req, int status, const char *json) {
    serving_count(srv, status);
    return http_respond_json(req, status, json);
}

bool serving_not_ready(struct serving *srv, struct http_request *req) {
    /* a request held by the server's pacing when a drain began arrived before it: it is served */
    if (srv->sched && (*srv->state == APP_READY || (*srv->state == APP_DRAINING && req->before_drain))) return false;
    char body[160];
    int status = 503;
    api_error_json(body, sizeof body, status,
                   *srv->state == APP_DRAINING ? "Server is shutting down" : "Loading model");
    serving_respond_json(srv, req, status, body);
    return true;
}

int serving_routes_add(struct router *r, struct serving *srv) {
    static const struct {
        const char *method, *path;
        http_handler_fn handle;
        unsigned flags;
    } routes[] = {
        {"GET", "/health", serving_health_handle, ROUTE_PUBLIC},
        {"POST", "/completion", serving_completion_handle, 0},
        {"POST", "/completions", serving_completion_handle, 0},
        {"POST", "/v1/completions", serving_oai_completion_handle, 0},
        {"POST", "/v1/chat/completions", serving_oai_chat_handle, 0},
        {"POST", "/chat/completions", serving_oai_chat_handle, 0},
        {"GET", "/v1/models", serving_models_handle, 0},
        {"GET", "/models", serving_models_handle, 0},
        {"GET", "/props", serving_props_handle, 0},
        {"GET", "/slots", serving_slots_handle, 0},
        {"GET", "/metrics", serving_metrics_handle, 0},
        {"POST", "/tokenize", serving_tokenize_handle, 0},
        {"POST", "/detokenize", serving_detokenize_handle, 0},
        {"POST", "/apply-template", serving_apply_template_handle, 0},
    };
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
        int rc = router_add(r, routes[i].method, routes[i].path, routes[i].handle, srv, routes[i].flags);
        if (rc) return rc;
    }
    return 0;
}
