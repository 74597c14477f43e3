/* int4 panels (avx512/wo_panels.c's layout) against int8 inputs on AVX2, for CPUs without
 * AVX512-VNNI: each 64-byte vector of a group's panel is two halves of 8 outputs; vpmaddubsw
 * multiplies a half's nibbles by 4 input bytes broadcast and sums pairs (at most 2 x 15 x 127:
 * no saturation), vpmaddwd sums the pairs' pairs, so each dword lane holds one output's 4
 * products, as vpdpbusd gives them. Also the rounding of the inputs that both read
 * (wo_q8_rows): a row's groups of 32 in order, as int8, with each group's d and d sum(q).
 */
#include "../portable/wo_shared.h"
#include <stdlib.h>

#include "../cpu_features.h"

#define RB 4  /* input rows a register block: 2 halves x (2 int + 1 fp32) accumulators a row */

#ifdef HAVE_X86
#include <immintrin.h>

#define T2 __attribute__((target("avx2,fma,f16c")))
#define INL2 static inline __attribute__((always_inline, target("avx2,fma,f16c")))

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

/* one row of x -> its groups' 32 int8 inputs in order, d = max|x| / 127 and d sum(q); rounded
 * to nearest even, as torch.round does (wo_panels.py's q8_rows) */
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

/* T rows of x rounded, in one buffer: q [T][groups][32] int8, then d and ds [T][groups] (set
 * to point into it); NULL without memory. The caller frees the returned pointer. */
WO_HIDDEN T2 int8_t *wo_q8_rows(const void *x, int x_bf16, int T, int in, int groups, float **d,
                                float **ds) {
    size_t n = (size_t)T * groups;
    int8_t *q = malloc(n * (32 + 2 * sizeof(float)));
    if (q == NULL) return NULL;
    *d = (float *)(q + n * 32);
    *ds = *d + n;
    for (int t = 0; t < T; t++)
        prep_row((const char *)x + (size_t)t * in * (x_bf16 ? 2 : 4), x_bf16, in, groups,
                 q + (size_t)t * groups * 32, *d + (size_t)t * groups, *ds + (size_t)t * groups);
    return q;
}

/* T rows of x each split in two rounded rows, hi and lo, in one buffer as wo_q8_rows lays out
 * 2T rows: row 2t is x_t rounded, row 2t + 1 what that left (x_t - qx d, in fp32) rounded the
 * same way, so hi + lo is x_t within max|x| / 64516 a group (lo's d is at most d / 254) */
WO_HIDDEN T2 int8_t *wo_q8_rows_split(const void *x, int x_bf16, int T, int in, int groups,
                                      float **d, float **ds) {
    size_t n = (size_t)2 * T * groups;
    int8_t *q = malloc(n * (32 + 2 * sizeof(float)) + (size_t)in * sizeof(float));
    if (q == NULL) return NULL;
    *d = (float *)(q + n * 32);
    *ds = *d + n;
    float *rest = *ds + n;  /* [in]: what the hi row left of one row */
    for (int t = 0; t < T; t++) {
        const char *row = (const char *)x + (size_t)t * in * (x_bf16 ? 2 : 4);
        size_t hi = (size_t)2 * t * groups, lo = hi + groups;
        prep_row(row, x_bf16, in, groups, q + hi * 32, *d + hi, *ds + hi);
        for (int i = 0; i < in; i++) {
            float v;
            if (x_bf16) {
                union { uint32_t u; float f; } b = {.u = (uint32_t)((const uint16_t *)row)[i] << 16};
                v = b.f;
            } else {
                v = ((const float *)row)[i];
            }
            rest[i] = v - (float)q[hi * 32 + i] * (*d)[hi + i / GROUP];
        }
        prep_row(rest, 0, in, groups, q + lo * 32, *d + lo, *ds + lo);
    }
    return q;
}

/* the 8 int32 products-of-four of nibbles w (8 outputs x 4 bytes) and 4 input bytes x */
INL2 __m256i dot4(__m256i w, __m256i x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
}

INL2 void panel_rows(const uint8_t *pw, const uint16_t *ps, const uint16_t *pm, int groups,
                     const int8_t *xq, const float *d, const float *ds, int t0, const int nr,
                     int o0, int n, int out, void *y, int y_bf16, const void *residual) {
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    __m256 acc[RB][2];
    for (int r = 0; r < nr; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int g = 0; g < groups; g++) {
        const uint8_t *wg = pw + (size_t)g * 256;
        wo_fetch_ahead(wg + PREFETCH_BYTES, 4);
        __m256i sums[RB][2];
        for (int r = 0; r < nr; r++) sums[r][0] = sums[r][1] = _mm256_setzero_si256();
        for (int k = 0; k < 4; k++) {
            for (int h = 0; h < 2; h++) {  /* outputs 8h .. 8h + 7 */
                __m256i raw = _mm256_loadu_si256((const __m256i *)(wg + 64 * k + 32 * h));
                __m256i lo = _mm256_and_si256(raw, low4);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi32(raw, 4), low4);
                for (int r = 0; r < nr; r++) {
                    const int8_t *xr = xq + ((size_t)(t0 + r) * groups + g) * 32;
                    __m256i a = dot4(lo, _mm256_set1_epi32(*(const int32_t *)(xr + 4 * k)));
                    __m256i b = dot4(hi, _mm256_set1_epi32(*(const int32_t *)(xr + 16 + 4 * k)));
                    sums[r][h] = _mm256_add_epi32(sums[r][h], _mm256_add_epi32(a, b));
                }
            }
        }
        for (int h = 0; h < 2; h++) {
            __m256 s = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(ps + (size_t)g * 16 + 8 * h)));
            __m256 m = pm ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(pm + g * 16 + 8 * h)))
                          : _mm256_mul_ps(s, _mm256_set1_ps(-8.0f));  /* Q4_0: min = -8 scale */
            for (int r = 0; r < nr; r++) {
                size_t at = (size_t)(t0 + r) * groups + g;
                acc[r][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[r][h]),
                                            _mm256_mul_ps(s, _mm256_set1_ps(d[at])), acc[r][h]);
                acc[r][h] = _mm256_fmadd_ps(m, _mm256_set1_ps(ds[at]), acc[r][h]);
            }
        }
    }
    for (int r = 0; r < nr; r++) {
        float v[16];
        _mm256_storeu_ps(v, acc[r][0]);
        _mm256_storeu_ps(v + 8, acc[r][1]);
        wo_store_row(v, n, (int64_t)(t0 + r) * out + o0, y, y_bf16, residual);
    }
}

WO_HIDDEN T2 int wo_int4_panels_avx2(const void *x, int x_bf16, int T, int in, const uint8_t *q,
                                     const uint16_t *scale, const uint16_t *mn, int out, void *y,
                                     int y_bf16, const void *residual, int threads) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
        !__builtin_cpu_supports("f16c") || !cpu_feature_allowed("avx2"))
        return -1;
    int groups = (in + GROUP - 1) / GROUP, panels = (out + 15) / 16;
    float *d, *ds;
    int8_t *xq = wo_q8_rows(x, x_bf16, T, in, groups, &d, &ds);
    if (xq == NULL) return -1;
    wo_schedule(T);
#pragma omp parallel for schedule(runtime) num_threads(threads)
    for (int p = 0; p < panels; p++) {
        const uint8_t *pw = q + (size_t)p * groups * 256;
        const uint16_t *ps = scale + (size_t)p * groups * 16;
        const uint16_t *pm = mn ? mn + (size_t)p * groups * 16 : NULL;
        int o0 = 16 * p, cols = out - o0 < 16 ? out - o0 : 16;
        for (int t0 = 0; t0 < T; t0 += RB) {
            switch (T - t0 < RB ? T - t0 : RB) {  /* a constant row count at each call */
#define ROWS(k) case k: panel_rows(pw, ps, pm, groups, xq, d, ds, t0, k, o0, cols, out, y, \
                                   y_bf16, residual); break;
            ROWS(1) ROWS(2) ROWS(3) ROWS(4)
#undef ROWS
            }
        }
    }
    free(xq);
    return 0;
}
#endif
