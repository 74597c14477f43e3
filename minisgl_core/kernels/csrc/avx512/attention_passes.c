/* The AVX-512 passes of the paged decode attention (avx512/attention_passes.h): a pair's keys
 * scored 16 at a time, one reduction for their 16 dot products (AVX512-BF16's pair products on
 * bf16 caches where the CPU has them, else the keys widened to fp32), and the values' weighted
 * sums of up to 4 query heads kept in registers (docs/design/kernels.md, 11.).
 */
#include "../minisgl_kernels.h"
#include "attention_passes.h"
#include <math.h>
#include <stddef.h>

#if defined(__x86_64__)
#include <immintrin.h>

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#define T512BF __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))

/* 16 vectors -> one, lane j the sum of v[j]'s lanes: 45 shuffles and adds for 16 dot products,
 * where reducing each on its own takes about 8 dependent steps */
T512 static inline __m512 sum16(const __m512 *v) {
    __m512 four[4];
    for (int i = 0; i < 4; i++) {  /* v[4i..4i+3] -> 128-bit lane k: their sums over lane k */
        const __m512 *w = v + 4 * i;
        __m512 a = _mm512_add_ps(_mm512_unpacklo_ps(w[0], w[1]), _mm512_unpackhi_ps(w[0], w[1]));
        __m512 c = _mm512_add_ps(_mm512_unpacklo_ps(w[2], w[3]), _mm512_unpackhi_ps(w[2], w[3]));
        __m512d ad = _mm512_castps_pd(a), cd = _mm512_castps_pd(c);
        four[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(ad, cd)),
                                _mm512_castpd_ps(_mm512_unpackhi_pd(ad, cd)));
    }
    /* four[i] lane k = (sum over 128-bit lane k of v[4i], v[4i+1], v[4i+2], v[4i+3]) */
    __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(four[0], four[1], 0x44),
                              _mm512_shuffle_f32x4(four[0], four[1], 0xEE));
    __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(four[2], four[3], 0x44),
                              _mm512_shuffle_f32x4(four[2], four[3], 0xEE));
    return _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
}

/* one key's 16 partial sums of q_g . k over D (D a multiple of 32): fp32 rows; bf16 rows widened
 * to fp32 against qf; bf16 rows against the bf16 query by AVX512-BF16's pair products (each
 * product of two bf16 values is exact in fp32, as when widened) */
T512 static inline __m512 dot_f32(const float *q, const float *k, int D) {
    __m512 a = _mm512_mul_ps(_mm512_loadu_ps(q), _mm512_loadu_ps(k));
    for (int i = 16; i < D; i += 16)
        a = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), _mm512_loadu_ps(k + i), a);
    return a;
}

T512 static inline __m512 widen_bf16(const uint16_t *p) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

T512 static inline __m512 dot_widened(const float *q, const uint16_t *k, int D) {
    __m512 a = _mm512_mul_ps(_mm512_loadu_ps(q), widen_bf16(k));
    for (int i = 16; i < D; i += 16)
        a = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), widen_bf16(k + i), a);
    return a;
}

T512BF static inline __m512 dot_bf16(const uint16_t *q, const uint16_t *k, int D) {
    __m512 a = _mm512_setzero_ps();
    for (int i = 0; i < D; i += 32)
        a = _mm512_dpbf16_ps(a, (__m512bh)_mm512_loadu_si512(q + i),
                             (__m512bh)_mm512_loadu_si512(k + i));
    return a;
}

/* A scorer for head size DD: blocks of 16 keys, each key's sums for every query head of the
 * pair, reduced 16 at a time (sum16); the next block's rows fetched meanwhile. A masked key
 * reads row 0 (its slot may be padding: never followed) and scores -inf. */
#define SCORER(target, name, DD, ELEM, DOT, QROW)                                              \
    target static void name(const void *qraw, const float *qf, const void *k_cache,           \
                            const int64_t *slots, const uint8_t *ok, int L, int Hkv, int h,    \
                            int G, float scale, float *scores) {                               \
        const int D = DD;                                                                      \
        const ELEM *kc = (const ELEM *)k_cache;                                                \
        (void)qraw, (void)qf;                                                                  \
        int l0 = 0;                                                                            \
        for (; l0 + 16 <= L; l0 += 16) {                                                       \
            const ELEM *rows[16];                                                              \
            for (int j = 0; j < 16; j++) {                                                     \
                int l = l0 + j;                                                                \
                rows[j] = kc + ((ok && !ok[l]) ? 0 : slots[l] * Hkv + h) * D;                  \
                if (l + 16 < L && !(ok && !ok[l + 16]))                                        \
                    prefetch_row(kc + (slots[l + 16] * Hkv + h) * D, D, sizeof(ELEM) == 2, 0); \
            }                                                                                  \
            for (int g = 0; g < G; g++) {                                                      \
                __m512 v[16];                                                                  \
                for (int j = 0; j < 16; j++) v[j] = DOT(QROW(g), rows[j], D);                  \
                _mm512_storeu_ps(scores + g * L + l0,                                          \
                                 _mm512_mul_ps(sum16(v), _mm512_set1_ps(scale)));              \
            }                                                                                  \
        }                                                                                      \
        for (; l0 < L; l0++) {                                                                 \
            const ELEM *row = kc + ((ok && !ok[l0]) ? 0 : slots[l0] * Hkv + h) * D;            \
            for (int g = 0; g < G; g++)                                                        \
                scores[g * L + l0] = _mm512_reduce_add_ps(DOT(QROW(g), row, D)) * scale;       \
        }                                                                                      \
        for (int l = 0; ok && l < L; l++)                                                      \
            if (!ok[l])                                                                        \
                for (int g = 0; g < G; g++) scores[g * L + l] = -INFINITY;                     \
    }
#define Q_FP32(g) (qf + (g) * D)
#define Q_BF16(g) ((const uint16_t *)qraw + (g) * D)
#define SCORERS(size)                                                                          \
    SCORER(T512, score_f32_##size, size, float, dot_f32, Q_FP32)                               \
    SCORER(T512, score_widened_##size, size, uint16_t, dot_widened, Q_FP32)                    \
    SCORER(T512BF, score_bf16_##size, size, uint16_t, dot_bf16, Q_BF16)
SCORERS(64)
SCORERS(128)
SCORERS(256)

/* A sum_fn for head size DD: 4 query heads and 64 of D at a time in 16 registers, each visible
 * key's row read (and widened) once per such block, rows 16 keys ahead fetched meanwhile */
#define SUMMER(name, DD, ELEM, LOAD)                                                           \
    T512 static void name(const void *v_cache, const int64_t *slots, const uint8_t *ok, int L, \
                          int Hkv, int h, int G, const float *w, float *acc) {                 \
        const int D = DD;                                                                      \
        const ELEM *vc = (const ELEM *)v_cache;                                                \
        for (int g0 = 0; g0 < G; g0 += 4) {                                                    \
            const int n = G - g0 < 4 ? G - g0 : 4;                                             \
            for (int c = 0; c < D; c += 64) {                                                  \
                __m512 a[4][4];                                                                \
                for (int i = 0; i < 4; i++)                                                    \
                    for (int k = 0; k < 4; k++) a[i][k] = _mm512_setzero_ps();                 \
                for (int l = 0; l < L; l++) {                                                  \
                    if (l + 16 < L && c == 0 && g0 == 0 && !(ok && !ok[l + 16]))               \
                        prefetch_row(vc + (slots[l + 16] * Hkv + h) * D, D,                    \
                                     sizeof(ELEM) == 2, 0);                                    \
                    if (ok && !ok[l]) continue;                                                \
                    const ELEM *row = vc + (slots[l] * Hkv + h) * D + c;                       \
                    __m512 v0 = LOAD(row), v1 = LOAD(row + 16), v2 = LOAD(row + 32),           \
                           v3 = LOAD(row + 48);                                                \
                    for (int i = 0; i < n; i++) {                                              \
                        __m512 p = _mm512_set1_ps(w[(g0 + i) * L + l]);                        \
                        a[i][0] = _mm512_fmadd_ps(p, v0, a[i][0]);                             \
                        a[i][1] = _mm512_fmadd_ps(p, v1, a[i][1]);                             \
                        a[i][2] = _mm512_fmadd_ps(p, v2, a[i][2]);                             \
                        a[i][3] = _mm512_fmadd_ps(p, v3, a[i][3]);                             \
                    }                                                                          \
                }                                                                              \
                for (int i = 0; i < n; i++)                                                    \
                    for (int k = 0; k < 4; k++)                                                \
                        _mm512_storeu_ps(acc + (g0 + i) * D + c + 16 * k, a[i][k]);            \
            }                                                                                  \
        }                                                                                      \
    }
SUMMER(sum_f32_64, 64, float, _mm512_loadu_ps)
SUMMER(sum_f32_128, 128, float, _mm512_loadu_ps)
SUMMER(sum_f32_256, 256, float, _mm512_loadu_ps)
SUMMER(sum_bf16_64, 64, uint16_t, widen_bf16)
SUMMER(sum_bf16_128, 128, uint16_t, widen_bf16)
SUMMER(sum_bf16_256, 256, uint16_t, widen_bf16)

PA_HIDDEN sum_fn pa_summer_avx512(int D, int bf16) {
    if (D == 64) return bf16 ? sum_bf16_64 : sum_f32_64;
    if (D == 128) return bf16 ? sum_bf16_128 : sum_f32_128;
    if (D == 256) return bf16 ? sum_bf16_256 : sum_f32_256;
    return NULL;
}

/* the AVX-512 scorer for head size D (none for other sizes: BODY's loop) */
PA_HIDDEN score_fn pa_scorer_avx512(int D, int bf16) {
    static int has_bf16 = -1;
    if (has_bf16 < 0) has_bf16 = wo_has_bf16();
#define PICK(size)                                                                             \
    if (D == size) return !bf16 ? score_f32_##size : has_bf16 ? score_bf16_##size            \
                                                              : score_widened_##size;
    PICK(64) PICK(128) PICK(256)
#undef PICK
    return NULL;
}
#else
PA_HIDDEN score_fn pa_scorer_avx512(int D, int bf16) {
    (void)D, (void)bf16;
    return NULL;
}

PA_HIDDEN sum_fn pa_summer_avx512(int D, int bf16) {
    (void)D, (void)bf16;
    return NULL;
}
#endif
