/* ids.c: random response ids (see ids.h). */
#include "api/ids.h"

#include <stdint.h>
#include <stdio.h>
#include <sys/random.h>
#include <time.h>

static const char alphabet[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/* splitmix64: the fallback's mixer. */
static uint64_t mix(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void api_random_id(char *out, size_t cap, const char *prefix, size_t n_random) {
    if (cap == 0) return;
    int n = snprintf(out, cap, "%s", prefix);
    size_t at = n < 0 ? 0 : (size_t)n >= cap ? cap - 1 : (size_t)n;
    unsigned char rnd[64];
    if (n_random > sizeof rnd) n_random = sizeof rnd;
    if (getrandom(rnd, n_random, GRND_NONBLOCK) != (ssize_t)n_random) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        static uint64_t counter;
        uint64_t state = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ ++counter << 40;
        for (size_t i = 0; i < n_random; i++) rnd[i] = (unsigned char)(mix(&state) >> 56);
    }
    /* byte % 62 favours the first 8 characters slightly: harmless for an id */
    for (size_t i = 0; i < n_random && at + 1 < cap; i++) out[at++] = alphabet[rnd[i] % 62];
    out[at] = '\0';
}
