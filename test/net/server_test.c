/* server_test.c: the app lifecycle on a real loop: loading -> ready through the loader hook, a
 * failing loader stops the server with status 1, a drain with nothing in flight stops at once. */
#include "test.h"
#include "common/err.h"
#include "net/server.h"

struct loader {
    uv_timer_t timer;
    int status;                  /* what the load reports */
    enum app_state state_before; /* seen when the load finished */
    enum app_state state_after;
    int stops;
};

static void loaded_cb(uv_timer_t *t) {
    struct app *app = t->data;
    struct loader *l = app->load_data;
    l->state_before = app->state;
    app_loaded(app, l->status);
    l->state_after = app->state;
    if (app->state == APP_READY) app_drain(app); /* nothing in flight: stops at once */
}

static int load_start(struct app *app, void *data) {
    struct loader *l = data;
    uv_timer_init(app->loop, &l->timer);
    l->timer.data = app;
    return uv_timer_start(&l->timer, loaded_cb, 20, 0) ? -ERR_IO : 0;
}

static int refuse_load(struct app *app, void *data) {
    return -ERR_FORMAT;
}

static void loader_stop(struct app *app, void *data) {
    struct loader *l = data;
    l->stops++;
    if (l->timer.loop && !uv_is_closing((uv_handle_t *)&l->timer)) uv_close((uv_handle_t *)&l->timer, NULL);
}

static int run_app(struct loader *l, app_load_fn load, int *exit_status, enum app_state *state_at_start) {
    char *argv[] = {"uvlm", "--port", "0", "--log-level", "off"};
    char msg[256];
    struct config cfg;
    uv_loop_t loop;
    struct app app;
    if (config_load(&cfg, 5, argv, NULL, msg, sizeof msg)) return -1;
    uv_loop_init(&loop);
    app_init(&app, &cfg, &loop);
    app.load = load;
    app.load_data = l;
    app_on_stop(&app, loader_stop, l);
    int rc = app_start(&app);
    *state_at_start = app.state;
    if (!rc) uv_run(&loop, UV_RUN_DEFAULT);
    app_close(&app);
    *exit_status = app.exit_status;
    rc = rc ? rc : uv_loop_close(&loop);
    config_free(&cfg);
    return rc;
}

TEST(server_loader_hook_loading_then_ready) {
    struct loader l = {.status = 0};
    int status;
    enum app_state at_start;
    CHECK_EQ_INT(run_app(&l, load_start, &status, &at_start), 0);
    CHECK_EQ_INT(at_start, APP_LOADING); /* listening while the load runs */
    CHECK_EQ_INT(l.state_before, APP_LOADING);
    CHECK_EQ_INT(l.state_after, APP_READY);
    CHECK_EQ_INT(l.stops, 1);
    CHECK_EQ_INT(status, 0);
}

TEST(server_failed_load_stops_with_status_1_or_2_for_unusable_model) {
    struct loader l = {.status = -ERR_NOMEM};
    int status;
    enum app_state at_start;
    CHECK_EQ_INT(run_app(&l, load_start, &status, &at_start), 0);
    CHECK_EQ_INT(l.state_after, APP_LOADING);
    CHECK_EQ_INT(status, 1);
    struct loader refused = {0};
    CHECK_EQ_INT(run_app(&refused, refuse_load, &status, &at_start), 0);
    CHECK_EQ_INT(status, 2); /* -ERR_FORMAT: the model cannot be used */
    CHECK_EQ_INT(refused.stops, 1);
}

TEST(server_no_loader_is_ready_at_once) {
    char *argv[] = {"uvlm", "--port", "0", "--log-level", "off"};
    char msg[256];
    struct config cfg;
    uv_loop_t loop;
    struct app app;
    CHECK_EQ_INT(config_load(&cfg, 5, argv, NULL, msg, sizeof msg), 0);
    uv_loop_init(&loop);
    app_init(&app, &cfg, &loop);
    CHECK_EQ_INT(app_start(&app), 0);
    CHECK_EQ_INT(app.state, APP_READY);
    CHECK(app.port > 0);
    app_drain(&app);
    CHECK_EQ_INT(app.state, APP_DRAINING);
    uv_run(&loop, UV_RUN_DEFAULT);
    app_close(&app);
    CHECK_EQ_INT(uv_loop_close(&loop), 0);
    CHECK_EQ_INT(app.exit_status, 0);
    config_free(&cfg);
}
