/* The log callback and level through the C API (process-wide):
 *   - without DEVPLUG_LOG the level is DP_LOG_WARN;
 *   - a failed plugin load's warning reaches the callback (level, source "devplug", the path),
 *     not standard error; at DP_LOG_ERROR it is not logged at all;
 *   - at DP_LOG_INFO a plugin's own message arrives with the plugin as its source;
 *   - a callback that calls devplug, which logs, is not re-entered (that message goes to
 *     standard error);
 *   - messages logged on another thread reach it;
 *   - replacing the callback calls the old one's drop exactly once, and the old one hears no
 *     more; a NULL callback drops its data at once and returns the log to standard error;
 *   - a level out of range is DP_INVALID_ARGUMENT and changes nothing. */
#include "dp_test.h"

#include <pthread.h>

#define SIM DEVPLUG_TEST_PLUGIN_DIR "/libdevplug_sim.so"

typedef struct {
    int count;
    int level;
    char source[128];
    char message[512];
    int reenter; /* the callback calls devplug (which logs) once when set */
    dp_runtime_t *rt;
} sink_t;

static int drops_a = 0, drops_b = 0;

static void on_log(const dp_log_record_t *r, void *user) {
    sink_t *s = (sink_t *)user;
    DP_TEST_ATOMIC_INC(s->count);
    s->level = r->level;
    snprintf(s->source, sizeof s->source, "%s", r->source);
    snprintf(s->message, sizeof s->message, "%s", r->message);
    if (s->reenter) {
        s->reenter = 0;
        /* Logs a warning of its own: standard error, not this callback again. */
        (void)dp_runtime_load_plugin_path(s->rt, "/no/such/dir/libreentered.so");
    }
}

static void drop_a(void *user) {
    (void)user;
    DP_TEST_ATOMIC_INC(drops_a);
}
static void drop_b(void *user) {
    (void)user;
    DP_TEST_ATOMIC_INC(drops_b);
}

static void *fail_a_load(void *rt) {
    (void)dp_runtime_load_plugin_path((dp_runtime_t *)rt, "/no/such/dir/libthreaded.so");
    return NULL;
}

int main(void) {
    dp_runtime_options_t o;
    dp_runtime_t *rt = NULL;
    sink_t a, b;
    pthread_t th;
    const char *opts[] = {"devices=1"};
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    dp_runtime_options_init(&o, sizeof o);
    o.discover_plugins = 0;
    DP_TEST_MUST(dp_runtime_create(&o, &rt));
    a.rt = b.rt = rt;

    SECTION("the level");
    if (getenv("DEVPLUG_LOG") == NULL) CHECK(dp_log_level() == DP_LOG_WARN);
    CHECK_OK(dp_log_set_level(DP_LOG_WARN));
    CHECK(dp_log_level() == DP_LOG_WARN);
    CHECK_STATUS_MSG(dp_log_set_level(6), DP_INVALID_ARGUMENT, "level");
    CHECK_STATUS_MSG(dp_log_set_level(-1), DP_INVALID_ARGUMENT, "level");
    CHECK(dp_log_level() == DP_LOG_WARN);

    SECTION("a search path's failed load: its warning reaches the callback");
    CHECK_OK(dp_log_set_callback(on_log, &a, drop_a));
    CHECK_OK(dp_runtime_load_plugin_path(rt, "/no/such/dir/libmissing.so"));
    CHECK(a.count == 1);
    CHECK(a.level == DP_LOG_WARN);
    CHECK_STR(a.source, "devplug");
    CHECK(strstr(a.message, "/no/such/dir/libmissing.so") != NULL);

    SECTION("below the level nothing is logged");
    CHECK_OK(dp_log_set_level(DP_LOG_ERROR));
    CHECK(dp_log_level() == DP_LOG_ERROR);
    CHECK_OK(dp_runtime_load_plugin_path(rt, "/no/such/dir/libmissing.so"));
    CHECK(a.count == 1);

    SECTION("an explicit load's failure is the caller's error: logged at DP_LOG_INFO only");
    a.count = 0;
    CHECK_STATUS(dp_runtime_load_plugin(rt, "/no/such/dir/libexplicit.so", NULL, 0), DP_NOT_FOUND);
    CHECK(a.count == 0);
    CHECK_OK(dp_log_set_level(DP_LOG_INFO));
    CHECK_STATUS(dp_runtime_load_plugin(rt, "/no/such/dir/libexplicit.so", NULL, 0), DP_NOT_FOUND);
    CHECK(a.count == 1);
    CHECK(a.level == DP_LOG_INFO);
    CHECK(strstr(a.message, "libexplicit.so") != NULL);
    CHECK_OK(dp_log_set_level(DP_LOG_WARN));
    a.count = 1;

    SECTION("a plugin's own message, at DP_LOG_INFO");
    CHECK_OK(dp_log_set_level(DP_LOG_INFO));
    a.count = 0;
    CHECK_OK(dp_runtime_load_plugin(rt, SIM, opts, 1));
    CHECK(a.count >= 1);
    CHECK(a.level == DP_LOG_INFO);
    CHECK(strstr(a.source, "plugin '") == a.source);
    CHECK(strstr(a.message, "SIM: platform SIM") != NULL);
    CHECK_OK(dp_log_set_level(DP_LOG_WARN));

    SECTION("a callback that calls devplug is not re-entered");
    a.count = 0;
    a.reenter = 1;
    CHECK_OK(dp_runtime_load_plugin_path(rt, "/no/such/dir/libfirst.so"));
    CHECK(a.count == 1);
    CHECK(strstr(a.message, "libfirst.so") != NULL);

    SECTION("messages from another thread");
    a.count = 0;
    CHECK(pthread_create(&th, NULL, fail_a_load, rt) == 0);
    CHECK(pthread_join(th, NULL) == 0);
    CHECK(a.count == 1);
    CHECK(strstr(a.message, "libthreaded.so") != NULL);

    SECTION("replacing and removing the callback");
    CHECK(drops_a == 0);
    CHECK_OK(dp_log_set_callback(on_log, &b, drop_b));
    CHECK(drops_a == 1);
    a.count = 0;
    CHECK_OK(dp_runtime_load_plugin_path(rt, "/no/such/dir/libsecond.so"));
    CHECK(a.count == 0);
    CHECK(b.count == 1);
    CHECK_OK(dp_log_set_callback(NULL, &a, drop_a)); /* nothing installed with &a: dropped now */
    CHECK(drops_a == 2);
    CHECK(drops_b == 1);
    b.count = 0;
    CHECK_OK(dp_runtime_load_plugin_path(rt, "/no/such/dir/libthird.so"));
    CHECK(b.count == 0);
    CHECK_OK(dp_log_set_callback(NULL, NULL, NULL));
    CHECK(drops_a == 2 && drops_b == 1);
    CHECK_OK(dp_log_set_level(DP_LOG_DEFAULT));
    if (getenv("DEVPLUG_LOG") == NULL) CHECK(dp_log_level() == DP_LOG_WARN);

    dp_runtime_destroy(rt);
    return DP_TEST_SUMMARY();
}
