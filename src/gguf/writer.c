/* writer.c: see writer.h; the byte layout is the one documented at the top of gguf.c. */
#include "gguf/writer.h"
#include "common/err.h"

#include <stdlib.h>
#include <string.h>

#define WRITER_ALIGN 32

void gguf_writer_init(struct gguf_writer *w) { *w = (struct gguf_writer){0}; }

static void put(struct gguf_writer *w, const void *p, size_t n) {
    if (w->err) return;
    if (w->kv_len + n > w->kv_cap) {
        size_t cap = w->kv_cap ? w->kv_cap : 4096;
        while (cap < w->kv_len + n) cap *= 2;
        uint8_t *b = realloc(w->kv, cap);
        if (!b) {
            w->err = -ERR_NOMEM;
            return;
        }
        w->kv = b;
        w->kv_cap = cap;
    }
    memcpy(w->kv + w->kv_len, p, n);
    w->kv_len += n;
}

static void put_u32(struct gguf_writer *w, uint32_t v) { put(w, &v, 4); }
static void put_u64(struct gguf_writer *w, uint64_t v) { put(w, &v, 8); }
static void put_str(struct gguf_writer *w, const char *s, uint64_t n) {
    put_u64(w, n);
    put(w, s, (size_t)n);
}

static void key(struct gguf_writer *w, const char *k, enum gguf_vtype t) {
    put_str(w, k, strlen(k));
    put_u32(w, (uint32_t)t);
    w->n_kv++;
}

void gguf_writer_set_str(struct gguf_writer *w, const char *k, const char *v) {
    key(w, k, GGUF_STRING);
    put_str(w, v, strlen(v));
}

void gguf_writer_set_u32(struct gguf_writer *w, const char *k, uint32_t v) {
    key(w, k, GGUF_UINT32);
    put_u32(w, v);
}

void gguf_writer_set_f32(struct gguf_writer *w, const char *k, float v) {
    key(w, k, GGUF_FLOAT32);
    put(w, &v, 4);
}

void gguf_writer_set_bool(struct gguf_writer *w, const char *k, bool v) {
    key(w, k, GGUF_BOOL);
    uint8_t b = v;
    put(w, &b, 1);
}

void gguf_writer_set_arr_i32(struct gguf_writer *w, const char *k, const int32_t *v, uint32_t n) {
    key(w, k, GGUF_ARRAY);
    put_u32(w, (uint32_t)GGUF_INT32);
    put_u64(w, n);
    put(w, v, (size_t)n * sizeof *v);
}

void gguf_writer_copy_kv(struct gguf_writer *w, const struct gguf_kv *kv) {
    if (!kv) {
        if (!w->err) w->err = -ERR_INVAL;
        return;
    }
    put_str(w, kv->key.ptr, kv->key.len);
    put_u32(w, (uint32_t)kv->type);
    w->n_kv++;
    if (kv->type == GGUF_STRING) {
        put_str(w, kv->v.str.ptr, kv->v.str.len);
    } else if (kv->type == GGUF_ARRAY) {
        const struct gguf_array *a = &kv->v.arr;
        put_u32(w, (uint32_t)a->type);
        put_u64(w, a->n);
        if (a->type == GGUF_STRING)
            for (uint64_t i = 0; i < a->n; i++) put_str(w, a->strs[i].ptr, a->strs[i].len);
        else
            put(w, a->data, (size_t)(a->n * gguf_vtype_size(a->type)));
    } else {
        /* The reader widened scalars into the union: write back the file's width (little-endian). */
        uint64_t bits = kv->v.u64;
        if (kv->type == GGUF_FLOAT32) {
            float f = (float)kv->v.f64;
            put(w, &f, 4);
        } else if (kv->type == GGUF_FLOAT64) {
            put(w, &kv->v.f64, 8);
        } else {
            put(w, &bits, gguf_vtype_size(kv->type));
        }
    }
}

void gguf_writer_add_tensor(struct gguf_writer *w, const char *name, enum ggml_type type, uint64_t ne0, uint64_t ne1) {
    if (w->err) return;
    size_t row = ggml_row_size(type, ne0);
    if (!row || ne1 == 0 || strlen(name) >= sizeof w->tensors->name) {
        w->err = -ERR_INVAL;
        return;
    }
    if (w->n_tensors == w->tensors_cap) {
        uint64_t cap = w->tensors_cap ? w->tensors_cap * 2 : 64;
        struct gguf_writer_tensor *t = realloc(w->tensors, (size_t)cap * sizeof *t);
        if (!t) {
            w->err = -ERR_NOMEM;
            return;
        }
        w->tensors = t;
        w->tensors_cap = cap;
    }
    struct gguf_writer_tensor *t = &w->tensors[w->n_tensors];
    uint64_t off = 0;
    if (w->n_tensors) {
        const struct gguf_writer_tensor *p = &w->tensors[w->n_tensors - 1];
        off = (p->offset + p->size + WRITER_ALIGN - 1) / WRITER_ALIGN * WRITER_ALIGN;
    }
    *t = (struct gguf_writer_tensor){.type = type, .ne0 = ne0, .ne1 = ne1, .offset = off, .size = row * ne1};
    strcpy(t->name, name);
    w->n_tensors++;
}

static void file_write(struct gguf_writer *w, const void *p, size_t n) {
    if (!w->err && n && fwrite(p, 1, n, w->f) != n) w->err = -ERR_IO;
}

static void file_pad(struct gguf_writer *w, uint64_t pos) {
    static const uint8_t zeros[WRITER_ALIGN];
    file_write(w, zeros, (size_t)((WRITER_ALIGN - pos % WRITER_ALIGN) % WRITER_ALIGN));
}

int gguf_writer_begin(struct gguf_writer *w, const char *path) {
    if (w->err) return w->err;
    /* Tensor infos go after the key/values in the same buffer. */
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        const struct gguf_writer_tensor *t = &w->tensors[i];
        put_str(w, t->name, strlen(t->name));
        uint32_t n_dims = t->ne1 > 1 ? 2 : 1;
        put_u32(w, n_dims);
        put_u64(w, t->ne0);
        if (n_dims == 2) put_u64(w, t->ne1);
        put_u32(w, (uint32_t)t->type);
        put_u64(w, t->offset);
    }
    if (w->err) return w->err;
    w->f = fopen(path, "wb");
    if (!w->f) return w->err = -ERR_IO;
    uint32_t version = 3;
    file_write(w, "GGUF", 4);
    file_write(w, &version, 4);
    file_write(w, &w->n_tensors, 8);
    file_write(w, &w->n_kv, 8);
    file_write(w, w->kv, w->kv_len);
    file_pad(w, 24 + w->kv_len);
    w->cur = 0;
    w->cur_written = 0;
    return w->err;
}

void gguf_writer_write(struct gguf_writer *w, const void *data, size_t n) {
    const uint8_t *p = data;
    while (!w->err && n > 0) {
        if (w->cur >= w->n_tensors) {
            w->err = -ERR_INVAL;  /* more data than declared */
            return;
        }
        const struct gguf_writer_tensor *t = &w->tensors[w->cur];
        size_t take = t->size - w->cur_written < n ? (size_t)(t->size - w->cur_written) : n;
        file_write(w, p, take);
        p += take;
        n -= take;
        w->cur_written += take;
        if (w->cur_written == t->size) {
            if (w->cur + 1 < w->n_tensors) file_pad(w, t->offset + t->size);
            w->cur++;
            w->cur_written = 0;
        }
    }
}

int gguf_writer_finish(struct gguf_writer *w) {
    if (!w->err && w->cur != w->n_tensors) w->err = -ERR_INVAL;  /* data missing */
    if (w->f && fclose(w->f) != 0 && !w->err) w->err = -ERR_IO;
    int rc = w->err;
    free(w->kv);
    free(w->tensors);
    *w = (struct gguf_writer){0};
    return rc;
}
