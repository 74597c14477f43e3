/* int4 weights against int8 inputs on AVX2 (avx512/wo_int4_q8.c's rows for hosts without
 * AVX512-VNNI): the same rounding of the inputs, the same sums, by vpmaddubsw (a pair of
 * nib x qx byte products into an int16: at most 2 x 15 x 127, no saturation) and vpmaddwd.
 *
 * A group's 16 weight bytes, split into low and high nibbles, are its 32 elements in order, so
 * the inputs stay in order too: a row is prepared as [groups][32] int8, with d and d sum(qx) of
 * each group in two float arrays.
 */
#include "../portable/wo_matmul.h"
#include <stdlib.h>

#include "../cpu_features.h"

#ifdef HAVE_X86
#include <immintrin.h>

#define T2 __attribute__((target("avx2,fma,f16c")))
#define INL2 static inline __attribute__((always_inline, target("avx2,fma,f16c")))

typedef struct {
    int8_t *q;     /* [T][groups][32] */
    float *d;      /* [T][groups] */
    float *ds;     /* [T][groups]: d sum(qx) */
    int groups;
} Prepared;

/* 8 inputs from p (fp32 or bf16), the first n of them; zeros after */
INL2 __m256 load8(const void *p, int bf16, int n) {
    if (n >= 8) {
        if (!bf16) return _mm256_loadu_ps(p);
        __m128i h = _mm_loadu_si128((const __m128i *)p);
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    float tmp[8] = {0};
    for (int i = 0; i < n; i++) {
        if (!bf16) { tmp[i] = ((const float *)p)[i]; continue; }
        union { uint32_t u; float f; } v = {.u = (uint32_t)((const uint16_t *)p)[i] << 16};
        tmp[i] = v.f;
    }
    return _mm256_loadu_ps(tmp);
}

T2 static void prep_row(const void *x, int bf16, int in, int groups, int8_t *q, float *d,
                        float *ds) {
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int g = 0; g < groups; g++) {
        __m256 v[4];
        __m256 amax = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            int at = g * GROUP + 8 * k, left = in - at;
            v[k] = left > 0 ? load8((const char *)x + (size_t)at * (bf16 ? 2 : 4), bf16, left)
                            : _mm256_setzero_ps();
            amax = _mm256_max_ps(amax, _mm256_and_ps(v[k], sign));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        float top = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
        float inv = top > 0.0f ? 127.0f / top : 0.0f;
        __m256i s = _mm256_setzero_si256();
        __m256i qi[4];
        for (int k = 0; k < 4; k++) {  /* round to nearest even, as the AVX-512 rows do */
            qi[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], _mm256_set1_ps(inv)));
            s = _mm256_add_epi32(s, qi[k]);
        }
        /* 32 int32 -> 32 int8 in order (packs interleave 128-bit lanes: permute back) */
        __m256i p16a = _mm256_packs_epi32(qi[0], qi[1]), p16b = _mm256_packs_epi32(qi[2], qi[3]);
        __m256i p8 = _mm256_packs_epi16(p16a, p16b);
        p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(q + (size_t)g * 32), p8);
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
        d[g] = top / 127.0f;
        ds[g] = d[g] * (float)_mm_cvtsi128_si32(s4);
    }
}

/* T rows of x -> q [T][groups][32], d and ds [T][groups] */
WO_HIDDEN T2 void wo_q8_prep_rows(const void *x, int x_bf16, int T, int in, int groups, int8_t *q,
                                  float *d, float *ds) {
    for (int t = 0; t < T; t++)
        prep_row((const char *)x + (size_t)t * in * (x_bf16 ? 2 : 4), x_bf16, in, groups,
                 q + (size_t)t * groups * 32, d + (size_t)t * groups, ds + (size_t)t * groups);
}

INL2 void q8_tile(const Prepared *p, int t0, const uint8_t *w, const uint16_t *sc,
                  const uint16_t *mn, float *acc, const int nt) {
    const __m128i low4 = _mm_set1_epi8(0x0f);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 dot[TILE];
    float mins[TILE];
    for (int t = 0; t < nt; t++) { dot[t] = _mm256_setzero_ps(); mins[t] = 0.0f; }
    for (int g = 0; g < p->groups; g++) {
        _mm_prefetch((const char *)(w + g * 16 + PREFETCH_BYTES), _MM_HINT_T0);
        __m128i raw = _mm_loadu_si128((const __m128i *)(w + g * 16));
        __m256i nib = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), low4),
                                       _mm_and_si128(raw, low4));  /* elements 0-31 */
        float s = _cvtsh_ss(sc[g]), m = _cvtsh_ss(mn[g]);
        for (int t = 0; t < nt; t++) {
            size_t row = (size_t)(t0 + t) * p->groups + g;
            __m256i xq = _mm256_loadu_si256((const __m256i *)(p->q + row * 32));
            __m256i sums = _mm256_madd_epi16(_mm256_maddubs_epi16(nib, xq), ones);
            dot[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_set1_ps(s * p->d[row]),
                                     dot[t]);
            mins[t] += m * p->ds[row];
        }
    }
    for (int t = 0; t < nt; t++) {
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(dot[t]), _mm256_extractf128_ps(dot[t], 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        acc[t] = _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h))) + mins[t];
    }
}

static inline uint16_t to_bf16(float f) {  /* round to nearest even */
    union { float f; uint32_t u; } v = {.f = f};
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40);  /* NaN */
    return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}

static inline float from_bf16(const void *p, int64_t i) {
    union { uint32_t u; float f; } v = {.u = (uint32_t)((const uint16_t *)p)[i] << 16};
    return v.f;
}

WO_HIDDEN T2 int wo_int4_q8_avx2(const void *x, int x_bf16, int T, int in, const uint8_t *q,
                                 const uint16_t *scale, const uint16_t *mn, int out, void *y,
                                 int y_bf16, const void *residual, int threads) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
        !__builtin_cpu_supports("f16c") || !cpu_feature_allowed("avx2"))
        return -1;
    int groups = (in + GROUP - 1) / GROUP;
    size_t n = (size_t)T * groups;
    Prepared p = {malloc(n * 32), malloc(n * sizeof(float)), malloc(n * sizeof(float)), groups};
    if (p.q == NULL || p.d == NULL || p.ds == NULL) {
        free(p.q); free(p.d); free(p.ds);
        return -1;
    }
    wo_q8_prep_rows(x, x_bf16, T, in, groups, p.q, p.d, p.ds);
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int o = 0; o < out; o++) {
        const uint8_t *w = q + (int64_t)o * groups * 16;
        const uint16_t *s = scale + (int64_t)o * groups, *m = mn + (int64_t)o * groups;
        for (int t0 = 0; t0 < T; t0 += TILE) {
            float acc[TILE];
            switch (T - t0 < TILE ? T - t0 : TILE) {  /* a constant row count at each call */
            case 1: q8_tile(&p, t0, w, s, m, acc, 1); break;
            case 2: q8_tile(&p, t0, w, s, m, acc, 2); break;
            case 3: q8_tile(&p, t0, w, s, m, acc, 3); break;
            default: q8_tile(&p, t0, w, s, m, acc, TILE); break;
            }
            for (int t = t0; t < T && t < t0 + TILE; t++) {
                int64_t at = (int64_t)t * out + o;
                float v = acc[t - t0];
                if (y_bf16) {
                    if (residual) v += from_bf16(residual, at);
                    ((uint16_t *)y)[at] = to_bf16(v);
                } else {
                    ((float *)y)[at] = residual ? v + ((const float *)residual)[at] : v;
                }
            }
        }
    }
    free(p.q); free(p.d); free(p.ds);
    return 0;
}
#endif
