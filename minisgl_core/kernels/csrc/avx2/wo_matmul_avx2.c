/* The weight-only matmul's rows on AVX2 + FMA: 8 lanes (portable/wo_matmul.c dispatches). */
#include "../portable/wo_shared.h"

#ifdef HAVE_X86
#include <immintrin.h>

#define T2 __attribute__((target("avx2,fma,f16c")))
#define INL2 static inline __attribute__((always_inline, target("avx2,fma,f16c")))

INL2 float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* nt (1..TILE) rows of x against one int8 weight row; constant nt at each call site */
INL2 void i8_tile_avx2(const float *x, int in, const int8_t *w, float s, float *y, int out,
                       const int nt) {
    __m256 a[TILE], b[TILE];
    for (int t = 0; t < nt; t++) a[t] = b[t] = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= in; i += 16) {
        wo_fetch_ahead((const uint8_t *)w + i + PREFETCH_BYTES, 1);
        __m128i raw = _mm_loadu_si128((const __m128i *)(w + i));
        __m256 w0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(raw));
        __m256 w1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(raw, 8)));
        for (int t = 0; t < nt; t++) {
            const float *xp = x + (int64_t)t * in + i;
            a[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xp), a[t]);
            b[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xp + 8), b[t]);
        }
    }
    for (int t = 0; t < nt; t++) {
        const float *xt = x + (int64_t)t * in;
        float acc = hsum256(_mm256_add_ps(a[t], b[t]));
        for (int k = i; k < in; k++) acc += xt[k] * (float)w[k];
        y[(int64_t)t * out] = acc * s;
    }
}

WO_HIDDEN T2 void wo_i8_row_avx2(const float *x, int T, int in, const int8_t *w, float s,
                                 float *y, int out) {
    int t = 0;
    for (; t + TILE <= T; t += TILE)
        i8_tile_avx2(x + (int64_t)t * in, in, w, s, y + (int64_t)t * out, out, TILE);
    switch (T - t) {
    case 1: i8_tile_avx2(x + (int64_t)t * in, in, w, s, y + (int64_t)t * out, out, 1); break;
    case 2: i8_tile_avx2(x + (int64_t)t * in, in, w, s, y + (int64_t)t * out, out, 2); break;
    case 3: i8_tile_avx2(x + (int64_t)t * in, in, w, s, y + (int64_t)t * out, out, 3); break;
    }
}

INL2 void i4_tile_avx2(const float *x, int in, const uint8_t *w, const uint16_t *sc,
                       const uint16_t *mn, float *y, int out, const int nt) {
    __m256 a[TILE], b[TILE];
    for (int t = 0; t < nt; t++) a[t] = b[t] = _mm256_setzero_ps();
    const __m128i low4 = _mm_set1_epi8(0x0f);
    int full = in / GROUP, g = 0;
    for (; g < full; g++) {
        __m128i raw = _mm_loadu_si128((const __m128i *)(w + g * 16));
        __m128i lo = _mm_and_si128(raw, low4), hi = _mm_and_si128(_mm_srli_epi16(raw, 4), low4);
        __m256 s = _mm256_set1_ps(_cvtsh_ss(sc[g])), m = _mm256_set1_ps(_cvtsh_ss(mn[g]));
        /* dequantized once, used by every row of the tile: elements 0-7, 8-15, 16-23, 24-31 */
        __m256 w0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo)), s, m);
        __m256 w1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8))), s, m);
        __m256 w2 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi)), s, m);
        __m256 w3 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8))), s, m);
        for (int t = 0; t < nt; t++) {
            const float *xp = x + (int64_t)t * in + g * GROUP;
            a[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xp), a[t]);
            b[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xp + 8), b[t]);
            a[t] = _mm256_fmadd_ps(w2, _mm256_loadu_ps(xp + 16), a[t]);
            b[t] = _mm256_fmadd_ps(w3, _mm256_loadu_ps(xp + 24), b[t]);
        }
    }
    for (int t = 0; t < nt; t++) {
        const float *xt = x + (int64_t)t * in;
        float acc = hsum256(_mm256_add_ps(a[t], b[t]));
        if (g * GROUP < in) {  /* a last, partial group */
            float s = _cvtsh_ss(sc[g]), m = _cvtsh_ss(mn[g]);
            for (int j = 0; j < in - g * GROUP; j++)
                acc += xt[g * GROUP + j] * (nibble(w + g * 16, j) * s + m);
        }
        y[(int64_t)t * out] = acc;
    }
}

WO_HIDDEN T2 void wo_i4_row_avx2(const float *x, int T, int in, const uint8_t *w,
                                 const uint16_t *sc, const uint16_t *mn, float *y, int out) {
    int t = 0;
    for (; t + TILE <= T; t += TILE) i4_tile_avx2(x + (int64_t)t * in, in, w, sc, mn, y + (int64_t)t * out, out, TILE);
    switch (T - t) {
    case 1: i4_tile_avx2(x + (int64_t)t * in, in, w, sc, mn, y + (int64_t)t * out, out, 1); break;
    case 2: i4_tile_avx2(x + (int64_t)t * in, in, w, sc, mn, y + (int64_t)t * out, out, 2); break;
    case 3: i4_tile_avx2(x + (int64_t)t * in, in, w, sc, mn, y + (int64_t)t * out, out, 3); break;
    }
}
#endif
