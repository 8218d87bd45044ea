/* health.h: GET /health, answered on the loop thread from the app's lifecycle state.
 *   loading  -> 503 {"status":"loading"}   (listening, model not loaded yet)
 *   ready    -> 200 {"status":"ok"}
 *   draining -> 503 {"status":"draining"}  (after SIGTERM/SIGINT)
 * Registered as ROUTE_PUBLIC: it never needs the API key.
 *
 *   router_add(&r, "GET", "/health", health_handle, &app->state, ROUTE_PUBLIC);
 */
#ifndef UVLM_API_HEALTH_H
#define UVLM_API_HEALTH_H

#include "api/http.h"

enum app_state { APP_LOADING, APP_READY, APP_DRAINING };

const char *app_state_name(enum app_state s);

/* data: const enum app_state * (the app's live state). */
void health_handle(struct http_request *req, void *data);

#endif
