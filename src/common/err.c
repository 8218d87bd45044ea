#include "common/err.h"

const char *err_str(int code) {
    static const char *const names[ERR_COUNT_] = {
        [ERR_OK] = "ok",
        [ERR_INVAL] = "invalid argument",
        [ERR_NOMEM] = "out of memory",
        [ERR_IO] = "i/o error",
        [ERR_FORMAT] = "malformed input",
        [ERR_UNSUPPORTED] = "not supported",
        [ERR_NOTFOUND] = "not found",
        [ERR_TOOBIG] = "too large",
        [ERR_BUSY] = "busy",
        [ERR_CANCELLED] = "cancelled",
        [ERR_TIMEOUT] = "timed out",
        [ERR_STATE] = "invalid state",
        [ERR_AUTH] = "unauthorized",
        [ERR_NUMERIC] = "the model produced invalid numbers (NaN or infinity)",
    };
    if (code < 0) code = -code;
    return code < ERR_COUNT_ && names[code] ? names[code] : "unknown error";
}
