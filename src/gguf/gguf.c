/* gguf.c: GGUF v2/v3 reader. Layout of a file (little-endian):
 *   "GGUF" u32 version  u64 n_tensors  u64 n_kv
 *   n_kv    x { str key, u32 vtype, value }            str = u64 len + bytes
 *   n_tensors x { str name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset }
 *   padding to `alignment`, then the data section; each tensor at data_offset + offset.
 * Every read goes through struct cursor, which refuses to move past the end of the buffer, and
 * every count is bounded by the bytes left before anything is allocated for it.
 */
#include "gguf/gguf.h"

#include "common/err.h"
#include "common/hugemem.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

struct cursor {
    const uint8_t *p;
    size_t pos, size;
    char *why;
    size_t why_len;
};

static int fail(struct cursor *c, int code, const char *fmt, ...) {
    if (c->why && c->why_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->why, c->why_len, fmt, ap);
        va_end(ap);
    }
    return -code;
}

static size_t left(const struct cursor *c) { return c->size - c->pos; }

static int read_bytes(struct cursor *c, void *dst, size_t n, const char *what) {
    if (left(c) < n)
        return fail(c, ERR_FORMAT, "truncated file: %s at offset %zu needs %zu bytes, %zu left",
                    what, c->pos, n, left(c));
    memcpy(dst, c->p + c->pos, n);
    c->pos += n;
    return 0;
}

static int read_u32(struct cursor *c, uint32_t *v, const char *what) { return read_bytes(c, v, 4, what); }
static int read_u64(struct cursor *c, uint64_t *v, const char *what) { return read_bytes(c, v, 8, what); }

static int read_str(struct cursor *c, struct gguf_str *s, const char *what) {
    uint64_t len = 0;
    int rc = read_u64(c, &len, what);
    if (rc < 0) return rc;
    if (len > left(c))
        return fail(c, ERR_FORMAT, "%s: string length %llu at offset %zu runs past the end of the file",
                    what, (unsigned long long)len, c->pos - 8);
    s->ptr = (const char *)c->p + c->pos;
    s->len = len;
    c->pos += len;
    return 0;
}

size_t gguf_vtype_size(uint32_t t) {
    switch (t) {
    case GGUF_UINT8: case GGUF_INT8: case GGUF_BOOL: return 1;
    case GGUF_UINT16: case GGUF_INT16: return 2;
    case GGUF_UINT32: case GGUF_INT32: case GGUF_FLOAT32: return 4;
    case GGUF_UINT64: case GGUF_INT64: case GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

static bool is_signed(uint32_t t) {
    return t == GGUF_INT8 || t == GGUF_INT16 || t == GGUF_INT32 || t == GGUF_INT64;
}

/* Decode a scalar of type t at p into the kv's union. */
static void decode_scalar(uint32_t t, const uint8_t *p, struct gguf_kv *kv) {
    switch (t) {
    case GGUF_UINT8: case GGUF_BOOL: kv->v.u64 = p[0]; break;
    case GGUF_INT8: kv->v.i64 = (int8_t)p[0]; break;
    case GGUF_UINT16: { uint16_t x; memcpy(&x, p, 2); kv->v.u64 = x; break; }
    case GGUF_INT16: { int16_t x; memcpy(&x, p, 2); kv->v.i64 = x; break; }
    case GGUF_UINT32: { uint32_t x; memcpy(&x, p, 4); kv->v.u64 = x; break; }
    case GGUF_INT32: { int32_t x; memcpy(&x, p, 4); kv->v.i64 = x; break; }
    case GGUF_FLOAT32: { float x; memcpy(&x, p, 4); kv->v.f64 = x; break; }
    case GGUF_UINT64: memcpy(&kv->v.u64, p, 8); break;
    case GGUF_INT64: memcpy(&kv->v.i64, p, 8); break;
    case GGUF_FLOAT64: memcpy(&kv->v.f64, p, 8); break;
    default: ASSERT(0);
    }
}

/* First pass over an array value: check it fits and count its strings (for the pool). */
static int skip_array(struct cursor *c, const struct gguf_str *key, struct gguf_array *arr, uint64_t *n_strings) {
    uint32_t et;
    int rc;
    if ((rc = read_u32(c, &et, "array element type")) < 0) return rc;
    if ((rc = read_u64(c, &arr->n, "array length")) < 0) return rc;
    arr->type = et;
    if (et == GGUF_STRING) {
        if (arr->n > left(c) / 8)
            return fail(c, ERR_FORMAT, "key '%.*s': string array of %llu elements cannot fit in the file",
                        (int)key->len, key->ptr, (unsigned long long)arr->n);
        for (uint64_t i = 0; i < arr->n; i++) {
            struct gguf_str s;
            if ((rc = read_str(c, &s, "array string")) < 0) return rc;
        }
        *n_strings += arr->n;
        return 0;
    }
    size_t es = gguf_vtype_size(et);
    if (!es)
        return fail(c, ERR_FORMAT, "key '%.*s': unsupported array element type %u",
                    (int)key->len, key->ptr, et);
    if (arr->n > left(c) / es)
        return fail(c, ERR_FORMAT, "key '%.*s': array of %llu elements runs past the end of the file",
                    (int)key->len, key->ptr, (unsigned long long)arr->n);
    arr->data = c->p + c->pos;
    c->pos += (size_t)arr->n * es;
    return 0;
}

static int read_kv(struct cursor *c, struct gguf_kv *kv, uint64_t *n_strings) {
    uint32_t t;
    int rc;
    if ((rc = read_str(c, &kv->key, "key")) < 0) return rc;
    if ((rc = read_u32(c, &t, "value type")) < 0) return rc;
    kv->type = t;
    if (t == GGUF_STRING) return read_str(c, &kv->v.str, "string value");
    if (t == GGUF_ARRAY) return skip_array(c, &kv->key, &kv->v.arr, n_strings);
    size_t sz = gguf_vtype_size(t);
    if (!sz)
        return fail(c, ERR_FORMAT, "key '%.*s': unknown value type %u", (int)kv->key.len, kv->key.ptr, t);
    if (left(c) < sz)
        return fail(c, ERR_FORMAT, "truncated file: value of key '%.*s'", (int)kv->key.len, kv->key.ptr);
    decode_scalar(t, c->p + c->pos, kv);
    c->pos += sz;
    return 0;
}

/* Second pass for string arrays: index their strings into the pool. The bytes were validated by
 * skip_array, so this cannot fail. */
static void index_strings(struct gguf_kv *kv, struct gguf_str **pool) {
    struct gguf_array *a = &kv->v.arr;
    const uint8_t *p = (const uint8_t *)kv->key.ptr + kv->key.len + 4 + 4 + 8; /* type, elem type, n */
    a->strs = *pool;
    for (uint64_t i = 0; i < a->n; i++) {
        uint64_t len;
        memcpy(&len, p, 8);
        (*pool)[i] = (struct gguf_str){(const char *)p + 8, len};
        p += 8 + len;
    }
    *pool += a->n;
}

static bool str_eq(struct gguf_str a, struct gguf_str b) {
    return a.len == b.len && memcmp(a.ptr, b.ptr, a.len) == 0;
}

static int cmp_str(const void *a, const void *b) {
    const struct gguf_str *x = a, *y = b;
    int c = memcmp(x->ptr, y->ptr, x->len < y->len ? x->len : y->len);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* Refuse a name that occurs twice among n names found `stride` bytes apart from `first`.
 * Sorting a copy keeps this O(n log n): a crafted file may hold a million entries. */
static int check_unique(struct cursor *c, const char *what, const struct gguf_str *first, size_t stride, uint64_t n) {
    if (n < 2) return 0;
    struct gguf_str *names = malloc(n * sizeof *names); /* n is bounded by the file size */
    if (!names) return -ERR_NOMEM;
    for (uint64_t i = 0; i < n; i++)
        names[i] = *(const struct gguf_str *)((const char *)first + i * stride);
    qsort(names, n, sizeof *names, cmp_str);
    int rc = 0;
    for (uint64_t i = 1; i < n && rc == 0; i++)
        if (str_eq(names[i - 1], names[i]))
            rc = fail(c, ERR_FORMAT, "duplicate %s '%.*s'", what, (int)names[i].len, names[i].ptr);
    free(names);
    return rc;
}

static int read_tensor(struct cursor *c, struct gguf_tensor *t) {
    int rc;
    uint32_t type;
    if ((rc = read_str(c, &t->name, "tensor name")) < 0) return rc;
    if ((rc = read_u32(c, &t->n_dims, "tensor n_dims")) < 0) return rc;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return fail(c, ERR_FORMAT, "tensor '%.*s': %u dimensions (1 to %d allowed)",
                    (int)t->name.len, t->name.ptr, t->n_dims, GGUF_MAX_DIMS);
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++)
        if ((rc = read_u64(c, &t->ne[d], "tensor dimension")) < 0) return rc;
    if ((rc = read_u32(c, &type, "tensor type")) < 0) return rc;
    if ((rc = read_u64(c, &t->offset, "tensor offset")) < 0) return rc;
    t->type = type;
    const struct ggml_type_info *ti = ggml_type_info(type);
    if (!ti->name)
        return fail(c, ERR_UNSUPPORTED, "tensor '%.*s': unknown tensor type %u",
                    (int)t->name.len, t->name.ptr, type);
    /* Element count and byte size, refusing overflow: every dimension is bounded by the file. */
    uint64_t n_rows = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        if (t->ne[d] == 0 || t->ne[d] > (1ull << 40))
            return fail(c, ERR_FORMAT, "tensor '%.*s': dimension %d is %llu",
                        (int)t->name.len, t->name.ptr, d, (unsigned long long)t->ne[d]);
        if (d > 0) {
            if (n_rows > UINT64_MAX / t->ne[d])
                return fail(c, ERR_FORMAT, "tensor '%.*s': element count overflows", (int)t->name.len, t->name.ptr);
            n_rows *= t->ne[d];
        }
    }
    size_t row = ggml_row_size(type, t->ne[0]);
    if (!row)
        return fail(c, ERR_FORMAT, "tensor '%.*s': row of %llu elements is not a whole number of %s blocks",
                    (int)t->name.len, t->name.ptr, (unsigned long long)t->ne[0], ti->name);
    if (n_rows > c->size / row)
        return fail(c, ERR_FORMAT, "tensor '%.*s': %llu rows of %zu bytes cannot fit in the file",
                    (int)t->name.len, t->name.ptr, (unsigned long long)n_rows, row);
    t->size = (size_t)n_rows * row;
    return 0;
}

int gguf_parse(struct gguf_file *f, const void *buf, size_t size, char *why, size_t why_len) {
    struct cursor c = {.p = buf, .size = size, .why = why, .why_len = why_len};
    uint32_t magic;
    uint64_t n_strings = 0;
    int rc;

    *f = (struct gguf_file){.base = buf, .size = size, .alignment = GGUF_DEFAULT_ALIGNMENT};
    if (why && why_len) why[0] = '\0';
    if ((rc = read_u32(&c, &magic, "magic")) < 0) return rc;
    if (memcmp(&magic, "GGUF", 4) != 0) return fail(&c, ERR_FORMAT, "bad magic: not a GGUF file");
    if ((rc = read_u32(&c, &f->version, "version")) < 0) return rc;
    if (f->version != 2 && f->version != 3)
        return fail(&c, ERR_UNSUPPORTED, "unsupported GGUF version %u (2 and 3 are supported)", f->version);
    if ((rc = read_u64(&c, &f->n_tensors, "tensor count")) < 0) return rc;
    if ((rc = read_u64(&c, &f->n_kv, "key/value count")) < 0) return rc;
    /* A key/value takes at least 13 bytes (key length, type, 1-byte value), a tensor info 32. */
    if (f->n_kv > left(&c) / 13)
        return fail(&c, ERR_FORMAT, "key/value count %llu cannot fit in the file", (unsigned long long)f->n_kv);
    if (f->n_tensors > left(&c) / 32)
        return fail(&c, ERR_FORMAT, "tensor count %llu cannot fit in the file", (unsigned long long)f->n_tensors);

    f->kv = calloc(f->n_kv ? f->n_kv : 1, sizeof *f->kv);
    f->tensors = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *f->tensors);
    if (!f->kv || !f->tensors) { rc = -ERR_NOMEM; goto err; }

    for (uint64_t i = 0; i < f->n_kv; i++) {
        if ((rc = read_kv(&c, &f->kv[i], &n_strings)) < 0) goto err;
    }
    if ((rc = check_unique(&c, "key", &f->kv[0].key, sizeof *f->kv, f->n_kv)) < 0) goto err;
    /* n_strings <= file size / 8 (checked per array), so this allocation is bounded by the file. */
    f->str_pool = calloc(n_strings ? n_strings : 1, sizeof *f->str_pool);
    if (!f->str_pool) { rc = -ERR_NOMEM; goto err; }
    struct gguf_str *pool = f->str_pool;
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (f->kv[i].type == GGUF_ARRAY && f->kv[i].v.arr.type == GGUF_STRING)
            index_strings(&f->kv[i], &pool);

    const struct gguf_kv *al = gguf_find_kv(f, "general.alignment");
    if (al) {
        if (al->type != GGUF_UINT32 || al->v.u64 == 0 || (al->v.u64 & (al->v.u64 - 1)) != 0) {
            rc = fail(&c, ERR_FORMAT, "general.alignment must be a u32 power of two");
            goto err;
        }
        f->alignment = (uint32_t)al->v.u64;
    }

    for (uint64_t i = 0; i < f->n_tensors; i++)
        if ((rc = read_tensor(&c, &f->tensors[i])) < 0) goto err;

    size_t data = c.pos + (f->alignment - c.pos % f->alignment) % f->alignment;
    if (data > size && f->n_tensors > 0) {
        rc = fail(&c, ERR_FORMAT, "truncated file: data section starts past the end");
        goto err;
    }
    f->data_offset = data;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        struct gguf_tensor *t = &f->tensors[i];
        if (t->offset % f->alignment != 0) {
            rc = fail(&c, ERR_FORMAT, "tensor '%.*s': offset %llu is not aligned to %u",
                      (int)t->name.len, t->name.ptr, (unsigned long long)t->offset, f->alignment);
            goto err;
        }
        if (t->offset > size - data || t->size > size - data - t->offset) {
            rc = fail(&c, ERR_FORMAT, "tensor '%.*s': data (offset %llu, %zu bytes) lies outside the file",
                      (int)t->name.len, t->name.ptr, (unsigned long long)t->offset, t->size);
            goto err;
        }
        t->data = f->base + data + t->offset;
    }
    if ((rc = check_unique(&c, "tensor", &f->tensors[0].name, sizeof *f->tensors, f->n_tensors)) < 0) goto err;
    return 0;
err:
    free(f->kv);
    free(f->tensors);
    free(f->str_pool);
    f->kv = NULL;
    f->tensors = NULL;
    f->str_pool = NULL;
    f->n_kv = f->n_tensors = 0;
    return rc;
}

/* gguf_open_resident: the file is read into huge pages (common/hugemem.h), made read-only by gguf_seal.
 * A decode step streams every weight once: with the 4 KB pages of a file mapping that is a TLB
 * miss per 4 KB and hardware prefetchers that stop at every page end, and a step's matmuls wait
 * on them (most of all on a machine busy with other work). The cost: the whole file is read at
 * open (page cache to memory) and the weights are private memory rather than shared page cache,
 * so only the model loader asks for it. NULL on failure (errno set). */
static void *read_resident(int fd, size_t size) {
    uint8_t *a = hugemem_alloc(size);
    if (!a) return NULL;
    for (size_t got = 0; got < size;) {
        ssize_t r = pread(fd, a + got, size - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r == 0 ? EIO : errno;
            hugemem_free(a, size);
            errno = e;
            return NULL;
        }
        got += (size_t)r;
    }
    return a;
}

int gguf_seal(struct gguf_file *f) {
    return f->resident && f->size && hugemem_seal((void *)f->base, f->size) < 0 ? -ERR_IO : 0;
}

/* The file's memory back, however it was taken. */
static void release_file(const struct gguf_file *f) {
    if (!f->size) return;
    if (f->resident) hugemem_free((void *)f->base, f->size);
    else munmap((void *)f->base, f->size);
}

static int open_file(struct gguf_file *f, const char *path, bool resident, char *why, size_t why_len) {
    *f = (struct gguf_file){0};
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* a FIFO must not block the open */
    if (fd < 0) {
        snprintf(why, why_len, "%s: %s", path, strerror(errno));
        return errno == ENOENT ? -ERR_NOTFOUND : -ERR_IO;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        snprintf(why, why_len, "%s: not a regular file", path);
        close(fd);
        return -ERR_INVAL; /* a wrong path, not a failed read */
    }
    size_t size = (size_t)st.st_size;
    void *base = NULL;
    if (size && resident) base = read_resident(fd, size);
    else if (size && (base = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED) base = NULL;
    close(fd);
    if (size && !base) {
        snprintf(why, why_len, "%s: %s: %s", path, resident ? "reading" : "mmap", strerror(errno));
        return -ERR_IO;
    }
    char inner[256];
    int rc = gguf_parse(f, base, size, inner, sizeof inner);
    f->mapped = true; /* from here on the file's memory is ours to release */
    f->resident = resident;
    f->base = base;
    f->size = size;
    if (rc < 0) {
        snprintf(why, why_len, "%s: %s", path, inner);
        gguf_close(f);
        return rc;
    }
    return 0;
}

int gguf_open(struct gguf_file *f, const char *path, char *why, size_t why_len) {
    return open_file(f, path, false, why, why_len);
}

int gguf_open_resident(struct gguf_file *f, const char *path, char *why, size_t why_len) {
    return open_file(f, path, true, why, why_len);
}

void gguf_close(struct gguf_file *f) {
    if (f->mapped) release_file(f);
    free(f->kv);
    free(f->tensors);
    free(f->str_pool);
    *f = (struct gguf_file){0};
}

bool gguf_str_eq(struct gguf_str s, const char *cstr) {
    size_t n = strlen(cstr);
    return s.len == n && memcmp(s.ptr, cstr, n) == 0;
}

const struct gguf_kv *gguf_find_kv(const struct gguf_file *f, const char *key) {
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (gguf_str_eq(f->kv[i].key, key)) return &f->kv[i];
    return NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name) {
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (gguf_str_eq(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

int64_t gguf_get_int(const struct gguf_file *f, const char *key, int64_t dflt) {
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || !gguf_vtype_size(kv->type) || kv->type == GGUF_FLOAT32 || kv->type == GGUF_FLOAT64) return dflt;
    if (is_signed(kv->type)) return kv->v.i64;
    return kv->v.u64 > INT64_MAX ? dflt : (int64_t)kv->v.u64;
}

double gguf_get_float(const struct gguf_file *f, const char *key, double dflt) {
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || !gguf_vtype_size(kv->type) || kv->type == GGUF_BOOL) return dflt;
    if (kv->type == GGUF_FLOAT32 || kv->type == GGUF_FLOAT64) return kv->v.f64;
    return is_signed(kv->type) ? (double)kv->v.i64 : (double)kv->v.u64;
}

bool gguf_get_bool(const struct gguf_file *f, const char *key, bool dflt) {
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    return kv && kv->type == GGUF_BOOL ? kv->v.u64 != 0 : dflt;
}

struct gguf_str gguf_get_str(const struct gguf_file *f, const char *key) {
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    return kv && kv->type == GGUF_STRING ? kv->v.str : (struct gguf_str){0};
}

const struct gguf_array *gguf_get_arr(const struct gguf_file *f, const char *key) {
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    return kv && kv->type == GGUF_ARRAY ? &kv->v.arr : NULL;
}

static void array_elem(const struct gguf_array *a, uint64_t i, struct gguf_kv *out) {
    size_t es = gguf_vtype_size(a->type);
    ASSERT(es && i < a->n);
    decode_scalar(a->type, (const uint8_t *)a->data + i * es, out);
}

double gguf_arr_float(const struct gguf_array *a, uint64_t i) {
    struct gguf_kv v;
    array_elem(a, i, &v);
    if (a->type == GGUF_FLOAT32 || a->type == GGUF_FLOAT64) return v.v.f64;
    return is_signed(a->type) ? (double)v.v.i64 : (double)v.v.u64;
}

int64_t gguf_arr_int(const struct gguf_array *a, uint64_t i) {
    struct gguf_kv v;
    array_elem(a, i, &v);
    if (a->type == GGUF_FLOAT32 || a->type == GGUF_FLOAT64) {
        /* Saturate: converting an out-of-range (or NaN) double to an integer is undefined. */
        if (!(v.v.f64 > -9.2e18)) return v.v.f64 != v.v.f64 ? 0 : INT64_MIN;
        return v.v.f64 < 9.2e18 ? (int64_t)v.v.f64 : INT64_MAX;
    }
    return is_signed(a->type) ? v.v.i64 : (int64_t)v.v.u64;
}
