#include "api/health.h"

#include <stdio.h>

const char *app_state_name(enum app_state s) {
    switch (s) {
    case APP_LOADING: return "loading";
    case APP_READY: return "ok";
    case APP_DRAINING: return "draining";
    }
    return "unknown";
}

void health_handle(struct http_request *req, void *data) {
    enum app_state state = *(const enum app_state *)data;
    char body[64];
    snprintf(body, sizeof body, "{\"status\":\"%s\"}", app_state_name(state));
    http_respond_json(req, state == APP_READY ? 200 : 503, body);
}
