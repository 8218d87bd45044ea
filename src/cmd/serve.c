/* serve.c: `uvlm [serve] [FLAGS]`: load the config, start the HTTP server, run the loop until
 * drained. The only place that wires the layers together: the server (net) hands each request
 * to the router (api), whose routes reach the serving state (api), which the engine driver (net)
 * runs on the loop and its compute thread. */
#include "api/router.h"
#include "api/serving.h"
#include "api/webui.h"
#include "cmd/cmd.h"
#include "common/config.h"
#include "common/err.h"
#include "common/hugemem.h"
#include "net/debug.h"
#include "net/engine_driver.h"
#include "net/server.h"
#include "sampler/grammar.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

extern char **environ;

/* The server's request hook: every complete request goes through the router. */
static void serve_request(struct http_request *req, void *router) {
    router_dispatch(router, req);
}

/* ... and the head of each request with a body: refused (no key, no such route) before its body is read. */
static bool serve_head(struct http_request *req, void *router) {
    return router_refuse(router, req);
}

/* The model file must be a readable regular file: checked before listening, so that a wrong path
 * is a configuration error (status 2) at once, not a load failure later. O_NONBLOCK: opening a
 * FIFO must not wait for a writer. */
static int check_model_file(const char *path, char *msg, size_t cap) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(msg, cap, "%s", strerror(errno));
        return -ERR_INVAL;
    }
    struct stat st;
    int rc = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? 0 : -ERR_INVAL; /* a directory, a device, a FIFO */
    if (rc) snprintf(msg, cap, "not a regular file");
    close(fd);
    return rc;
}

/* The memory compiled grammars may keep (their masks, above all: n_vocab / 8 bytes each): 1/32
 * of the memory available at startup, between 64 MiB and 1 GiB; the default where the kernel does
 * not say. Set once listening (the first line of the log says where), before the loop runs a
 * request. */
static void size_grammar_budget(struct app *app) {
    int64_t avail = hugemem_available(), bytes = avail > 0 ? avail / 32 : GRAMMAR_BUDGET_DEFAULT;
    if (bytes < (64ll << 20)) bytes = 64ll << 20;
    if (bytes > (1ll << 30)) bytes = 1ll << 30;
    grammar_budget_set(bytes);
    log_info(&app->log, "grammar caches: at most %lld MiB (%s)", (long long)(bytes >> 20),
             avail > 0 ? "1/32 of the available memory" : "the default");
}

static int add_routes(struct router *r, struct app *app, struct serving *srv, struct engine_driver *drv) {
    int rc = serving_routes_add(r, srv); /* /health and every model endpoint */
    if (!rc && !app->cfg->no_webui) rc = webui_routes_add(r); /* the chat page at GET / */
    if (!rc && app->cfg->debug_endpoints) rc = engine_driver_routes_add(drv, r);
    if (!rc && app->cfg->debug_endpoints) rc = debug_routes_add(app, r);
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
    struct router router;
    router_init(&router, &cfg.api_key, &cfg.cors_origin);
    app.on_request = serve_request;
    app.on_head = serve_head;
    app.health_path = "/health"; /* served beyond --max-connections too (a small reserve) */
    app.request_data = &router;
    struct serving srv;
    serving_init(&srv, &cfg, &app.log);
    const char *bad_flag = NULL, *bad_path = NULL;
    if (check_model_file(srv.model_path, msg, sizeof msg)) bad_flag = "model", bad_path = srv.model_path;
    else if (*cfg.model_draft && check_model_file(cfg.model_draft, msg, sizeof msg))
        bad_flag = "model-draft", bad_path = cfg.model_draft;
    if (bad_flag) {
        fprintf(stderr, "uvlm: --%s '%s': %s\n", bad_flag, bad_path, msg);
        serving_free(&srv);
        uv_loop_close(&loop);
        config_free(&cfg);
        return 2;
    }
    struct engine_driver drv;
    engine_driver_init(&drv, &app, &serving_ops, &srv); /* the model loads when the app starts */
    srv.kick = engine_driver_kick;
    srv.driver = &drv;
    rc = add_routes(&router, &app, &srv, &drv);
    if (!rc) rc = app_start(&app);
    if (!rc) size_grammar_budget(&app);
    if (!rc) uv_run(&loop, UV_RUN_DEFAULT);
    else app.exit_status = 1;
    engine_driver_close(&drv);
    app_close(&app);
    serving_free(&srv);
    engine_driver_free(&drv);
    if (uv_loop_close(&loop)) log_error(&app.log, "loop closed with handles still open");
    log_info(&app.log, "exit %d", app.exit_status);
    config_free(&cfg);
    return app.exit_status;
}
