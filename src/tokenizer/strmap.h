/* strmap.h: a read-only-after-build hash map from byte strings to int32 ids, for vocabularies.
 *
 * Keys are not copied: the map stores (pointer, length) and the caller keeps the bytes alive as
 * long as the map (the tokenizer keeps them in its own text blob). Open addressing, power-of-two
 * capacity, grown to stay at most half full; lookups take no lock and write nothing, so any
 * number of threads may look up at once (once building is over).
 *
 *   struct strmap m;
 *   if (strmap_init(&m, n_keys) < 0) ...;
 *   strmap_put(&m, "hello", 5, 42);           // replaces the id of an existing key
 *   int32_t id = strmap_get(&m, "hello", 5);  // -1 when absent
 *   strmap_free(&m);
 */
#ifndef UVLM_TOKENIZER_STRMAP_H
#define UVLM_TOKENIZER_STRMAP_H

#include <stddef.h>
#include <stdint.h>

struct strmap_slot {
    const char *key;  /* NULL: empty */
    uint32_t len;
    uint32_t hash;
    int32_t id;
};

struct strmap {
    struct strmap_slot *slots;
    size_t cap;   /* power of two */
    size_t n;
};

/* Room for about expect_keys keys before growing; 0 or -ERR_NOMEM. */
int strmap_init(struct strmap *m, size_t expect_keys);
void strmap_free(struct strmap *m);
/* Insert or replace; 0 or -ERR_NOMEM (or -ERR_TOOBIG for a key over 4 GiB). */
int strmap_put(struct strmap *m, const char *key, size_t len, int32_t id);
/* Insert only when absent; returns the id now stored for key (its old one if present), or a
 * negative -ERR_* (ids are >= 0). */
int32_t strmap_put_new(struct strmap *m, const char *key, size_t len, int32_t id);
int32_t strmap_get(const struct strmap *m, const char *key, size_t len);

#endif
