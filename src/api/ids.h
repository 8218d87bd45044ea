/* ids.h: the ids of responses ("chatcmpl-...", "cmpl-...", "resp_...", "msg_..."): a prefix and
 * random letters and digits, as the APIs uvlm speaks give them, so that ids never repeat across
 * restarts or replicas and say nothing about how many requests a server has answered.
 *
 *   char id[48];
 *   api_random_id(id, sizeof id, "resp_", 24);   // "resp_3kQ9..." (24 random characters)
 */
#ifndef UVLM_API_IDS_H
#define UVLM_API_IDS_H

#include <stddef.h>

/* prefix then n_random characters of [0-9A-Za-z] from the kernel's random source (a time-seeded
 * mix when that fails), cut to fit cap (always NUL-terminated). */
void api_random_id(char *out, size_t cap, const char *prefix, size_t n_random);

#endif
