#include "api/router.h"
#include "common/err.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

void router_init(struct router *r, const struct config_list *api_keys, const struct config_list *cors_origins) {
    memset(r, 0, sizeof *r);
    r->api_keys = api_keys;
    r->cors_origins = cors_origins;
}

static int path_matches(const char *pattern, const char *path) {
    size_t n = strlen(pattern);
    if (n && pattern[n - 1] == '*') return !strncmp(pattern, path, n - 1);
    return !strcmp(pattern, path);
}

int router_add(struct router *r, const char *method, const char *path, http_handler_fn handle, void *data,
               unsigned flags) {
    for (int i = 0; i < r->n_routes; i++)
        if (!strcmp(r->routes[i].method, method) && !strcmp(r->routes[i].path, path)) return -ERR_INVAL;
    if (r->n_routes == ROUTER_MAX_ROUTES) return -ERR_NOMEM;
    r->routes[r->n_routes++] = (struct route){method, path, handle, data, flags};
    return 0;
}

int router_match(const struct router *r, const char *method, const char *path, const struct route **out) {
    int path_known = 0;
    for (int i = 0; i < r->n_routes; i++) {
        if (!path_matches(r->routes[i].path, path)) continue;
        path_known = 1;
        if (!strcmp(r->routes[i].method, method)) {
            *out = &r->routes[i];
            return 0;
        }
    }
    return path_known ? -ERR_UNSUPPORTED : -ERR_NOTFOUND;
}

size_t router_allow(const struct router *r, const char *path, char *out, size_t cap) {
    size_t n = 0;
    out[0] = '\0';
    for (int i = 0; i < r->n_routes; i++) {
        if (!path_matches(r->routes[i].path, path)) continue;
        int seen = 0; /* a method listed by an earlier (e.g. prefix) route */
        for (int j = 0; j < i && !seen; j++)
            seen = path_matches(r->routes[j].path, path) && !strcmp(r->routes[j].method, r->routes[i].method);
        if (!seen && n < cap) n += (size_t)snprintf(out + n, cap - n, "%s, ", r->routes[i].method);
    }
    if (n < cap) n += (size_t)snprintf(out + n, cap - n, "OPTIONS");
    return n < cap ? n : cap - 1;
}

/* Equal strings, in time that depends only on the lengths, not on where they differ. */
static int equal_ct(const char *a, size_t alen, const char *b, size_t blen) {
    size_t n = alen > blen ? alen : blen;
    unsigned char diff = alen != blen;
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)((i < alen ? a[i] : 0) ^ (i < blen ? b[i] : 0));
    return diff == 0;
}

int router_authorized(const struct router *r, const struct http_request *req) {
    if (!r->api_keys || r->api_keys->n == 0) return 1;
    const char *given = http_header(req, "X-Api-Key");
    const char *auth = http_header(req, "Authorization");
    if (auth && !strncasecmp(auth, "Bearer ", 7)) {
        given = auth + 7;
        while (*given == ' ') given++;
    }
    if (!given) return 0;
    int ok = 0;
    for (int i = 0; i < r->api_keys->n; i++) /* no early exit: every key costs the same */
        ok |= equal_ct(given, strlen(given), r->api_keys->v[i], strlen(r->api_keys->v[i]));
    return ok;
}

/* Access-Control-Allow-Origin for the request's Origin, or NULL when CORS does not allow it. */
static const char *cors_allowed_origin(const struct router *r, const struct http_request *req) {
    const char *origin = http_header(req, "Origin");
    if (!r->cors_origins || !origin) return NULL;
    for (int i = 0; i < r->cors_origins->n; i++) {
        if (!strcmp(r->cors_origins->v[i], "*")) return "*";
        if (!strcmp(r->cors_origins->v[i], origin)) return origin;
    }
    return NULL;
}

void router_dispatch(const struct router *r, struct http_request *req) {
    const char *allow_origin = cors_allowed_origin(r, req);
    if (allow_origin) {
        http_add_header(req, "Access-Control-Allow-Origin", allow_origin);
        if (strcmp(allow_origin, "*")) http_add_header(req, "Vary", "Origin");
    }
    char allow[256];
    const struct route *route = NULL;
    int rc = router_match(r, req->method, req->path, &route);
    if (rc == -ERR_NOTFOUND) {
        char msg[160];
        snprintf(msg, sizeof msg, "File Not Found: %.120s", req->path);
        http_respond_error(req, 404, msg);
        return;
    }
    for (int i = 0; i < r->n_routes; i++) /* the API the path belongs to shapes its errors */
        if (path_matches(r->routes[i].path, req->path)) {
            req->error_shape = r->routes[i].flags & ROUTE_ANTHROPIC ? HTTP_ERRORS_ANTHROPIC : HTTP_ERRORS_OPENAI;
            break;
        }
    if (rc < 0) {
        router_allow(r, req->path, allow, sizeof allow);
        http_add_header(req, "Allow", allow);
        if (!strcmp(req->method, "OPTIONS")) { /* preflight, or a plain OPTIONS */
            if (allow_origin) {
                const char *asked = http_header(req, "Access-Control-Request-Headers");
                http_add_header(req, "Access-Control-Allow-Methods", allow);
                http_add_header(req, "Access-Control-Allow-Headers",
                                asked ? asked : "Authorization, Content-Type, X-Api-Key");
                http_add_header(req, "Access-Control-Max-Age", "86400");
            }
            http_respond(req, 204, NULL, "", 0);
            return;
        }
        char msg[160];
        snprintf(msg, sizeof msg, "Method %.16s not allowed on %.120s", req->method, req->path);
        http_respond_error(req, 405, msg);
        return;
    }
    if (!(route->flags & ROUTE_PUBLIC) && !router_authorized(r, req)) {
        http_add_header(req, "WWW-Authenticate", "Bearer");
        http_respond_error(req, 401, "Invalid API Key");
        return;
    }
    req->route_data = route->data;
    route->handle(req, route->data);
}
