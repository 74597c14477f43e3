/* The AVX-512 passes of the paged decode attention (internal: not part of the library's
 * interface). paged_attention.c runs each (sequence, KV head) pair's keys through a score_fn,
 * then a softmax of its own, then a sum_fn; avx512/attention_passes.c has them for head sizes
 * 64, 128 and 256 (NULL for others: paged_attention.c's loops).
 */
#ifndef MINISGL_ATTENTION_PASSES_H
#define MINISGL_ATTENTION_PASSES_H

#include <stdint.h>

/* every cache line of a row (a bf16 row of 64 is two lines; prefetching its first alone left
 * the second to a miss) */
static inline void prefetch_row(const void *row, int D, int bf16, int kv_int8) {
    int bytes = kv_int8 ? D + 2 : bf16 ? 2 * D : 4 * D;
    for (int off = 0; off < bytes; off += 64) __builtin_prefetch((const char *)row + off);
}

/* Scores of one (sequence, KV head) pair's keys, scores[g * L + l] = q_g . k_l * scale (-inf
 * where ok[l] is 0): qraw, its G query rows as given (fp32 or bf16), qf the same in fp32 */
typedef void (*score_fn)(const void *qraw, const float *qf, const void *k_cache,
                         const int64_t *slots, const uint8_t *ok, int L, int Hkv, int h, int G,
                         float scale, float *scores);
/* acc[g * D + d] = sum over the visible keys l of w[g * L + l] * v_l[d] (masked keys unread) */
typedef void (*sum_fn)(const void *v_cache, const int64_t *slots, const uint8_t *ok, int L,
                       int Hkv, int h, int G, const float *w, float *acc);

/* not exported from the library (its interface is minisgl_kernels.h) */
#define PA_HIDDEN __attribute__((visibility("hidden")))
PA_HIDDEN score_fn pa_scorer_avx512(int D, int bf16);
PA_HIDDEN sum_fn pa_summer_avx512(int D, int bf16);

#endif
