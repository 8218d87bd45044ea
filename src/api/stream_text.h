/* stream_text.h: one choice's generated text as it grows token by token: the stop strings, and
 * what may be sent to a streaming client now. Pure (no JSON, no scheduler).
 *
 * Two things must not reach a client early: the start of what may turn out to be a stop string
 * (the stop string itself is never part of the output, as in llama.cpp and OpenAI), and the
 * first bytes of a character whose other bytes come with the next token. stream_text keeps the
 * whole text, finds stop strings even when they span tokens, and hands out only the bytes that
 * are final.
 *
 *   struct stream_text st;
 *   stream_text_init(&st, p.stop, p.n_stop);
 *   // on_token (scheduler sink): piece = the token's bytes from the detokenizer
 *   bool stop = stream_text_append(&st, piece, piece_len) < 0 ? ... : st.stopped;
 *   size_t n;
 *   const char *fresh = stream_text_take(&st, false, &n);   // send n bytes (may be 0)
 *   ...
 *   return !st.stopped;                  // false tells the scheduler: stopped by a word
 *   // on_done: the rest, then the final chunk; st.text/st.len is the whole output
 *   fresh = stream_text_take(&st, true, &n);
 *   stream_text_free(&st);
 *
 * Ownership: the struct owns its buffer; the stop strings are borrowed (they live in the
 * request's completion_params) and stopping_word points at one of them.
 */
#ifndef UVLM_API_STREAM_TEXT_H
#define UVLM_API_STREAM_TEXT_H

#include <stdbool.h>
#include <stddef.h>

struct stream_text {
    char *text;               /* the output so far (cut before a matched stop string), NUL-ended */
    size_t len;
    size_t cap;
    size_t sent;              /* bytes already handed out by stream_text_take */
    const char *const *stop;  /* borrowed */
    size_t n_stop;
    size_t max_stop_len;
    bool stopped;             /* a stop string matched: append no more */
    const char *stopping_word;/* which one (one of stop[]), or NULL */
};

void stream_text_init(struct stream_text *st, const char *const *stop, size_t n_stop);
void stream_text_free(struct stream_text *st);

/* Add a token's bytes. If a stop string now occurs (the earliest one in the text wins), the text
 * is cut where it begins and stopped/stopping_word are set. 0, or -ERR_NOMEM (the text is
 * unchanged). After a stop, appending is a no-op. */
int stream_text_append(struct stream_text *st, const char *piece, size_t len);

/* The bytes that have become final since the last take: *n bytes at the returned pointer (valid
 * until the next append). Held back unless final: a tail that is a prefix of some stop string,
 * and a character not yet complete. final (the choice ended, or stopped): everything. */
const char *stream_text_take(struct stream_text *st, bool final, size_t *n);

#endif
