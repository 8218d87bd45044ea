/* errors.h: the one place where uvlm's error codes (common/err.h) become HTTP statuses, and
 * where error bodies get their llama.cpp/OpenAI shape:
 *     {"error":{"code":404,"message":"...","type":"not_found_error"}}
 *
 *   int rc = do_work(...);
 *   if (rc < 0) return http_respond_error(req, api_err_status(rc), err_str(rc));
 */
#ifndef UVLM_API_ERRORS_H
#define UVLM_API_ERRORS_H

#include <stddef.h>

/* HTTP status for an ERR_* code (sign ignored): ERR_INVAL/FORMAT -> 400, AUTH -> 401,
 * NOTFOUND -> 404, TOOBIG -> 413, BUSY/STATE -> 503, TIMEOUT -> 408, UNSUPPORTED -> 501,
 * CANCELLED -> 499, anything else -> 500. */
int api_err_status(int err);

/* The error "type" string of a status, e.g. 401 -> "authentication_error". */
const char *api_error_type(int status);

/* Reason phrase of a status ("Not Found"); "Unknown" for codes it does not know. */
const char *api_status_reason(int status);

/* Write the error JSON into out (always NUL-terminated, message escaped and cut to fit).
 * Returns the length written. */
size_t api_error_json(char *out, size_t cap, int status, const char *message);

/* Anthropic's error type of a status: 400 invalid_request_error, 401 authentication_error,
 * 403 permission_error, 404 not_found_error, 413 request_too_large, 429 rate_limit_error,
 * 503 overloaded_error, other 5xx api_error. */
const char *api_error_type_anthropic(int status);

/* api_error_json in Anthropic's shape (what /v1/messages answers, 401 included):
 *     {"type":"error","error":{"type":"authentication_error","message":"..."}} */
size_t api_error_json_anthropic(char *out, size_t cap, int status, const char *message);

#endif
