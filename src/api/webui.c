/* webui.c: the chat page's three files, answered from the arrays the Makefile embeds. */
#include "api/webui.h"

#include "api/webui_assets.h" /* generated in BUILD/gen: webui_html, webui_css, webui_js (scripts/embed) */

/* 'self' only; no inline code (the page's script and style are files of their own); nothing may
 * frame the page or be a form's target; data: images only for the empty favicon; HTML enters the
 * page only through the script's one Trusted Types policy (its Markdown renderer). */
const char webui_csp[] = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                         "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
                         "frame-ancestors 'none'; require-trusted-types-for 'script'; trusted-types uvlm-markdown";

struct webui_file {
    const char *content_type;
    const unsigned char *body;
    size_t len;
};

static const struct webui_file page = {"text/html; charset=utf-8", webui_html, sizeof webui_html};
static const struct webui_file style = {"text/css; charset=utf-8", webui_css, sizeof webui_css};
static const struct webui_file script = {"text/javascript; charset=utf-8", webui_js, sizeof webui_js};

static void file_handle(struct http_request *req, void *data) {
    const struct webui_file *f = data;
    http_add_header(req, "Content-Security-Policy", webui_csp);
    http_add_header(req, "X-Content-Type-Options", "nosniff");
    http_add_header(req, "Referrer-Policy", "no-referrer");
    /* the files change with the binary: revalidate rather than keep an old script */
    http_add_header(req, "Cache-Control", "no-cache");
    http_respond(req, 200, f->content_type, (const char *)f->body, f->len);
}

int webui_routes_add(struct router *r) {
    int rc = router_add(r, "GET", "/", file_handle, (void *)&page, ROUTE_PUBLIC);
    if (!rc) rc = router_add(r, "GET", "/webui.css", file_handle, (void *)&style, ROUTE_PUBLIC);
    if (!rc) rc = router_add(r, "GET", "/webui.js", file_handle, (void *)&script, ROUTE_PUBLIC);
    return rc;
}
