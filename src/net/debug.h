/* debug.h: debugging endpoints, registered only with --debug-endpoints. They exist so that the
 * end-to-end tests can exercise the server core before any model does:
 *   GET  /debug/stream?n=10&interval_ms=100&size=0
 *        an event stream of n events {"i":k,"n":n,"pad":"xx.."} (pad has `size` bytes), one per
 *        interval (0: as fast as the loop turns), then the end of the stream.
 *   GET  /debug/delay?ms=100   answers {"delayed_ms":100} after ms (a late answer, http.h way 2)
 *   POST /debug/echo           answers the request body as application/octet-stream
 *   GET  /debug/stats          the server's counters as JSON (cancel callbacks, backpressure...)
 * The engine driver adds, with the same flag (net/engine_driver.c):
 *   POST /debug/slow-step?ms=N the next step sleeps N ms before computing (a hung engine:
 *        /health turns "stalled"); answers {"slow_step_ms":N}
 */
#ifndef UVLM_NET_DEBUG_H
#define UVLM_NET_DEBUG_H

#include "net/server.h"

int debug_routes_add(struct app *app);

#endif
