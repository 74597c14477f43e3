/* int4 and int8 weights in 16-output panels against int8 inputs on AVX512-VNNI (int4 also on
 * AVX2: avx2/wo_panels_avx2.c), for every row count: the layout of ggml's repacked CPU weights,
 * built once at load (wo_panels.py).
 *
 * Panel p holds outputs 16p..16p+15 ([panels][groups][4][16][4] bytes): for group g, dword k of
 * lane l is output 16p + l's bytes 4k..4k+3 of the group (ggml's Q4_1 order: element j in the
 * low nibble of byte j, element j + 16 in its high one), so one AND gives the 16 outputs'
 * inputs 4k..4k+3 and a shift and an AND their inputs 16+4k..16+4k+3, each the u8 operand of a
 * vpdpbusd against 4 input bytes broadcast. Scales and mins are fp16 [panels][groups][16] (no
 * mins for Q4_0's symmetric weights, whose min is -8 x the scale: 10% fewer bytes). So
 * each weight byte is loaded once a call, whatever the rows, nothing is unpacked to memory, and
 * the 16 sums of a panel land in one vector's lanes: no horizontal sums. Each row of inputs is
 * rounded once a call, in groups of 32: d = max|x| / 127, qx = round(x / d) as int8, so a
 * group's product with a weight group (W = nib s + m) is s d sum(nib qx) + m d sum(qx)
 * (wo_q8_rows, in avx2/wo_panels_avx2.c).
 */
#include "../minisgl_kernels.h"
#include "../portable/wo_shared.h"
#include <stdlib.h>

#include "../cpu_features.h"

#define RB 8  /* input rows a register block */

#ifdef HAVE_X86
#include <immintrin.h>

#define TP __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")))
#define INLP static inline __attribute__((always_inline, \
    target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")))

static int has_vnni(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && cpu_feature_allowed("avx512_vnni");
}

/* rows t0..t0+nr of y at outputs o0..o0+n: the sums, plus the residual, in fp32 or rounded
 * once to bf16 */
INLP void store_rows(const __m512 *acc, int t0, int nr, int o0, int n, int out, void *y,
                     int y_bf16, const void *residual) {
    const __mmask16 live = n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
    for (int r = 0; r < nr; r++) {
        int64_t at = (int64_t)(t0 + r) * out + o0;
        if (y_bf16) {
            float v[16];
            _mm512_storeu_ps(v, acc[r]);
            wo_store_row(v, n, at, y, 1, residual);
        } else {
            __m512 v = acc[r];
            if (residual)
                v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(live, (const float *)residual + at));
            _mm512_mask_storeu_ps((float *)y + at, live, v);
        }
    }
}

/* 4 input bytes of row r at quad k of group g, broadcast */
#define XQ(r, k) _mm512_set1_epi32(*(const int32_t *)(xq + ((size_t)(t0 + (r)) * groups + g) \
                                                      * 32 + 4 * (k)))

/* nr (1..RB) rows from t0 over panel pw; the 16 sums stored at outputs o0.. (n of them live).
 * Up to 4 rows keep two chains of sums a row (the even and the odd quads), so one row is not
 * held up by vpdpbusd's latency. */
INLP void panel_rows(const uint8_t *pw, const uint16_t *ps, const uint16_t *pm, int groups,
                     const int8_t *xq, const float *d, const float *ds, int t0, const int nr,
                     int o0, int n, int out, void *y, int y_bf16, const void *residual) {
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    const int two = nr <= 4;
    __m512 acc[RB];
    for (int r = 0; r < nr; r++) acc[r] = _mm512_setzero_ps();
    for (int g = 0; g < groups; g++) {
        const uint8_t *wg = pw + (size_t)g * 256;
        wo_fetch_ahead(wg + PREFETCH_BYTES, 4);
        __m512i a[RB], b[RB];
        for (int r = 0; r < nr; r++) a[r] = b[r] = _mm512_setzero_si512();
        for (int k = 0; k < 4; k++) {
            __m512i raw = _mm512_loadu_si512((const void *)(wg + 64 * k));
            __m512i lo = _mm512_and_si512(raw, low4);
            __m512i hi = _mm512_and_si512(_mm512_srli_epi32(raw, 4), low4);
            for (int r = 0; r < nr; r++) {
                a[r] = _mm512_dpbusd_epi32(a[r], lo, XQ(r, k));
                if (two) b[r] = _mm512_dpbusd_epi32(b[r], hi, XQ(r, k + 4));
                else a[r] = _mm512_dpbusd_epi32(a[r], hi, XQ(r, k + 4));
            }
        }
        __m512 s = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(ps + (size_t)g * 16)));
        __m512 m = pm ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(pm + (size_t)g * 16)))
                      : _mm512_mul_ps(s, _mm512_set1_ps(-8.0f));  /* Q4_0: min = -8 scale */
        for (int r = 0; r < nr; r++) {
            size_t at = (size_t)(t0 + r) * groups + g;
            __m512i sums = two ? _mm512_add_epi32(a[r], b[r]) : a[r];
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums),
                                     _mm512_mul_ps(s, _mm512_set1_ps(d[at])), acc[r]);
            acc[r] = _mm512_fmadd_ps(m, _mm512_set1_ps(ds[at]), acc[r]);
        }
    }
    store_rows(acc, t0, nr, o0, n, out, y, y_bf16, residual);
}
#undef XQ

/* The int8 panels: [panels][in / 4][16][4] bytes, w + 128 as u8 (vpdpbusd's unsigned side), a
 * 32-input group of a panel in 8 vectors; scale fp32 [panels][16] per output. The offset comes
 * back as 128 d sum(qx) per group, and the output's scale applies once at the end:
 * y = s (sum_g d_g sum(u qx) - 128 sum_g d_g sum(qx)). ``pairs``: rows 2i and 2i + 1 of xq are
 * one input's two parts (wo_q8_rows_split), their sums added into output row t0 / 2 + i. */
INLP void panel_rows_i8(const uint8_t *pw, const float *ps, int groups, const int8_t *xq,
                        const float *d, const float *ds, int t0, const int nr, int o0, int n,
                        int out, void *y, int y_bf16, const void *residual, const int pairs) {
    __m512 acc[RB];
    float offset[RB];
    for (int r = 0; r < nr; r++) {
        acc[r] = _mm512_setzero_ps();
        offset[r] = 0.0f;
        for (int g = 0; g < groups; g++) offset[r] += ds[(size_t)(t0 + r) * groups + g];
    }
    for (int g = 0; g < groups; g++) {
        const uint8_t *wg = pw + (size_t)g * 512;
        wo_fetch_ahead(wg + PREFETCH_BYTES, 8);
        __m512i a[RB], b[RB];
        for (int r = 0; r < nr; r++) a[r] = b[r] = _mm512_setzero_si512();
        for (int k = 0; k < 8; k += 2) {
            __m512i w0 = _mm512_loadu_si512((const void *)(wg + 64 * k));
            __m512i w1 = _mm512_loadu_si512((const void *)(wg + 64 * (k + 1)));
            for (int r = 0; r < nr; r++) {
                const int8_t *xr = xq + ((size_t)(t0 + r) * groups + g) * 32 + 4 * k;
                a[r] = _mm512_dpbusd_epi32(a[r], w0, _mm512_set1_epi32(*(const int32_t *)xr));
                b[r] = _mm512_dpbusd_epi32(b[r], w1,
                                           _mm512_set1_epi32(*(const int32_t *)(xr + 4)));
            }
        }
        for (int r = 0; r < nr; r++)
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a[r], b[r])),
                                     _mm512_set1_ps(d[(size_t)(t0 + r) * groups + g]), acc[r]);
    }
    __m512 s = _mm512_loadu_ps(ps);
    for (int r = 0; r < nr; r++)
        acc[r] = _mm512_mul_ps(s, _mm512_sub_ps(acc[r], _mm512_set1_ps(128.0f * offset[r])));
    if (!pairs) {
        store_rows(acc, t0, nr, o0, n, out, y, y_bf16, residual);
        return;
    }
    for (int r = 0; r < nr / 2; r++) acc[r] = _mm512_add_ps(acc[2 * r], acc[2 * r + 1]);
    store_rows(acc, t0 / 2, nr / 2, o0, n, out, y, y_bf16, residual);
}

/* wo_int4_panels (``int4``; mn NULL: Q4_0's, min = -8 scale) or wo_int8_panels (scale fp32;
 * ``split``: each row in two rounded parts, 2T rows of xq) once the CPU is known to run it (no
 * AVX-512 instruction may run before) */
TP static int run(const void *x, int x_bf16, int T, int in, const uint8_t *q, const void *scale,
                  int int4, const uint16_t *mn, int out, void *y, int y_bf16,
                  const void *residual, int threads, int split) {
    int groups = (in + GROUP - 1) / GROUP, panels = (out + 15) / 16;
    float *d, *ds;
    int8_t *xq = (split ? wo_q8_rows_split : wo_q8_rows)(x, x_bf16, T, in, groups, &d, &ds);
    if (xq == NULL) return -1;
    wo_schedule(T);  /* by the rows asked for: one row in two parts is one row */
    if (split) T *= 2;  /* the rows of xq: RB is even, so a block never parts a pair */
#pragma omp parallel for schedule(runtime) num_threads(threads)
    for (int p = 0; p < panels; p++) {
        int o0 = 16 * p, cols = out - o0 < 16 ? out - o0 : 16;
        for (int t0 = 0; t0 < T; t0 += RB) {
            int nr = T - t0 < RB ? T - t0 : RB;
            if (!int4) {
                const uint8_t *pw = q + (size_t)p * groups * 512;
                const float *ps = (const float *)scale + (size_t)p * 16;
#define ROWS(k) case k: panel_rows_i8(pw, ps, groups, xq, d, ds, t0, k, o0, cols, out, y, \
                                      y_bf16, residual, 0); break;
#define PAIRS(k) case k: panel_rows_i8(pw, ps, groups, xq, d, ds, t0, k, o0, cols, out, y, \
                                       y_bf16, residual, 1); break;
                if (split) {  /* nr is even */
                    switch (nr) { PAIRS(2) PAIRS(4) PAIRS(6) PAIRS(8) }
                    continue;
                }
                switch (nr) {  /* a constant row count at each call */
                ROWS(1) ROWS(2) ROWS(3) ROWS(4) ROWS(5) ROWS(6) ROWS(7) ROWS(8)
                }
#undef PAIRS
#undef ROWS
                continue;
            }
            const uint8_t *pw = q + (size_t)p * groups * 256;
            const uint16_t *ps = (const uint16_t *)scale + (size_t)p * groups * 16;
            const uint16_t *pm = mn ? mn + (size_t)p * groups * 16 : NULL;
            switch (nr) {
#define ROWS(k) case k: panel_rows(pw, ps, pm, groups, xq, d, ds, t0, k, o0, cols, out, y, \
                                   y_bf16, residual); break;
            ROWS(1) ROWS(2) ROWS(3) ROWS(4) ROWS(5) ROWS(6) ROWS(7) ROWS(8)
#undef ROWS
            }
        }
    }
    free(xq);
    return 0;
}

static int vnni(void) {
    static int has = -1;
    if (has < 0) has = has_vnni();
    return has;
}

int wo_int4_panels(const void *x, int x_bf16, int T, int in, const uint8_t *q,
                   const uint16_t *scale, const uint16_t *mn, int out, void *y, int y_bf16,
                   const void *residual, int threads) {
    if (vnni())
        return run(x, x_bf16, T, in, q, scale, 1, mn, out, y, y_bf16, residual, threads, 0);
    return wo_int4_panels_avx2(x, x_bf16, T, in, q, scale, mn, out, y, y_bf16, residual, threads);
}

int wo_int8_panels(const void *x, int x_bf16, int T, int in, const uint8_t *q,
                   const float *scale, int out, void *y, int y_bf16, const void *residual,
                   int threads) {
    return vnni() ? run(x, x_bf16, T, in, q, scale, 0, NULL, out, y, y_bf16, residual, threads, 0)
                  : -1;
}

int wo_int8_panels_split(const void *x, int x_bf16, int T, int in, const uint8_t *q,
                         const float *scale, int out, void *y, int y_bf16,
                         const void *residual, int threads) {
    return vnni() ? run(x, x_bf16, T, in, q, scale, 0, NULL, out, y, y_bf16, residual, threads, 1)
                  : -1;
}
#else
int wo_int4_panels(const void *x, int x_bf16, int T, int in, const uint8_t *q,
                   const uint16_t *scale, const uint16_t *mn, int out, void *y, int y_bf16,
                   const void *residual, int threads) {
    (void)x; (void)x_bf16; (void)T; (void)in; (void)q; (void)scale; (void)mn; (void)out;
    (void)y; (void)y_bf16; (void)residual; (void)threads;
    return -1;
}

int wo_int8_panels(const void *x, int x_bf16, int T, int in, const uint8_t *q,
                   const float *scale, int out, void *y, int y_bf16, const void *residual,
                   int threads) {
    (void)x; (void)x_bf16; (void)T; (void)in; (void)q; (void)scale; (void)out; (void)y;
    (void)y_bf16; (void)residual; (void)threads;
    return -1;
}

int wo_int8_panels_split(const void *x, int x_bf16, int T, int in, const uint8_t *q,
                         const float *scale, int out, void *y, int y_bf16,
                         const void *residual, int threads) {
    return wo_int8_panels(x, x_bf16, T, in, q, scale, out, y, y_bf16, residual, threads);
}
#endif
