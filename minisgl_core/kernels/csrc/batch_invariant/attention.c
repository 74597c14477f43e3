/* Batch-invariant attention over the paged KV cache: every query row, decode or prefill, in one
 * fixed order of its keys.
 *
 * q [T, Hq, D]; k_cache, v_cache [slots, Hkv, D]; slots [S, L] int64: the slot of each key of
 * each sequence; row_seq [T]: the sequence of each row; positions [T]: the row's position, so it
 * sees keys 0..position (or the last ``window`` of them when window > 0); out [T, Hq, D]. q,
 * the caches and out are all fp32 (bf16 = 0) or all bf16 (bf16 = 1); scores, softmax and sums
 * are fp32. A row's keys are read in position order whatever else the call holds: a prompt's
 * row during prefill (chunked or not), a speculative verify row and the same position decoded
 * alone reduce alike, and padding never enters a sum (paged_attention.c's sums run over the
 * padded length with its lanes reassociated, so they can change with the batch's longest
 * context). Work is split over (row, KV head) pairs.
 */
#include "../minisgl_kernels.h"
#include "bi_common.h"
#include <stdlib.h>

#define MAX_GROUP 16 /* query heads per KV head handled (Hq / Hkv) */
#define MAX_DIM 256  /* head_dim handled */

BI_INLINE void attention_body(const void *q, const void *k_cache, const void *v_cache,
                              const int64_t *slots, int L, const int64_t *row_seq,
                              const int64_t *positions, int T, int Hq, int Hkv, int D,
                              float scale, int window, int bf16, void *out) {
    int G = Hq / Hkv;
#pragma omp parallel
    {
        float *scores = malloc(sizeof(float) * (size_t)G * (size_t)L);
        float qf[MAX_GROUP * MAX_DIM], acc[MAX_GROUP * MAX_DIM], row[MAX_DIM];
#pragma omp for schedule(static)
        for (int64_t pair = 0; pair < (int64_t)T * Hkv; pair++) {
            int64_t t = pair / Hkv, h = pair % Hkv;
            const int64_t *seq = slots + row_seq[t] * L;
            int64_t n = positions[t] + 1 < L ? positions[t] + 1 : L;
            int64_t first = window > 0 && n > window ? n - window : 0;
            for (int g = 0; g < G; g++) bi_load_row(q, t * Hq + h * G + g, D, bf16, qf + g * D);
            for (int64_t l = first; l < n; l++) {
                bi_load_row(k_cache, seq[l] * Hkv + h, D, bf16, row);
                for (int g = 0; g < G; g++) scores[g * L + l] = bi_dot(qf + g * D, row, D) * scale;
            }
            float total[MAX_GROUP];
            for (int g = 0; g < G; g++) {
                float *sg = scores + (int64_t)g * L, best = -INFINITY, sum = 0.0f;
                for (int64_t l = first; l < n; l++) best = sg[l] > best ? sg[l] : best;
                for (int64_t l = first; l < n; l++) {  /* in key order, one at a time */
                    sg[l] = expf(sg[l] - best);
                    sum += sg[l];
                }
                total[g] = sum;
            }
            for (int i = 0; i < G * D; i++) acc[i] = 0.0f;
            for (int64_t l = first; l < n; l++) {
                bi_load_row(v_cache, seq[l] * Hkv + h, D, bf16, row);
                for (int g = 0; g < G; g++) {
                    float p = scores[g * L + l], *ag = acc + g * D;
                    for (int d = 0; d < D; d++) ag[d] = fmaf(p, row[d], ag[d]);
                }
            }
            for (int g = 0; g < G; g++) {
                float inv = total[g] > 0.0f ? 1.0f / total[g] : 0.0f;
                int64_t o = (t * Hq + h * G + g) * D;
                for (int d = 0; d < D; d++) {
                    float v = acc[g * D + d] * inv;
                    if (bf16) ((uint16_t *)out)[o + d] = bi_float_to_bf16(v);
                    else ((float *)out)[o + d] = v;
                }
            }
        }
        free(scores);
    }
}

#define ARGS                                                                                   \
    const void *q, const void *k_cache, const void *v_cache, const int64_t *slots, int L,     \
        const int64_t *row_seq, const int64_t *positions, int T, int Hq, int Hkv, int D,       \
        float scale, int window, int bf16, void *out
#define PASS q, k_cache, v_cache, slots, L, row_seq, positions, T, Hq, Hkv, D, scale, window, \
             bf16, out

static void attention_c(ARGS) { attention_body(PASS); }
#if defined(__x86_64__)
BI_TARGET_AVX2 static void attention_avx2(ARGS) { attention_body(PASS); }
BI_TARGET_AVX512 static void attention_avx512(ARGS) { attention_body(PASS); }
#endif

int bi_attention(const void *q, const void *k_cache, const void *v_cache, const int64_t *slots,
                 int L, const int64_t *row_seq, const int64_t *positions, int T, int Hq, int Hkv,
                 int D, float scale, int window, int bf16, void *out, int isa) {
    if (Hkv < 1 || Hq % Hkv != 0 || Hq / Hkv > MAX_GROUP || D > MAX_DIM || L < 1) return -1;
    if (T == 0) return 0;
#if defined(__x86_64__)
    if (isa >= 2) { attention_avx512(PASS); return 0; }
    if (isa == 1) { attention_avx2(PASS); return 0; }
#endif
    (void)isa;
    attention_c(PASS);
    return 0;
}
