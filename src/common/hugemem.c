/* hugemem.c: anonymous mappings aligned to 2 MB and advised into transparent huge pages. */
#include "common/hugemem.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)

/* What the mapping of `bytes` spans: whole huge pages from 2 MB on, whole 4 KB pages below. */
static size_t mapped_len(size_t bytes) {
    size_t unit = bytes >= HUGE_PAGE ? HUGE_PAGE : 4096;
    return (bytes ? bytes + unit - 1 : unit) / unit * unit;
}

void *hugemem_alloc(size_t bytes) {
    size_t len = mapped_len(bytes), extra = bytes >= HUGE_PAGE ? HUGE_PAGE : 0;
    uint8_t *p = mmap(NULL, len + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    if (!extra) return p;
    /* keep the 2 MB-aligned len bytes inside, give back the rest */
    uint8_t *a = (uint8_t *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (a > p) munmap(p, (size_t)(a - p));
    if (a + len < p + len + extra) munmap(a + len, (size_t)(p + len + extra - (a + len)));
#ifdef MADV_HUGEPAGE
    madvise(a, len, MADV_HUGEPAGE); /* advice: 4 KB pages where the kernel has no huge ones */
#endif
    return a;
}

void hugemem_commit(void *p, size_t bytes) {
    volatile uint8_t *b = p; /* volatile: a store of the zero already there is still made */
    for (size_t i = 0; i < bytes; i += 4096) b[i] = 0;
}

int64_t hugemem_available(void) {
    const char *set = getenv("UVLM_MEMORY_AVAILABLE");
    if (set && *set) {
        char *end;
        double v = strtod(set, &end);
        double unit = *end == 'k' || *end == 'K' ? 1024.0 : *end == 'M' ? 1048576.0 : *end == 'G' ? 1073741824.0 : 1;
        if (v >= 0 && end != set && (unit == 1 ? !*end : !end[1])) return (int64_t)(v * unit);
    }
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[128];
    long long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    fclose(f);
    return kb < 0 ? -1 : (int64_t)kb * 1024;
}

int hugemem_seal(void *p, size_t bytes) {
    return mprotect(p, mapped_len(bytes), PROT_READ);
}

void hugemem_free(void *p, size_t bytes) {
    if (p) munmap(p, mapped_len(bytes));
}
