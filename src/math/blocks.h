/* blocks.h: the in-memory layout of one block of each quantized GGUF type (private to src/math).
 *
 * Layouts are exactly the GGUF ones (little-endian, fp16 scales stored as raw uint16). A value is
 * reconstructed as follows (q: the stored small integer of one element):
 *   Q4_0  x = d * (q - 8)                q: 4 bits                       32 per block
 *   Q4_1  x = d * q + m                  q: 4 bits                       32 per block
 *   Q5_0  x = d * (q - 16)               q: 4 low bits in qs, bit 4 in qh
 *   Q5_1  x = d * q + m                  q: as Q5_0
 *   Q8_0  x = d * q                      q: int8
 *   Q8_1  x = d * q, s = d * sum(q)      (activation type for the _1 weights)
 *   Q4_K  256 per super-block, 8 sub-blocks of 32: x = d*sc[j]*q - dmin*m[j], sc/m 6-bit packed
 *   Q5_K  as Q4_K with a fifth bit per element in qh
 *   Q6_K  16 sub-blocks of 16: x = d * scales[j] * (q - 32), q: 4 low bits in ql, 2 high in qh
 *   Q8_K  x = d * q (float d), bsums[j] = sum of q over the j-th 16 elements (activation type)
 *   Q2_K  16 sub-blocks of 16: x = d*(sc[j] & 15)*q - dmin*(sc[j] >> 4), q: 2 bits. Element
 *         128h + 32j + l is bits 2j..2j+1 of qs[32h + l]
 *   Q3_K  16 sub-blocks of 16: x = d*(s[j] - 32)*q, q = (2 low bits, laid out as Q2_K's) - 4
 *         unless bit 4h + j of hmask[l] is set; s: 6-bit scales packed in 12 bytes (q3k_scale)
 *   IQ4_NL x = d * iq4nl_levels[q], q: 4 bits as Q4_0 (low nibbles elements 0-15)  32 per block
 *   IQ4_XS 8 sub-blocks of 32, each laid out as IQ4_NL: x = d*(ls - 32)*iq4nl_levels[q], ls: 4 low
 *         bits in scales_l (nibble j of the array), 2 high bits at bit 2j of scales_h
 */
#ifndef UVLM_MATH_BLOCKS_H
#define UVLM_MATH_BLOCKS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK_K 256
#define K_SCALE_SIZE 12
#define QK4_NL 32

typedef struct { uint16_t d; uint8_t qs[QK4_0 / 2]; } block_q4_0;
typedef struct { uint16_t d, m; uint8_t qs[QK4_1 / 2]; } block_q4_1;
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; } block_q5_0;
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; } block_q5_1;
typedef struct { uint16_t d; int8_t qs[QK8_0]; } block_q8_0;
typedef struct { uint16_t d, s; int8_t qs[QK8_1]; } block_q8_1;
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
} block_q4_K;
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
} block_q5_K;
typedef struct {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    uint16_t d;
} block_q6_K;
typedef struct {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
} block_q8_K;
typedef struct {
    uint8_t scales[QK_K / 16]; /* low nibble: scale, high nibble: min */
    uint8_t qs[QK_K / 4];
    uint16_t d, dmin;
} block_q2_K;
typedef struct {
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[12];
    uint16_t d;
} block_q3_K;
typedef struct { uint16_t d; uint8_t qs[QK4_NL / 2]; } block_iq4_nl;
typedef struct {
    uint16_t d, scales_h;
    uint8_t scales_l[QK_K / 64];
    uint8_t qs[QK_K / 2];
} block_iq4_xs;

_Static_assert(sizeof(block_q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(block_q4_1) == 20, "q4_1 layout");
_Static_assert(sizeof(block_q5_0) == 22, "q5_0 layout");
_Static_assert(sizeof(block_q5_1) == 24, "q5_1 layout");
_Static_assert(sizeof(block_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(block_q8_1) == 36, "q8_1 layout");
_Static_assert(sizeof(block_q4_K) == 144, "q4_K layout");
_Static_assert(sizeof(block_q5_K) == 176, "q5_K layout");
_Static_assert(sizeof(block_q6_K) == 210, "q6_K layout");
_Static_assert(sizeof(block_q8_K) == 292, "q8_K layout");
_Static_assert(sizeof(block_q2_K) == 84, "q2_K layout");
_Static_assert(sizeof(block_q3_K) == 110, "q3_K layout");
_Static_assert(sizeof(block_iq4_nl) == 18, "iq4_nl layout");
_Static_assert(sizeof(block_iq4_xs) == 136, "iq4_xs layout");

/* The 16 values a 4-bit IQ4_NL / IQ4_XS level stands for (the format's non-linear grid). */
static const int8_t iq4nl_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* The signed scale (-32..31) of sub-block j (0..15) of a Q3_K super-block: its 4 low bits are
 * nibble j of bytes 0-7 (low nibbles for j < 8), its 2 high bits bits 2(j/4) of byte 8 + j%4. */
static inline int q3k_scale(const uint8_t *s, int j) {
    int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
    int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | hi << 4) - 32;
}

/* All 16 Q3_K scales as bytes, unsigned (q3k_scale + 32, 0..63): scales 0-7 in *lo, 8-15 in *hi,
 * for the SIMD kernels (bit arithmetic on the 12 bytes, no per-scale loop). */
static inline void q3k_scale_bytes(const uint8_t *s, uint64_t *lo, uint64_t *hi) {
    uint64_t s0;
    uint32_t u2;
    memcpy(&s0, s, 8);
    memcpy(&u2, s + 8, 4);
    const uint64_t low4 = 0x0F0F0F0F0F0F0F0Full;
    const uint32_t two = 0x03030303u;
    const uint64_t h01 = (uint64_t)(u2 & two) | (uint64_t)((u2 >> 2) & two) << 32;
    const uint64_t h23 = (uint64_t)((u2 >> 4) & two) | (uint64_t)((u2 >> 6) & two) << 32;
    *lo = (s0 & low4) | h01 << 4;
    *hi = ((s0 >> 4) & low4) | h23 << 4;
}

/* The 8 IQ4_XS sub-block scales as bytes, unsigned (iq4xs_scale + 32, 0..63): the nibbles of
 * scales_l and the 2-bit fields of scales_h spread to one byte each. */
static inline uint64_t iq4xs_scale_bytes(const block_iq4_xs *b) {
    uint32_t l;
    memcpy(&l, b->scales_l, 4);
    uint64_t t = (uint64_t)(l & 0xFFFF) | (uint64_t)(l & 0xFFFF0000u) << 16; /* 16-bit lanes: 2 bytes */
    t = (t & 0x000000FF000000FFull) | (t & 0x0000FF000000FF00ull) << 8;       /* one byte per 16 bits */
    t = (t & 0x000F000F000F000Full) | (t & 0x00F000F000F000F0ull) << 4;       /* nibbles to bytes */
    uint64_t h = b->scales_h;
    h = (h | h << 24) & 0x000000FF000000FFull;
    h = (h | h << 12) & 0x000F000F000F000Full;
    h = (h | h << 6) & 0x0303030303030303ull;
    return t | h << 4;
}

/* The signed scale (-32..31) of sub-block j (0..7) of an IQ4_XS super-block. */
static inline int iq4xs_scale(const block_iq4_xs *b, int j) {
    int lo = (b->scales_l[j / 2] >> (4 * (j % 2))) & 0xF;
    int hi = (b->scales_h >> (2 * j)) & 3;
    return (lo | hi << 4) - 32;
}

/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K super-block: sub-blocks 0-3 keep
 * theirs in the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); sub-blocks 4-7 keep their low 4
 * bits in the nibbles of bytes 8-11 and their top 2 bits in the top bits of bytes 0-7. */
static inline void k4_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* All eight scales (bytes of *sc) and mins (bytes of *mn) of a Q4_K/Q5_K super-block at once,
 * for the SIMD kernels; kept in registers (a byte array read back as one vector would cost a
 * store-forwarding stall). */
static inline void k4_scales_mins(const uint8_t *q, uint64_t *sc, uint64_t *mn) {
    uint32_t u0 = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
    uint32_t u1 = (uint32_t)q[4] | (uint32_t)q[5] << 8 | (uint32_t)q[6] << 16 | (uint32_t)q[7] << 24;
    uint32_t u2 = (uint32_t)q[8] | (uint32_t)q[9] << 8 | (uint32_t)q[10] << 16 | (uint32_t)q[11] << 24;
    const uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, top2 = 0xc0c0c0c0;
    *sc = (u0 & low6) | (uint64_t)((u2 & low4) | ((u0 & top2) >> 2)) << 32;
    *mn = (u1 & low6) | (uint64_t)(((u2 >> 4) & low4) | ((u1 & top2) >> 2)) << 32;
}

/* Super-block i of a Q4_K (q5 = 0) or Q5_K row, as the SIMD kernels read it: both layouts start
 * with d, dmin and the 12 scale bytes; qh is NULL for Q4_K. */
struct k45_view {
    uint16_t d, dmin;
    uint64_t sc, mn; /* the 8 scales and 8 mins as bytes (k4_scales_mins) */
    const uint8_t *qs, *qh;
};

static inline struct k45_view k45_view(const void *row, int64_t i, int q5) {
    struct k45_view v;
    const uint8_t *blk = (const uint8_t *)row + (size_t)i * (q5 ? sizeof(block_q5_K) : sizeof(block_q4_K));
    const block_q4_K *b4 = (const block_q4_K *)blk;
    v.d = b4->d;
    v.dmin = b4->dmin;
    k4_scales_mins(b4->scales, &v.sc, &v.mn);
    v.qs = q5 ? ((const block_q5_K *)blk)->qs : b4->qs;
    v.qh = q5 ? ((const block_q5_K *)blk)->qh : NULL;
    return v;
}

#endif
