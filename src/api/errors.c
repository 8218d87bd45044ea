#include "api/errors.h"
#include "common/err.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

int api_err_status(int err) {
    switch (err < 0 ? -err : err) {
    case ERR_OK: return 200;
    case ERR_INVAL:
    case ERR_FORMAT: return 400;
    case ERR_AUTH: return 401;
    case ERR_NOTFOUND: return 404;
    case ERR_TIMEOUT: return 408;
    case ERR_TOOBIG: return 413;
    case ERR_CANCELLED: return 499; /* client closed request (nginx convention) */
    case ERR_UNSUPPORTED: return 501;
    case ERR_BUSY:
    case ERR_STATE: return 503;
    default: return 500;
    }
}

const char *api_error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 501: return "not_supported_error";
    case 503: return "unavailable_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

const char *api_status_reason(int status) {
    static const struct { int status; const char *reason; } reasons[] = {
        {100, "Continue"}, {200, "OK"}, {201, "Created"}, {204, "No Content"},
        {400, "Bad Request"}, {401, "Unauthorized"}, {403, "Forbidden"}, {404, "Not Found"},
        {405, "Method Not Allowed"}, {408, "Request Timeout"}, {413, "Content Too Large"},
        {417, "Expectation Failed"}, {431, "Request Header Fields Too Large"},
        {499, "Client Closed Request"}, {500, "Internal Server Error"}, {501, "Not Implemented"},
        {503, "Service Unavailable"},
    };
    for (size_t i = 0; i < sizeof reasons / sizeof *reasons; i++)
        if (reasons[i].status == status) return reasons[i].reason;
    return "Unknown";
}

size_t api_error_json(char *out, size_t cap, int status, const char *message) {
    ASSERT(cap > 0);
    json_t *doc = json_pack("{s:{s:i,s:s,s:s}}", "error", "code", status, "message", message ? message : "",
                            "type", api_error_type(status));
    size_t n = doc ? json_dumpb(doc, out, cap - 1, JSON_COMPACT) : 0;
    json_decref(doc);
    if (n == 0 || n > cap - 1) /* did not fit (or no memory): a fixed message that does */
        n = (size_t)snprintf(out, cap, "{\"error\":{\"code\":%d,\"message\":\"%s\",\"type\":\"%s\"}}", status,
                             api_status_reason(status), api_error_type(status));
    if (n > cap - 1) n = cap - 1;
    out[n] = '\0';
    return n;
}

const char *api_error_type_anthropic(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

size_t api_error_json_anthropic(char *out, size_t cap, int status, const char *message) {
    ASSERT(cap > 0);
    json_t *doc = json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", api_error_type_anthropic(status),
                            "message", message ? message : "");
    size_t n = doc ? json_dumpb(doc, out, cap - 1, JSON_COMPACT) : 0;
    json_decref(doc);
    if (n == 0 || n > cap - 1) /* did not fit (or no memory): a fixed message that does */
        n = (size_t)snprintf(out, cap, "{\"type\":\"error\",\"error\":{\"type\":\"%s\",\"message\":\"%s\"}}",
                             api_error_type_anthropic(status), api_status_reason(status));
    if (n > cap - 1) n = cap - 1;
    out[n] = '\0';
    return n;
}
