/* router.h: the route table, and the request policy every route shares.
 *
 * router_dispatch() decides, in this order, for a complete request:
 *   1. CORS: when --cors-origin allows the request's Origin, Access-Control-Allow-Origin (and
 *      Vary: Origin) go on every response; OPTIONS on a known path is a preflight: 200 with
 *      Allow and the Access-Control-Allow-* headers (no API key needed). An entry of the list is
 *      an origin ("http://app.example"), one on any port ("http://app.example:*"), "*" (any
 *      origin), or "localhost": http(s) on localhost, 127.0.0.1 or [::1], any port (the default:
 *      a web app on this machine works, a page from elsewhere cannot read the answers).
 *   2. a ROUTE_PUBLIC route (/health) goes to its handler: no key needed.
 *   3. 401 when API keys are configured and neither "Authorization: Bearer KEY" nor
 *      "X-Api-Key: KEY" carries one of them (keys are compared in constant time), whatever the
 *      path and method: a client without a key learns nothing of the routes.
 *   4. 404 when no route has the path; 405 with an Allow header when none has the method.
 *   5. the route's handler (see http.h for how a handler answers).
 * From 3 on, req->error_shape is the API's whose path it is (ROUTE_ANTHROPIC: Anthropic's error
 * body), so the 401 and 405 of an Anthropic route are what an Anthropic client parses.
 * Steps 1-4 are router_refuse(), which the server also calls when the head of a request with a
 * body is complete (net/server.h: app->on_head), so that a refused request is answered before
 * its body is read.
 *
 * A path ending in '*' matches every path with that prefix ("/v1/models/" + '*'). HEAD is
 * answered by the path's GET route unless it has a HEAD route (the server sends the head of the
 * GET's response without its body); Allow lists HEAD beside GET.
 *
 *   struct router r;
 *   router_init(&r, &cfg.api_key, &cfg.cors_origin);
 *   router_add(&r, "GET", "/health", serving_health_handle, &srv, ROUTE_PUBLIC);
 *   router_add(&r, "POST", "/completion", serving_completion_handle, &srv, 0);
 *   ... for each parsed request: router_dispatch(&r, req);   // the server's request hook
 *
 * The router keeps pointers to the lists and to every string given to router_add: they must
 * outlive it. Routes are added at startup, before the server accepts; lookups are linear
 * (a few dozen routes).
 */
#ifndef UVLM_API_ROUTER_H
#define UVLM_API_ROUTER_H

#include "api/http.h"
#include "common/config.h"

#include <stdbool.h>
#include <stddef.h>

#define ROUTER_MAX_ROUTES 64

enum route_flags {
    ROUTE_PUBLIC = 1, /* no API key needed (/health) */
    ROUTE_ANTHROPIC = 2, /* its errors (the 401 and 405 too) take Anthropic's shape (/v1/messages) */
};

typedef void (*http_handler_fn)(struct http_request *req, void *data);

struct route {
    const char *method;
    const char *path;
    http_handler_fn handle;
    void *data; /* given to the handler, also as req->route_data */
    unsigned flags;
};

struct router {
    struct route routes[ROUTER_MAX_ROUTES];
    int n_routes;
    const struct config_list *api_keys;    /* none: no authentication */
    const struct config_list *cors_origins; /* none: no CORS headers */
};

void router_init(struct router *r, const struct config_list *api_keys, const struct config_list *cors_origins);

/* Returns 0, or -ERR_NOMEM when the table is full, -ERR_INVAL for a duplicate method+path. */
int router_add(struct router *r, const char *method, const char *path, http_handler_fn handle, void *data,
               unsigned flags);

/* Answer (or hand to its handler) one complete request. */
void router_dispatch(const struct router *r, struct http_request *req);

/* Steps 1-4 above: answer the request when it is refused (a preflight counts) and return true;
 * false when it goes to its handler (nothing answered; CORS headers may have been added). Looks
 * only at the method, path and headers: callable before the body has arrived. */
bool router_refuse(const struct router *r, struct http_request *req);

/* The route for method+path (HEAD: the GET route when there is no HEAD route): 0 with *out set,
 * -ERR_NOTFOUND (no such path), or -ERR_UNSUPPORTED (path exists, method does not). */
int router_match(const struct router *r, const char *method, const char *path, const struct route **out);

/* "GET, HEAD, POST, OPTIONS": the methods the path accepts, for Allow headers. Returns its length. */
size_t router_allow(const struct router *r, const char *path, char *out, size_t cap);

/* 1 when the request carries one of the keys (or no keys are configured). */
int router_authorized(const struct router *r, const struct http_request *req);

#endif
