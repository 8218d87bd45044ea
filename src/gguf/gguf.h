/* gguf.h: read-only access to a GGUF file (versions 2 and 3), memory-mapped.
 *
 * The file is mapped once (gguf_open_resident, for a model's weights, reads it into memory in huge
 * pages instead, read-only from gguf_seal: see gguf.c); every string, array and tensor returned points into
 * the mapping and lives until gguf_close(). Nothing is copied except the index of key/values and tensor infos
 * (allocated by gguf_open/gguf_parse, bounded by the file's size). Every count, length and offset
 * is checked against the file before use: a corrupt file gives -ERR_FORMAT (or -ERR_UNSUPPORTED
 * for an unknown version or tensor type) and a message naming what is wrong, never an over-read.
 *
 *   struct gguf_file f;
 *   char why[256];
 *   if (gguf_open(&f, "model.gguf", why, sizeof why) < 0) { fprintf(stderr, "%s\n", why); ... }
 *   int64_t n_layer = gguf_get_int(&f, "llama.block_count", -1);
 *   const struct gguf_tensor *t = gguf_find_tensor(&f, "token_embd.weight");
 *   // t->data: t->ne[0] x t->ne[1] elements of t->type, rows of ggml_row_size(t->type, t->ne[0]) bytes
 *   gguf_close(&f);
 *
 * Shapes: ne[0] is the fastest-varying (row length); a 2-D weight of ne = {n_in, n_out} is n_out
 * rows of n_in elements. Dimensions beyond n_dims are 1.
 */
#ifndef UVLM_GGUF_H
#define UVLM_GGUF_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#include "gguf/types.h"

enum gguf_vtype {
    GGUF_UINT8 = 0, GGUF_INT8 = 1, GGUF_UINT16 = 2, GGUF_INT16 = 3,
    GGUF_UINT32 = 4, GGUF_INT32 = 5, GGUF_FLOAT32 = 6, GGUF_BOOL = 7,
    GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_UINT64 = 10, GGUF_INT64 = 11,
    GGUF_FLOAT64 = 12,
};

/* A string inside the mapping: not NUL-terminated. */
struct gguf_str {
    const char *ptr;
    uint64_t len;
};

struct gguf_array {
    enum gguf_vtype type;     /* element type (never GGUF_ARRAY: nested arrays are refused) */
    uint64_t n;               /* element count */
    const void *data;         /* numeric arrays: n packed little-endian elements, maybe unaligned */
    const struct gguf_str *strs; /* string arrays: n strings (index built at open), else NULL */
};

struct gguf_kv {
    struct gguf_str key;
    enum gguf_vtype type;
    union {
        uint64_t u64;  /* every unsigned integer type, and bool (0/1) */
        int64_t i64;   /* every signed integer type */
        double f64;    /* FLOAT32 and FLOAT64 */
        struct gguf_str str;
        struct gguf_array arr;
    } v;
};

struct gguf_tensor {
    struct gguf_str name;
    uint32_t n_dims;          /* 1..4 */
    uint64_t ne[4];           /* elements per dimension, unused ones 1 */
    enum ggml_type type;
    uint64_t offset;          /* from the start of the data section */
    const void *data;         /* inside the mapping, aligned to the file's alignment */
    size_t size;              /* bytes */
};

struct gguf_file {
    uint32_t version;
    uint64_t n_kv;
    struct gguf_kv *kv;       /* owned: n_kv entries */
    uint64_t n_tensors;
    struct gguf_tensor *tensors; /* owned: n_tensors entries */
    uint32_t alignment;       /* general.alignment, default 32 */
    const uint8_t *base;      /* the mapping (or the caller's buffer for gguf_parse) */
    size_t size;
    size_t data_offset;       /* start of the tensor data section */
    bool mapped;              /* true when gguf_close must release base (gguf_open*, not gguf_parse) */
    bool resident;            /* base is gguf_open_resident's memory (common/hugemem.h), not a file mapping */
    struct gguf_str *str_pool;/* owned: storage of the string-array indexes */
};

/* Map and parse a file. On error returns a negative ERR_* and writes a message to why. */
int gguf_open(struct gguf_file *f, const char *path, char *why, size_t why_len);
/* The same, with the file read into huge pages at once (what the forward pass streams: a model's
 * weights); gguf_open maps it (vocabularies, templates, metadata). The memory stays writable until
 * gguf_seal, so the model loader can rewrite tensors in place (math/q8x16.h). */
int gguf_open_resident(struct gguf_file *f, const char *path, char *why, size_t why_len);
/* Makes gguf_open_resident's memory read-only, as a mapping is (nothing for a mapping): 0, or
 * -ERR_IO. */
int gguf_seal(struct gguf_file *f);
/* Parse a buffer the caller keeps alive until gguf_close (used by tests and the fuzzer). */
int gguf_parse(struct gguf_file *f, const void *buf, size_t size, char *why, size_t why_len);
void gguf_close(struct gguf_file *f);

/* Lookups by exact key; NULL when absent. */
const struct gguf_kv *gguf_find_kv(const struct gguf_file *f, const char *key);
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name);

/* Typed accessors with defaults: the default is returned when the key is absent or its type
 * does not convert (any integer type converts to int, any number to float). */
int64_t gguf_get_int(const struct gguf_file *f, const char *key, int64_t dflt);
double gguf_get_float(const struct gguf_file *f, const char *key, double dflt);
bool gguf_get_bool(const struct gguf_file *f, const char *key, bool dflt);
/* The string value, or dflt (ptr NULL, len 0 by default) when absent or not a string. */
struct gguf_str gguf_get_str(const struct gguf_file *f, const char *key);
/* The array value, or NULL when absent or not an array. */
const struct gguf_array *gguf_get_arr(const struct gguf_file *f, const char *key);
/* Element i of a numeric array as a double / int64 (asserts i < n and a numeric type). */
double gguf_arr_float(const struct gguf_array *a, uint64_t i);
int64_t gguf_arr_int(const struct gguf_array *a, uint64_t i);

/* Bytes of one value of a scalar type (1, 2, 4 or 8); 0 for strings, arrays and unknown types. */
size_t gguf_vtype_size(uint32_t type);

/* gguf_str equality with a C string. */
bool gguf_str_eq(struct gguf_str s, const char *cstr);

#endif
