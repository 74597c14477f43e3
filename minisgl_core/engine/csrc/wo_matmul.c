/* Weight-only int8 / int4 matmul on the CPU: y[T, out] = x[T, in] @ dequant(W)^T, fp32 x and y.
 *
 * int8: W[o, i] = q[o, i] * scale[o]     (q int8 [out, in], scale fp32 [out]).
 * int4: groups of 32 inputs per output row; W[o, 32 g + j] = nib * scale[o, g] + min[o, g], where
 *       byte j (0..15) of a group's 16 bytes holds element j in its low nibble and element j + 16
 *       in its high one (ggml's Q4_1 order); scale and min are fp16 [out, groups].
 * Each output row's weights are read from memory once per call: every TILE rows of x pass over
 * that row while it sits in L1. Output rows are split across threads with OpenMP. isa: 0 plain C,
 * 1 AVX2+FMA, 2 AVX-512; the caller picks (wo_best_isa says what the CPU runs).
 */
#include <stdint.h>

#define TILE 4
#define GROUP 32

#if defined(__x86_64__)
#include <immintrin.h>
#define HAVE_X86 1
#endif

static inline float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    union { uint32_t u; float f; } v;
    if (exp == 0) {  /* zero or subnormal */
        v.f = (float)man * (1.0f / 16777216.0f);
        v.u |= sign;
        return v.f;
    }
    v.u = sign | (exp == 31 ? 0x7f800000u | (man << 13) : ((exp + 112) << 23) | (man << 13));
    return v.f;
}

static inline float nibble(const uint8_t *grp, int j) {
    return (float)(j < 16 ? grp[j] & 15 : grp[j - 16] >> 4);
}

/* ---- plain C ---- */

static void i8_row_c(const float *x, int T, int in, const int8_t *w, float s, float *y, int out) {
    for (int t = 0; t < T; t++) {
        const float *xt = x + (int64_t)t * in;
        float acc = 0.0f;
        for (int i = 0; i < in; i++) acc += xt[i] * (float)w[i];
        y[(int64_t)t * out] = acc * s;
    }
}

static void i4_row_c(const float *x, int T, int in, const uint8_t *w, const uint16_t *sc,
                     const uint16_t *mn, float *y, int out) {
    int groups = (in + GROUP - 1) / GROUP;
    for (int t = 0; t < T; t++) {
        const float *xt = x + (int64_t)t * in;
        float acc = 0.0f;
        for (int g = 0; g < groups; g++) {
            float s = half_to_float(sc[g]), m = half_to_float(mn[g]);
            int n = in - g * GROUP < GROUP ? in - g * GROUP : GROUP;
            for (int j = 0; j < n; j++) acc += xt[g * GROUP + j] * (nibble(w + g * 16, j) * s + m);
        }
        y[(int64_t)t * out] = acc;
    }
}

#ifdef HAVE_X86
/* ---- AVX2 + FMA: 8 lanes ---- */

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

T2 static void i8_row_avx2(const float *x, int T, int in, const int8_t *w, float s, float *y,
                           int out) {
    int t = 0;
    for (; t + TILE <= T; t += TILE) i8_tile_avx2(x + (int64_t)t * in, in, w, s, y + (int64_t)t * out, out, TILE);
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

T2 static void i4_row_avx2(const float *x, int T, int in, const uint8_t *w, const uint16_t *sc,
                           const uint16_t *mn, float *y, int out) {
    int t = 0;
    for (; t + TILE <= T; t += TILE) i4_tile_avx2(x + (int64_t)t * in, in, w, sc, mn, y + (int64_t)t * out, out, TILE);
    switch (T - t) {
    case 1: i4_tile_avx2(x + (int64_t)t * in, in, w, sc, mn, y + (int64_t)t * out, out, 1); break;
    case 2: i4_tile_avx2(x + (int64_t)t * in, in, w, sc, mn, y + (int64_t)t * out, out, 2); break;
    case 3: i4_tile_avx2(x + (int64_t)t * in, in, w, sc, mn, y + (int64_t)t * out, out, 3); break;
    }
}

/* ---- AVX-512: 16 lanes ---- */

#define T5 __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))
#define INL5 static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,fma,f16c")))

INL5 void i8_tile_avx512(const float *x, int in, const int8_t *w, float s, float *y, int out,
                         const int nt) {
    __m512 a[TILE], b[TILE];
    for (int t = 0; t < nt; t++) a[t] = b[t] = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= in; i += 32) {
        __m512 w0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(w + i))));
        __m512 w1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(w + i + 16))));
        for (int t = 0; t < nt; t++) {
            const float *xp = x + (int64_t)t * in + i;
            a[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xp), a[t]);
            b[t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xp + 16), b[t]);
        }
    }
    if (i < in) {  /* the last 1-31 inputs, masked: no scalar tail */
        int n0 = in - i < 16 ? in - i : 16, n1 = in - i - n0;
        __mmask16 m0 = (__mmask16)((1u << n0) - 1), m1 = (__mmask16)((1u << n1) - 1);
        __m512 w0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m0, w + i)));
        __m512 w1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m1, w + i + 16)));
        for (int t = 0; t < nt; t++) {
            const float *xp = x + (int64_t)t * in + i;
            a[t] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m0, xp), a[t]);
            b[t] = _mm512_fmadd_ps(w1, _mm512_maskz_loadu_ps(m1, xp + 16), b[t]);
        }
    }
    for (int t = 0; t < nt; t++) y[(int64_t)t * out] = _mm512_reduce_add_ps(_mm512_add_ps(a[t], b[t])) * s;
}

T5 static void i8_row_avx512(const float *x, int T, int in, const int8_t *w, float s, float *y,
                             int out) {
    int t = 0;
    for (; t + TILE <= T; t += TILE) i8_tile_avx512(x + (int64_t)t * in, in, w, s, y + (int64_t)t * out, out, TILE);
    switch (T - t) {
    case 1: i8_tile_avx512(x + (int64_t)t * in, in, w, s, y + (int64_t)t * out, out, 1); break;
    case 2: i8_tile_avx512(x + (int64_t)t * in, in, w, s, y + (int64_t)t * out, out, 2); break;
    case 3: i8_tile_avx512(x + (int64_t)t * in, in, w, s, y + (int64_t)t * out, out, 3); break;
    }
}

INL5 void i4_tile_avx512(const float *x, int in, const uint8_t *w, const uint16_t *sc,
                         const uint16_t *mn, float *y, int out, const int nt) {
    __m512 a[TILE], b[TILE];
    for (int t = 0; t < nt; t++) a[t] = b[t] = _mm512_setzero_ps();
    const __m128i low4 = _mm_set1_epi8(0x0f);
    int full = in / GROUP, g = 0;
    for (; g < full; g++) {
        __m128i raw = _mm_loadu_si128((const __m128i *)(w + g * 16));
        __m128i lo = _mm_and_si128(raw, low4), hi = _mm_and_si128(_mm_srli_epi16(raw, 4), low4);
        __m512 s = _mm512_set1_ps(_cvtsh_ss(sc[g])), m = _mm512_set1_ps(_cvtsh_ss(mn[g]));
        /* dequantized once, used by every row of the tile: elements 0-15, 16-31 */
        __m512 w0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo)), s, m);
        __m512 w1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi)), s, m);
        for (int t = 0; t < nt; t++) {
            const float *xp = x + (int64_t)t * in + g * GROUP;
            a[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xp), a[t]);
            b[t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xp + 16), b[t]);
        }
    }
    for (int t = 0; t < nt; t++) {
        const float *xt = x + (int64_t)t * in;
        float acc = _mm512_reduce_add_ps(_mm512_add_ps(a[t], b[t]));
        if (g * GROUP < in) {  /* a last, partial group */
            float s = _cvtsh_ss(sc[g]), m = _cvtsh_ss(mn[g]);
            for (int j = 0; j < in - g * GROUP; j++)
                acc += xt[g * GROUP + j] * (nibble(w + g * 16, j) * s + m);
        }
        y[(int64_t)t * out] = acc;
    }
}

T5 static void i4_row_avx512(const float *x, int T, int in, const uint8_t *w,
                             const uint16_t *sc, const uint16_t *mn, float *y, int out) {
    int t = 0;
    for (; t + TILE <= T; t += TILE) i4_tile_avx512(x + (int64_t)t * in, in, w, sc, mn, y + (int64_t)t * out, out, TILE);
    switch (T - t) {
    case 1: i4_tile_avx512(x + (int64_t)t * in, in, w, sc, mn, y + (int64_t)t * out, out, 1); break;
    case 2: i4_tile_avx512(x + (int64_t)t * in, in, w, sc, mn, y + (int64_t)t * out, out, 2); break;
    case 3: i4_tile_avx512(x + (int64_t)t * in, in, w, sc, mn, y + (int64_t)t * out, out, 3); break;
    }
}
#endif

int wo_best_isa(void) {
#ifdef HAVE_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        return 2;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
#endif
    return 0;
}

/* isa above what the CPU runs is lowered to what it does (never an illegal instruction) */
static int clamp_isa(int isa) {
    int best = wo_best_isa();
    return isa < 0 || isa > best ? best : isa;
}

void wo_int8(const float *x, int T, int in, const int8_t *q, const float *scale, int out,
             float *y, int threads, int isa) {
    isa = clamp_isa(isa);
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int o = 0; o < out; o++) {
        const int8_t *w = q + (int64_t)o * in;
#ifdef HAVE_X86
        if (isa == 2) { i8_row_avx512(x, T, in, w, scale[o], y + o, out); continue; }
        if (isa == 1) { i8_row_avx2(x, T, in, w, scale[o], y + o, out); continue; }
#endif
        i8_row_c(x, T, in, w, scale[o], y + o, out);
    }
}

void wo_int4(const float *x, int T, int in, const uint8_t *q, const uint16_t *scale,
             const uint16_t *mn, int out, float *y, int threads, int isa) {
    isa = clamp_isa(isa);
    int groups = (in + GROUP - 1) / GROUP;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int o = 0; o < out; o++) {
        const uint8_t *w = q + (int64_t)o * groups * 16;
        const uint16_t *s = scale + (int64_t)o * groups, *m = mn + (int64_t)o * groups;
#ifdef HAVE_X86
        if (isa == 2) { i4_row_avx512(x, T, in, w, s, m, y + o, out); continue; }
        if (isa == 1) { i4_row_avx2(x, T, in, w, s, m, y + o, out); continue; }
#endif
        i4_row_c(x, T, in, w, s, m, y + o, out);
    }
}
