/* debug.h: debugging endpoints, registered only with --debug-endpoints. They exist so that the
 * end-to-end tests can exercise the server core before any model does:
 *   GET  /debug/stream?n=10&interval_ms=100&size=0
 *        an event stream of n events {"i":k,"n":n,"pad":"xx.."} (pad has `size` bytes), one per
 *        interval (0: as fast as the loop turns), then the end of the stream.
 *   GET  /debug/delay?ms=100   answers {"delayed_ms":100} after ms (a late answer, http.h way 2)
 *   POST /debug/echo           answers the request body as application/octet-stream
 *   GET  /debug/stats          the server's counters as JSON (cancel callbacks, backpressure...)
 * The engine driver adds, with the same flag (engine_driver_routes_add):
 *   POST /debug/slow-step?ms=N the next step sleeps N ms before computing (a hung engine:
 *        /health turns "stalled"); answers {"slow_step_ms":N}
 *
 *   if (cfg->debug_endpoints) rc = debug_routes_add(&app, &router);   // 0, or router_add's error
 */
#ifndef UVLM_NET_DEBUG_H
#define UVLM_NET_DEBUG_H

#include "api/router.h"
#include "net/server.h"

/* The routes' data is the app, which must outlive the router. */
int debug_routes_add(struct app *app, struct router *r);

#endif
