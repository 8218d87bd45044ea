/* gguf_fuzz.c: libFuzzer target for the GGUF reader (and the tokenizer loader behind it).
 * Arbitrary bytes go through gguf_parse; when it accepts them, every key/value, array element
 * and tensor byte it hands out is read (ASan flags any of them outside the input), and the
 * vocabulary, if any, is loaded and used. Build and run: make fuzz (scripts/fuzz.mk). */
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static volatile uint64_t sink; /* keeps the reads below from being optimised away */

static void touch(const void *p, uint64_t n) {
    const unsigned char *b = p;
    if (n) sink += b[0] + b[n - 1];
}

static void walk_value(const struct gguf_kv *kv) {
    switch (kv->type) {
    case GGUF_STRING: touch(kv->v.str.ptr, kv->v.str.len); break;
    case GGUF_ARRAY: {
        const struct gguf_array *a = &kv->v.arr;
        for (uint64_t i = 0; i < a->n && i < 4096; i++) {
            if (a->type == GGUF_STRING) touch(a->strs[i].ptr, a->strs[i].len);
            else if (a->type == GGUF_FLOAT32 || a->type == GGUF_FLOAT64) sink += gguf_arr_float(a, i) > 0;
            else if (a->type != GGUF_BOOL) sink += (uint64_t)gguf_arr_int(a, i);
        }
        break;
    }
    default: sink += kv->v.u64; break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* A private copy: the reader keeps pointers into the buffer, and ASan bounds it exactly. */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    struct gguf_file f;
    char why[256];
    if (gguf_parse(&f, buf, size, why, sizeof why) == 0) {
        for (uint64_t i = 0; i < f.n_kv; i++) {
            touch(f.kv[i].key.ptr, f.kv[i].key.len);
            walk_value(&f.kv[i]);
            char key[128];
            size_t kl = f.kv[i].key.len < sizeof key - 1 ? f.kv[i].key.len : sizeof key - 1;
            memcpy(key, f.kv[i].key.ptr, kl);
            key[kl] = 0;
            sink += (uint64_t)gguf_get_int(&f, key, 0) + gguf_get_bool(&f, key, false);
            sink += (gguf_get_float(&f, key, 0) > 0) + gguf_get_str(&f, key).len;
            sink += gguf_find_kv(&f, key) != NULL;
        }
        for (uint64_t i = 0; i < f.n_tensors; i++) {
            const struct gguf_tensor *t = &f.tensors[i];
            touch(t->name.ptr, t->name.len);
            touch(t->data, t->size);
        }
        struct tokenizer *tok;
        if (tokenizer_load(&tok, &f, why, sizeof why) == 0) {
            static const char text[] = " Hello world <s> 123 \xC3\xA9\xF0\x9F\xA6\x99 a  b\n\n";
            int32_t ids[256];
            size_t n;
            if (tokenizer_encode(tok, text, sizeof text - 1, true, true, ids, 256, &n) == 0) {
                char out[4096];
                tokenizer_decode(tok, ids, n, false, true, out, sizeof out);
            }
            tokenizer_free(tok);
        }
        gguf_close(&f);
    }
    free(buf);
    return 0;
}
