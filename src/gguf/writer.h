/* writer.h: writing a GGUF v3 file (the layout gguf.h reads), for `uvlm mkmodel` and tests.
 *
 * Metadata and tensor declarations are collected in memory first (they are small); then
 * gguf_writer_begin writes the header, key/values and tensor infos, and the tensors' data is
 * streamed in declaration order, so a multi-GB model never sits in memory whole. Data offsets
 * are aligned to 32 bytes (the default general.alignment).
 *
 *   struct gguf_writer w;
 *   gguf_writer_init(&w);
 *   gguf_writer_set_str(&w, "general.architecture", "llama");
 *   gguf_writer_set_u32(&w, "llama.block_count", 4);
 *   gguf_writer_copy_kv(&w, gguf_find_kv(&vocab, "tokenizer.ggml.tokens"));
 *   gguf_writer_add_tensor(&w, "token_embd.weight", GGML_TYPE_Q8_0, 256, 32000);
 *   if (gguf_writer_begin(&w, "out.gguf") == 0)
 *       gguf_writer_write(&w, data, bytes);         // tensor by tensor, any number of pieces
 *   rc = gguf_writer_finish(&w);                     // checks every declared byte was written
 *
 * Errors stick: after a failed call the others do nothing, and finish returns the first error
 * (-ERR_NOMEM, -ERR_IO, -ERR_INVAL for a bad declaration or a wrong amount of data).
 */
#ifndef UVLM_GGUF_WRITER_H
#define UVLM_GGUF_WRITER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "gguf/gguf.h"

struct gguf_writer_tensor {
    char name[96];
    enum ggml_type type;
    uint64_t ne0, ne1;   /* ne1 == 1: a vector */
    uint64_t offset, size;
};

struct gguf_writer {
    int err;
    uint8_t *kv;            /* serialized key/values */
    size_t kv_len, kv_cap;
    uint64_t n_kv;
    struct gguf_writer_tensor *tensors;
    uint64_t n_tensors, tensors_cap;
    FILE *f;
    uint64_t cur;           /* tensor being written */
    uint64_t cur_written;   /* its bytes written so far */
};

void gguf_writer_init(struct gguf_writer *w);
void gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *value);
void gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t value);
void gguf_writer_set_f32(struct gguf_writer *w, const char *key, float value);
void gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool value);
/* An array of n int32 values. */
void gguf_writer_set_arr_i32(struct gguf_writer *w, const char *key, const int32_t *values, uint32_t n);
/* Copy a key/value read from another file (e.g. the tokenizer.* keys of a vocabulary). */
void gguf_writer_copy_kv(struct gguf_writer *w, const struct gguf_kv *kv);
/* A tensor of ne1 rows of ne0 elements (ne0 a multiple of the type's block size). */
void gguf_writer_add_tensor(struct gguf_writer *w, const char *name, enum ggml_type type, uint64_t ne0, uint64_t ne1);
int gguf_writer_begin(struct gguf_writer *w, const char *path);
void gguf_writer_write(struct gguf_writer *w, const void *data, size_t n);
/* Closes the file and frees everything; 0 or the first error. */
int gguf_writer_finish(struct gguf_writer *w);

#endif
