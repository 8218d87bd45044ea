/* err.h: uvlm's error codes. Functions that can fail return 0 (or a count) on success and a
 * negative ERR_* code on failure; callers propagate the code, and the API layer turns it into an
 * HTTP status in one place (api/errors.c). Programmer errors are not codes: they are asserts,
 * always on (see ASSERT below). Only src/main.c exits the process.
 */
#ifndef UVLM_ERR_H
#define UVLM_ERR_H

#include <stdio.h>
#include <stdlib.h>

enum err {
    ERR_OK = 0,
    ERR_INVAL = 1,        /* bad argument or input value */
    ERR_NOMEM = 2,        /* allocation failed, or a fixed pool is full */
    ERR_IO = 3,           /* read/write/open failed (errno-level) */
    ERR_FORMAT = 4,       /* a file or message is malformed (bad GGUF, bad HTTP, bad JSON) */
    ERR_UNSUPPORTED = 5,  /* valid but not supported (architecture, weight type, partial removal) */
    ERR_NOTFOUND = 6,     /* a key, tensor, token, path or sequence does not exist */
    ERR_TOOBIG = 7,       /* over a configured limit (body size, context, queue) */
    ERR_BUSY = 8,         /* try again later (queue full, memory full for now) */
    ERR_CANCELLED = 9,    /* the work's owner went away */
    ERR_TIMEOUT = 10,     /* a deadline passed */
    ERR_STATE = 11,       /* not valid in the current state (not ready, draining) */
    ERR_AUTH = 12,        /* missing or wrong credentials */
    ERR_NUMERIC = 13,     /* a computation produced NaN or infinity (a corrupt model) */
    ERR_COUNT_
};

/* Short constant description of a code (positive or negative); never NULL. */
const char *err_str(int code);

/* Always-on assert for programmer errors (compiled in release builds too). */
#define ASSERT(cond) do { if (!(cond)) {                                        \
        fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__, __LINE__, #cond); \
        abort(); } } while (0)

#endif
