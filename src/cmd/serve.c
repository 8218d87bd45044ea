/* serve.c: `uvlm [serve] [FLAGS]`: load the config, start the HTTP server, run the loop until
 * drained. The only place that wires the layers together (config -> app -> routes). */
#include "api/health.h"
#include "cmd/cmd.h"
#include "common/config.h"
#include "common/err.h"
#include "net/debug.h"
#include "net/engine_driver.h"
#include "net/server.h"

#include <signal.h>
#include <stdio.h>

extern char **environ;

static int add_routes(struct app *app, struct engine_driver *engine) {
    int rc = engine_driver_init(engine, app); /* the model loader, /health and every model endpoint */
    if (!rc && app->cfg->debug_endpoints) rc = debug_routes_add(app);
    return rc;
}

int cmd_serve(int argc, char **argv) {
    struct config cfg;
    char msg[512];
    int rc = config_load(&cfg, argc, argv, environ, msg, sizeof msg);
    if (rc == CONFIG_HELP || rc < 0) {
        if (rc == CONFIG_HELP) config_usage(stdout, "uvlm");
        else fprintf(stderr, "uvlm: %s (see uvlm --help)\n", msg);
        config_free(&cfg);
        return rc == CONFIG_HELP ? 0 : 2;
    }
    signal(SIGPIPE, SIG_IGN); /* a client that went away is a write error, not a dead server */
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct app app;
    app_init(&app, &cfg, &loop);
    struct engine_driver engine;
    rc = add_routes(&app, &engine);
    if (!rc) rc = app_start(&app);
    if (!rc) uv_run(&loop, UV_RUN_DEFAULT);
    else app.exit_status = 1;
    engine_driver_close(&engine);
    app_close(&app);
    engine_driver_free(&engine);
    if (uv_loop_close(&loop)) log_error(&app.log, "loop closed with handles still open");
    log_info(&app.log, "exit %d", app.exit_status);
    config_free(&cfg);
    return app.exit_status;
}
