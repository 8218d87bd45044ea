/* strmap.c: string -> id hash map (see strmap.h). */
#include "tokenizer/strmap.h"
#include "common/err.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static uint32_t hash_bytes(const char *s, size_t len) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 16777619u;
    }
    return h ^ (h >> 15);
}

int strmap_init(struct strmap *m, size_t expect_keys) {
    size_t cap = 16;
    while (cap < 2 * expect_keys + 2) cap *= 2;
    m->slots = calloc(cap, sizeof *m->slots);
    if (!m->slots) return -ERR_NOMEM;
    m->cap = cap;
    m->n = 0;
    return 0;
}

void strmap_free(struct strmap *m) {
    free(m->slots);
    m->slots = NULL;
    m->cap = m->n = 0;
}

/* The slot holding key, or the empty slot where it would go. */
static struct strmap_slot *find(const struct strmap *m, const char *key, size_t len, uint32_t h) {
    size_t mask = m->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        struct strmap_slot *s = &m->slots[i];
        if (!s->key) return s;
        if (s->hash == h && s->len == len && !memcmp(s->key, key, len)) return s;
    }
}

/* Double the capacity, re-placing every key. */
static int grow(struct strmap *m) {
    size_t cap = m->cap * 2;
    struct strmap_slot *slots = calloc(cap, sizeof *slots);
    if (!slots) return -ERR_NOMEM;
    struct strmap old = *m;
    m->slots = slots;
    m->cap = cap;
    for (size_t i = 0; i < old.cap; i++)
        if (old.slots[i].key) *find(m, old.slots[i].key, old.slots[i].len, old.slots[i].hash) = old.slots[i];
    free(old.slots);
    return 0;
}

/* The slot of key, added if absent (*fresh); NULL with *err set on failure. */
static struct strmap_slot *insert(struct strmap *m, const char *key, size_t len, bool *fresh, int *err) {
    if (len > UINT32_MAX) { *err = -ERR_TOOBIG; return NULL; }
    if (2 * (m->n + 1) > m->cap && (*err = grow(m)) < 0) return NULL;
    uint32_t h = hash_bytes(key, len);
    struct strmap_slot *s = find(m, key, len, h);
    *fresh = !s->key;
    if (*fresh) {
        /* An empty key still needs a non-NULL pointer to mark the slot used. */
        s->key = len ? key : "";
        s->len = (uint32_t)len;
        s->hash = h;
        m->n++;
    }
    return s;
}

int strmap_put(struct strmap *m, const char *key, size_t len, int32_t id) {
    bool fresh;
    int err = 0;
    struct strmap_slot *s = insert(m, key, len, &fresh, &err);
    if (!s) return err;
    s->id = id;
    return 0;
}

int32_t strmap_put_new(struct strmap *m, const char *key, size_t len, int32_t id) {
    bool fresh;
    int err = 0;
    struct strmap_slot *s = insert(m, key, len, &fresh, &err);
    if (!s) return err;
    if (fresh) s->id = id;
    return s->id;
}

int32_t strmap_get(const struct strmap *m, const char *key, size_t len) {
    if (!m->cap) return -1;
    const struct strmap_slot *s = find(m, key, len, hash_bytes(key, len));
    return s->key ? s->id : -1;
}
