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
    const struct route *get = NULL; /* what a HEAD without a route of its own is answered by */
    for (int i = 0; i < r->n_routes; i++) {
        if (!path_matches(r->routes[i].path, path)) continue;
        path_known = 1;
        if (!strcmp(r->routes[i].method, method)) {
            *out = &r->routes[i];
            return 0;
        }
        if (!get && !strcmp(r->routes[i].method, "GET")) get = &r->routes[i];
    }
    if (get && !strcmp(method, "HEAD")) {
        *out = get;
        return 0;
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
        if (!seen && n < cap)
            n += (size_t)snprintf(out + n, cap - n, "%s, %s", r->routes[i].method,
                                  !strcmp(r->routes[i].method, "GET") ? "HEAD, " : "");
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

/* The origin itself, or "scheme://host:*": that scheme and host on any port, or on none. */
static int origin_matches(const char *pattern, const char *origin) {
    size_t n = strlen(pattern);
    if (n < 2 || strcmp(pattern + n - 2, ":*")) return !strcmp(pattern, origin);
    if (strncmp(pattern, origin, n - 2)) return 0;
    const char *port = origin + n - 2;
    if (!*port) return 1;
    if (*port++ != ':') return 0; /* "http://localhost.evil.example" is another host */
    size_t digits = strspn(port, "0123456789");
    return digits >= 1 && digits <= 5 && !port[digits];
}

/* The `localhost` keyword: pages served from this machine, on any port. */
static const char *const loopback_origins[] = {"http://localhost:*",  "http://127.0.0.1:*",  "http://[::1]:*",
                                               "https://localhost:*", "https://127.0.0.1:*", "https://[::1]:*"};

/* Access-Control-Allow-Origin for the request's Origin, or NULL when CORS does not allow it. */
static const char *cors_allowed_origin(const struct router *r, const struct http_request *req) {
    const char *origin = http_header(req, "Origin");
    if (!r->cors_origins || !origin) return NULL;
    for (int i = 0; i < r->cors_origins->n; i++) {
        const char *allowed = r->cors_origins->v[i];
        if (!strcmp(allowed, "*")) return "*";
        if (!strcmp(allowed, "localhost")) {
            for (size_t j = 0; j < sizeof loopback_origins / sizeof *loopback_origins; j++)
                if (origin_matches(loopback_origins[j], origin)) return origin;
        } else if (origin_matches(allowed, origin)) {
            return origin;
        }
    }
    return NULL;
}

bool router_refuse(const struct router *r, struct http_request *req) {
    const char *allow_origin = cors_allowed_origin(r, req);
    if (allow_origin) {
        http_add_header(req, "Access-Control-Allow-Origin", allow_origin);
        if (strcmp(allow_origin, "*")) http_add_header(req, "Vary", "Origin");
    }
    char allow[256];
    const struct route *route = NULL;
    int rc = router_match(r, req->method, req->path, &route);
    if (rc == -ERR_UNSUPPORTED && !strcmp(req->method, "OPTIONS")) { /* preflight, or a plain OPTIONS */
        router_allow(r, req->path, allow, sizeof allow);
        http_add_header(req, "Allow", allow);
        if (allow_origin) {
            const char *asked = http_header(req, "Access-Control-Request-Headers");
            http_add_header(req, "Access-Control-Allow-Methods", allow);
            http_add_header(req, "Access-Control-Allow-Headers", asked ? asked : "Authorization, Content-Type, X-Api-Key");
            http_add_header(req, "Access-Control-Max-Age", "86400");
        }
        http_respond(req, 200, "text/plain", "", 0);
        return true;
    }
    if (rc == 0 && (route->flags & ROUTE_PUBLIC)) return false;
    for (int i = 0; i < r->n_routes; i++) /* the API the path belongs to shapes its errors */
        if (path_matches(r->routes[i].path, req->path)) {
            req->error_shape = r->routes[i].flags & ROUTE_ANTHROPIC ? HTTP_ERRORS_ANTHROPIC : HTTP_ERRORS_OPENAI;
            break;
        }
    /* before 404 and 405: without a key, which paths and methods exist is not told */
    if (!router_authorized(r, req)) {
        http_add_header(req, "WWW-Authenticate", "Bearer");
        http_respond_error(req, 401, "Invalid API Key");
        return true;
    }
    if (rc == -ERR_NOTFOUND) {
        char msg[160];
        snprintf(msg, sizeof msg, "File Not Found: %.120s", req->path);
        http_respond_error(req, 404, msg);
        return true;
    }
    if (rc < 0) {
        router_allow(r, req->path, allow, sizeof allow);
        http_add_header(req, "Allow", allow);
        char msg[160];
        snprintf(msg, sizeof msg, "Method %.16s not allowed on %.120s", req->method, req->path);
        http_respond_error(req, 405, msg);
        return true;
    }
    return false;
}

void router_dispatch(const struct router *r, struct http_request *req) {
    if (router_refuse(r, req)) return;
    const struct route *route = NULL;
    router_match(r, req->method, req->path, &route); /* found: router_refuse let it through */
    req->route_data = route->data;
    route->handle(req, route->data);
}
