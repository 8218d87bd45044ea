/* webui.h: the chat page at GET /, embedded in the binary.
 *
 * Three static files, written by hand and served as they are (no build step, nothing fetched
 * from elsewhere): src/api/webui.html (GET /), webui.css (GET /webui.css) and webui.js
 * (GET /webui.js). The Makefile turns them into C arrays (scripts/embed) in a header that only
 * webui.c includes. The page talks to the server's own API from the browser: it streams
 * POST /v1/chat/completions (stream: true) and polls GET /health?detail=1 for its status bar.
 *
 * The routes are ROUTE_PUBLIC: the files hold no secret, and with --api-key the page asks for
 * the key when the API answers 401 and keeps it in the tab's sessionStorage. Every response
 * carries a Content-Security-Policy that allows scripts, styles and connections from the
 * server's own origin only (no inline script or style, no framing, no form targets), and
 * X-Content-Type-Options: nosniff.
 *
 *   if (!cfg->no_webui) rc = webui_routes_add(&router);   // --no-webui: GET / is 404
 */
#ifndef UVLM_API_WEBUI_H
#define UVLM_API_WEBUI_H

#include "api/router.h"

/* Register GET /, GET /webui.css and GET /webui.js. 0 or router_add's error. */
int webui_routes_add(struct router *r);

/* The policy sent with every file of the page. */
extern const char webui_csp[];

#endif
