#include "test.h"
#include "common/log.h"

#include <stdlib.h>

/* A logger writing into memory; read *buf after fclose(*f). */
static struct log memory_log(enum log_level level, FILE **f, char **buf, size_t *len) {
    struct log lg;
    *f = open_memstream(buf, len);
    log_init(&lg, level, *f);
    return lg;
}

TEST(log_filters_by_level_and_stamps_lines) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f;
    struct log lg = memory_log(LOG_WARN, &f, &buf, &len);
    log_info(&lg, "hidden %d", 1);
    log_warn(&lg, "shown %d", 2);
    log_error(&lg, "also %s", "shown");
    fclose(f);
    CHECK(!strstr(buf, "hidden"));
    CHECK(strstr(buf, "WARN  shown 2\n"));
    CHECK(strstr(buf, "ERROR also shown\n"));
    /* 2026-11-22T13:30:00.123Z */
    CHECK(len > 24 && buf[4] == '-' && buf[10] == 'T' && buf[19] == '.' && buf[23] == 'Z');
    free(buf);
}

TEST(log_level_names) {
    CHECK_EQ_INT(log_level_parse("debug"), LOG_DEBUG);
    CHECK_EQ_INT(log_level_parse("error"), LOG_ERROR);
    CHECK_EQ_INT(log_level_parse("off"), LOG_OFF);
    CHECK_EQ_INT(log_level_parse("loud"), -1);
}

TEST(log_long_message_is_one_cut_line) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f;
    struct log lg = memory_log(LOG_DEBUG, &f, &buf, &len);
    char big[5000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    log_debug(&lg, "%s", big);
    fclose(f);
    CHECK(len < 2100);
    CHECK(buf[len - 1] == '\n' && !memchr(buf, '\n', len - 1));
    free(buf);
}
