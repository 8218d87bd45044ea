/* stream_text_test.c: stop strings across tokens, hold-back of possible stop prefixes and cut
 * characters, and that the pieces taken always add up to the final text. */
#include "test.h"

#include <stdint.h>
#include <stdlib.h>

#include "api/stream_text.h"
#include "common/err.h"

/* Feed pieces, taking after each; returns what was taken, joined (caller frees). */
static char *feed(struct stream_text *st, const char *const *pieces, size_t n_pieces,
                  size_t *n_takes_nonempty) {
    char *out = calloc(1, 4096);
    size_t at = 0, n;
    *n_takes_nonempty = 0;
    for (size_t i = 0; i < n_pieces && !st->stopped; i++) {
        if (stream_text_append(st, pieces[i], strlen(pieces[i])) < 0) abort();
        const char *s = stream_text_take(st, false, &n);
        memcpy(out + at, s, n);
        at += n;
        *n_takes_nonempty += n > 0;
    }
    const char *s = stream_text_take(st, true, &n);
    memcpy(out + at, s, n);
    return out;
}

TEST(stream_text_no_stop_passes_through) {
    struct stream_text st;
    stream_text_init(&st, NULL, 0);
    const char *pieces[] = {"And", " God", " said"};
    size_t takes;
    char *out = feed(&st, pieces, 3, &takes);
    CHECK_EQ_STR(out, "And God said");
    CHECK_EQ_STR(st.text, "And God said");
    CHECK_EQ_INT(takes, 3);           /* nothing held back */
    CHECK(!st.stopped && st.stopping_word == NULL);
    free(out);
    stream_text_free(&st);
}

TEST(stream_text_stop_across_tokens_is_cut) {
    const char *stop[] = {"\n\n", "Amen"};
    struct stream_text st;
    stream_text_init(&st, stop, 2);
    const char *pieces[] = {"unto him", ". A", "m", "en", " more"};
    size_t takes;
    char *out = feed(&st, pieces, 5, &takes);
    CHECK(st.stopped);
    CHECK(st.stopping_word == stop[1]);
    CHECK_EQ_STR(st.text, "unto him. ");
    CHECK_EQ_STR(out, "unto him. ");   /* "A", "Am" were held back, never sent */
    CHECK_EQ_INT(st.len, 10);
    free(out);
    stream_text_free(&st);
}

TEST(stream_text_prefix_released_when_it_diverges) {
    const char *stop[] = {"END"};
    struct stream_text st;
    stream_text_init(&st, stop, 1);
    size_t n;
    CHECK_EQ_INT(stream_text_append(&st, "the E", 5), 0);
    const char *s = stream_text_take(&st, false, &n);
    CHECK_EQ_INT(n, 4);
    CHECK(memcmp(s, "the ", 4) == 0);
    CHECK_EQ_INT(stream_text_append(&st, "N", 1), 0);
    stream_text_take(&st, false, &n);
    CHECK_EQ_INT(n, 0);               /* "EN" may still become END */
    CHECK_EQ_INT(stream_text_append(&st, "D", 1) , 0);
    CHECK(st.stopped);
    CHECK_EQ_STR(st.text, "the ");
    stream_text_take(&st, true, &n);
    CHECK_EQ_INT(n, 0);
    stream_text_free(&st);

    stream_text_init(&st, stop, 1);
    CHECK_EQ_INT(stream_text_append(&st, "EN", 2), 0);
    stream_text_take(&st, false, &n);
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(stream_text_append(&st, "ough", 4), 0);
    s = stream_text_take(&st, false, &n);
    CHECK_EQ_INT(n, 6);
    CHECK(memcmp(s, "ENough", 6) == 0);
    CHECK(!st.stopped);
    stream_text_free(&st);
}

TEST(stream_text_earliest_stop_wins) {
    const char *stop[] = {"cd", "bcdx", "b"};
    struct stream_text st;
    stream_text_init(&st, stop, 3);
    CHECK_EQ_INT(stream_text_append(&st, "abcd", 4), 0);
    CHECK(st.stopped);
    CHECK(st.stopping_word == stop[2]);   /* "b" at 1 comes before "cd" at 2 */
    CHECK_EQ_STR(st.text, "a");
    CHECK_EQ_INT(stream_text_append(&st, "more", 4), 0);   /* no-op after a stop */
    CHECK_EQ_STR(st.text, "a");
    stream_text_free(&st);
}

TEST(stream_text_holds_back_cut_characters) {
    struct stream_text st;
    stream_text_init(&st, NULL, 0);
    size_t n;
    CHECK_EQ_INT(stream_text_append(&st, "hi \xF0\x9F", 5), 0);   /* half an emoji */
    const char *s = stream_text_take(&st, false, &n);
    CHECK_EQ_INT(n, 3);
    CHECK(memcmp(s, "hi ", 3) == 0);
    CHECK_EQ_INT(stream_text_append(&st, "\x98\x80!", 3), 0);
    s = stream_text_take(&st, false, &n);
    CHECK_EQ_INT(n, 5);
    CHECK(memcmp(s, "\xF0\x9F\x98\x80!", 5) == 0);
    /* final releases even a cut character (the renderer replaces it) */
    CHECK_EQ_INT(stream_text_append(&st, "\xE2", 1), 0);
    stream_text_take(&st, false, &n);
    CHECK_EQ_INT(n, 0);
    stream_text_take(&st, true, &n);
    CHECK_EQ_INT(n, 1);
    stream_text_free(&st);
}

/* Random pieces over a small alphabet with stop strings: the taken pieces always join to the
 * final text, the final text never contains a stop string, and it is a prefix of the input. */
TEST(stream_text_random_pieces_add_up) {
    const char *stop[] = {"aba", "bb", "cab"};
    uint64_t state = 12345;
    for (int iter = 0; iter < 2000; iter++) {
        struct stream_text st;
        stream_text_init(&st, stop, iter % 4 == 0 ? 0 : 3);
        char input[64], taken[64];
        size_t in_len = 0, taken_len = 0, n;
        while (in_len < 40 && !st.stopped) {
            state = state * 6364136223846793005u + 1442695040888963407u;
            size_t len = 1 + (state >> 60) % 3;
            char piece[4];
            for (size_t i = 0; i < len; i++) piece[i] = "abc"[(state >> (20 + 4 * i)) % 3];
            memcpy(input + in_len, piece, len);
            in_len += len;
            CHECK_EQ_INT(stream_text_append(&st, piece, len), 0);
            const char *s = stream_text_take(&st, false, &n);
            memcpy(taken + taken_len, s, n);
            taken_len += n;
        }
        const char *s = stream_text_take(&st, true, &n);
        memcpy(taken + taken_len, s, n);
        taken_len += n;
        CHECK_EQ_INT(taken_len, st.len);
        CHECK(memcmp(taken, st.text, st.len) == 0);
        CHECK(memcmp(input, st.text, st.len) == 0);
        for (size_t k = 0; k < st.n_stop; k++) CHECK(strstr(st.text, stop[k]) == NULL);
        stream_text_free(&st);
    }
}
