/* hugemem.h: large buffers in 2 MB transparent huge pages.
 *
 * What streams through memory at every decode step (the model's weights, the KV cells) is read
 * faster from 2 MB pages than from 4 KB ones: with 4 KB pages a decode step takes a TLB miss
 * every 4 KB, and hardware prefetchers stop at every page end. Linux hands out huge pages to
 * anonymous memory that asks for them (madvise) whenever the THP setting is "always" or
 * "madvise"; with "never" the buffer simply gets 4 KB pages and nothing else changes.
 *
 * hugemem_alloc(bytes): zero-filled read-write anonymous memory, 2 MB-aligned from 2 MB on (plain
 * pages below that: a huge page would commit 2 MB for a small buffer), committed page by page as
 * it is written (or all at once: hugemem_commit). NULL when the mapping fails. The caller owns
 * it and gives it back with hugemem_free(p, the same bytes) (p may be NULL).
 *
 *   float *w = hugemem_alloc(n * sizeof *w);
 *   if (!w) return -ERR_NOMEM;
 *   ...
 *   hugemem_free(w, n * sizeof *w);
 */
#ifndef UVLM_COMMON_HUGEMEM_H
#define UVLM_COMMON_HUGEMEM_H

#include <stddef.h>
#include <stdint.h>

void *hugemem_alloc(size_t bytes);
void hugemem_free(void *p, size_t bytes);
/* Has the kernel back the whole buffer now (a write to every 4 KB page: each fault brings a
 * whole huge page where there is one), for memory sized at startup that a request would
 * otherwise fault in mid-step: the first touch of a 2 MB page may cost milliseconds (on a VM
 * the host backs the page then). */
void hugemem_commit(void *p, size_t bytes);
/* Bytes the kernel can hand out without swapping (/proc/meminfo's MemAvailable), or -1 where it
 * does not say: a check before hugemem_commit, so that a budget beyond the machine fails with an
 * error rather than the OOM killer. (A cgroup's own limit is not in it.) The environment variable
 * UVLM_MEMORY_AVAILABLE (bytes, or with a k/M/G suffix) stands in for MemAvailable when set: for a
 * container whose limit is below what the host reports, and for tests of the refusal. */
int64_t hugemem_available(void);
/* Makes the whole buffer read-only (the protection of its every page, so no huge page is split):
 * 0, or -1 with errno set (mprotect's). */
int hugemem_seal(void *p, size_t bytes);

#endif
