/* Batch-invariant matmul: y[t, o] = sum_i x[t, i] * w[o, i] (+ bias[o]) (+ residual[t, o]).
 *
 * x [T, in], w [out, in] (the HF layout), residual and y [T, out]: all fp32 (bf16 = 0) or all
 * bf16 (bf16 = 1; bias likewise). Each output is one fixed-order dot product in fp32
 * (bi_common.h), plus the bias and the residual in fp32, rounded once to y's dtype: its bits do
 * not depend on T or on the row's place in x. oneDNN and MKL change their blocking, and with it
 * the order of the sum, with the row count; this kernel splits rows and columns, never the sum.
 * Work items are (block of BLOCK output columns, block of ROW_BLOCK rows), shared by OpenMP; in
 * an item, ROWS rows x COLS columns are summed together so that each weight load serves ROWS
 * rows and the COLS independent sums hide each other's latency. The AVX2 and AVX-512 tiles are
 * written with intrinsics (the compiler kept the plain C tile's partial sums on the stack), with
 * the same 16 partial sums per output and the same tree: only the speed differs. A row of x is
 * converted to fp32 once per item; bf16 weights are widened in registers.
 */
#include "../minisgl_kernels.h"
#include "bi_common.h"
#include <stdlib.h>

#define BLOCK 64      /* output columns per work item: their weights stay in cache across rows */
#define ROW_BLOCK 64  /* rows per work item */
#define COLS 4
#define ROWS 4

/* weights o..o+nc-1, elements i..i+width-1 as fp32 (exact) */
BI_INLINE void load_w(const void *w, int64_t o, int c, int in, int i, int width, int bf16,
                      float *dst) {
    if (bf16) {
        const uint16_t *p = (const uint16_t *)w + (o + c) * (int64_t)in + i;
        for (int j = 0; j < width; j++) dst[j] = bi_bf16_to_float(p[j]);
    } else {
        const float *p = (const float *)w + (o + c) * (int64_t)in + i;
        for (int j = 0; j < width; j++) dst[j] = p[j];
    }
}

/* the nr x nc sums of rows xr (fp32) and weight rows o..o+nc-1; every caller passes nr, nc and
 * bf16 as constants, so each combination is its own unrolled, vectorized copy (the arithmetic
 * of one sum is the same in all of them) */
BI_INLINE void tile(const float *const *xr, int nr, const void *w, int64_t o, int nc, int in,
                    int bf16, float out[ROWS][COLS]) {
    float acc[ROWS][COLS][BI_LANES] = {{{0}}};
    int full = in / BI_LANES * BI_LANES;
    for (int i = 0; i < full; i += BI_LANES)
        for (int c = 0; c < nc; c++) {
            float wc[BI_LANES];
            load_w(w, o, c, in, i, BI_LANES, bf16, wc);
            for (int r = 0; r < nr; r++)
                for (int j = 0; j < BI_LANES; j++)
                    acc[r][c][j] = fmaf(xr[r][i + j], wc[j], acc[r][c][j]);
        }
    if (full < in)
        for (int c = 0; c < nc; c++) {
            float wc[BI_LANES];
            load_w(w, o, c, in, full, in - full, bf16, wc);
            for (int r = 0; r < nr; r++)
                for (int j = 0; j < in - full; j++)
                    acc[r][c][j] = fmaf(xr[r][full + j], wc[j], acc[r][c][j]);
        }
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) out[r][c] = bi_tree_sum(acc[r][c]);
}

/* tile() with nr, nc and bf16 as constants */
BI_INLINE void tile_const(const float *const *xr, int nr, const void *w, int64_t o, int nc,
                          int in, int bf16, float out[ROWS][COLS]) {
#define TILE(R, C)                                                                             \
    if (nr == R && nc == C) {                                                                  \
        if (bf16) tile(xr, R, w, o, C, in, 1, out);                                            \
        else tile(xr, R, w, o, C, in, 0, out);                                                 \
        return;                                                                                \
    }
    TILE(4, 4) TILE(3, 4) TILE(2, 4) TILE(1, 4) TILE(4, 1) TILE(3, 1) TILE(2, 1) TILE(1, 1)
#undef TILE
    for (int c = 0; c < nc; c++) { /* 2 or 3 columns: one at a time */
        float one[ROWS][COLS];
#define ONE(R)                                                                                 \
        if (nr == R) {                                                                         \
            if (bf16) tile(xr, R, w, o + c, 1, in, 1, one);                                    \
            else tile(xr, R, w, o + c, 1, in, 0, one);                                         \
        }
        ONE(4) ONE(3) ONE(2) ONE(1)
#undef ONE
        for (int r = 0; r < nr; r++) out[r][c] = one[r][0];
    }
}

#if defined(__x86_64__)
#include <immintrin.h>

#define INL512 static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,fma")))
#define INL256 static inline __attribute__((always_inline, target("avx2,fma")))

/* 16 weights from element ``at`` (those beyond ``m`` read as 0), as fp32 */
INL512 __m512 w16_512(const void *w, int64_t at, int bf16, __mmask16 m) {
    if (bf16) {
        __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)w + at);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    return _mm512_maskz_loadu_ps(m, (const float *)w + at);
}

/* bi_tree_sum of the 16 lanes: j + j+8, then + j+4, + j+2, + j+1 */
INL512 float tree_512(__m512 v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

INL512 void tile_512(const float *const *xr, int nr, const void *w, int64_t o, int nc, int in,
                     int bf16, float out[ROWS][COLS]) {
    __m512 acc[ROWS][COLS];
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) acc[r][c] = _mm512_setzero_ps();
    for (int i = 0; i < in; i += BI_LANES) {
        __mmask16 m = in - i >= BI_LANES ? (__mmask16)0xffff : (__mmask16)((1u << (in - i)) - 1);
        __m512 xv[ROWS];
        for (int r = 0; r < nr; r++) xv[r] = _mm512_maskz_loadu_ps(m, xr[r] + i);
        for (int c = 0; c < nc; c++) {
            __m512 wv = w16_512(w, (o + c) * (int64_t)in + i, bf16, m);
            for (int r = 0; r < nr; r++) acc[r][c] = _mm512_fmadd_ps(xv[r], wv, acc[r][c]);
        }
    }
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) out[r][c] = tree_512(acc[r][c]);
}

/* 8 lanes from element ``at`` of a fp32 or bf16 row; ``n`` < 8: the rest read as 0 */
INL256 __m256 load8_256(const void *p, int64_t at, int bf16, int n) {
    if (n < 8) {
        float buf[8] = {0};
        for (int j = 0; j < n; j++)
            buf[j] = bf16 ? bi_bf16_to_float(((const uint16_t *)p)[at + j])
                          : ((const float *)p)[at + j];
        return _mm256_loadu_ps(buf);
    }
    if (bf16) {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + at));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    return _mm256_loadu_ps((const float *)p + at);
}

/* tree_512 on lanes 0-7 in lo, 8-15 in hi */
INL256 float tree_256(__m256 lo, __m256 hi) {
    __m256 a = _mm256_add_ps(lo, hi);
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

/* up to 2 rows x 2 columns (16 partial sums each as two 8-lane halves: 8 registers) */
INL256 void tile_256(const float *const *xr, int nr, const void *w, int64_t o, int nc, int in,
                     int bf16, float out[2][2]) {
    __m256 lo[2][2], hi[2][2];
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) lo[r][c] = hi[r][c] = _mm256_setzero_ps();
    for (int i = 0; i < in; i += BI_LANES) {
        int n = in - i;
        __m256 xl[2], xh[2];
        for (int r = 0; r < nr; r++) {
            xl[r] = load8_256(xr[r], i, 0, n < 8 ? n : 8);
            xh[r] = load8_256(xr[r], i + 8, 0, n < 16 ? (n > 8 ? n - 8 : 0) : 8);
        }
        for (int c = 0; c < nc; c++) {
            int64_t at = (o + c) * (int64_t)in + i;
            __m256 wl = load8_256(w, at, bf16, n < 8 ? n : 8);
            __m256 wh = load8_256(w, at + 8, bf16, n < 16 ? (n > 8 ? n - 8 : 0) : 8);
            for (int r = 0; r < nr; r++) {
                lo[r][c] = _mm256_fmadd_ps(xl[r], wl, lo[r][c]);
                hi[r][c] = _mm256_fmadd_ps(xh[r], wh, hi[r][c]);
            }
        }
    }
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) out[r][c] = tree_256(lo[r][c], hi[r][c]);
}

#define INLBF16 static inline __attribute__((always_inline,                                      \
                                           target("avx512f,avx512bw,avx512vl,avx512bf16,fma")))

/* bf16 rows and weights on AVX512-BF16's dot product: each of the 16 partial sums takes a pair
 * of products a step (elements 32 k + 2 j and 32 k + 2 j + 1 into lane j), then the same tree.
 * Another order than the fp32 tiles', the same for every row and call: on these hosts every
 * bf16 row takes it */
INLBF16 void tile_bf16(const uint16_t *const *xh, int nr, const uint16_t *w, int64_t o, int nc,
                       int in, float out[ROWS][COLS]) {
    __m512 acc[ROWS][COLS];
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) acc[r][c] = _mm512_setzero_ps();
    for (int i = 0; i < in; i += 32) {
        __mmask32 m = in - i >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << (in - i)) - 1);
        __m512bh xv[ROWS];
        for (int r = 0; r < nr; r++) xv[r] = (__m512bh)_mm512_maskz_loadu_epi16(m, xh[r] + i);
        for (int c = 0; c < nc; c++) {
            __m512bh wv = (__m512bh)_mm512_maskz_loadu_epi16(m, w + (o + c) * (int64_t)in + i);
            for (int r = 0; r < nr; r++) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv[r], wv);
        }
    }
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) out[r][c] = tree_512(acc[r][c]);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma"))) static void tile_avx512bf16(
    const uint16_t *const *xh, int nr, const void *w, int64_t o, int nc, int in,
    float out[ROWS][COLS]) {
    const uint16_t *wh = (const uint16_t *)w;
#define TILEBF(R, C)                                                                           \
    if (nr == R && nc == C) {                                                                  \
        tile_bf16(xh, R, wh, o, C, in, out);                                                   \
        return;                                                                                \
    }
    TILEBF(4, 4) TILEBF(3, 4) TILEBF(2, 4) TILEBF(1, 4)
    TILEBF(4, 1) TILEBF(3, 1) TILEBF(2, 1) TILEBF(1, 1)
#undef TILEBF
    for (int c = 0; c < nc; c++) {
        float one[ROWS][COLS];
        tile_avx512bf16(xh, nr, w, o + c, 1, in, one);
        for (int r = 0; r < nr; r++) out[r][c] = one[r][0];
    }
}

/* tile_512 with its sizes as constants (each combination unrolled into registers) */
BI_TARGET_AVX512 static void tile_avx512(const float *const *xr, int nr, const void *w,
                                         int64_t o, int nc, int in, int bf16,
                                         float out[ROWS][COLS]) {
#define TILE512(R, C)                                                                          \
    if (nr == R && nc == C) {                                                                  \
        if (bf16) tile_512(xr, R, w, o, C, in, 1, out);                                        \
        else tile_512(xr, R, w, o, C, in, 0, out);                                             \
        return;                                                                                \
    }
    TILE512(4, 4) TILE512(3, 4) TILE512(2, 4) TILE512(1, 4)
    TILE512(4, 1) TILE512(3, 1) TILE512(2, 1) TILE512(1, 1)
#undef TILE512
    for (int c = 0; c < nc; c++) { /* 2 or 3 columns: one at a time */
        float one[ROWS][COLS];
        tile_avx512(xr, nr, w, o + c, 1, in, bf16, one);
        for (int r = 0; r < nr; r++) out[r][c] = one[r][0];
    }
}

/* the ROWS x COLS tile as 2 x 2 tiles of tile_256 */
BI_TARGET_AVX2 static void tile_avx2(const float *const *xr, int nr, const void *w, int64_t o,
                                     int nc, int in, int bf16, float out[ROWS][COLS]) {
    for (int r0 = 0; r0 < nr; r0 += 2)
        for (int c0 = 0; c0 < nc; c0 += 2) {
            int r2 = nr - r0 < 2 ? 1 : 2, c2 = nc - c0 < 2 ? 1 : 2;
            float part[2][2];
#define TILE256(R, C)                                                                          \
    if (r2 == R && c2 == C) {                                                                  \
        if (bf16) tile_256(xr + r0, R, w, o + c0, C, in, 1, part);                             \
        else tile_256(xr + r0, R, w, o + c0, C, in, 0, part);                                  \
    }
            TILE256(2, 2) TILE256(1, 2) TILE256(2, 1) TILE256(1, 1)
#undef TILE256
            for (int r = 0; r < r2; r++)
                for (int c = 0; c < c2; c++) out[r0 + r][c0 + c] = part[r][c];
        }
}
#endif

/* one work item: rows t0..t1-1 x output columns o0..o1-1; xf: room for ROWS rows of fp32 */
BI_INLINE void item_body(const void *x, int64_t t0, int64_t t1, int in, const void *w, int out,
                         int64_t o0, int64_t o1, const void *bias, const void *residual,
                         void *y, int bf16, float *xf, int isa) {
    for (int64_t t = t0; t < t1; t += ROWS) {
        int nr = t + ROWS <= t1 ? ROWS : (int)(t1 - t);
        const float *xr[ROWS];
        const uint16_t *xh[ROWS];  /* isa 3: the bf16 rows as they are */
        for (int r = 0; r < nr; r++) {
            xh[r] = (const uint16_t *)x + (t + r) * (int64_t)in;
            if (isa == 3) continue;
            bi_load_row(x, t + r, in, bf16, xf + (int64_t)r * in);
            xr[r] = xf + (int64_t)r * in;
        }
        for (int64_t o = o0; o < o1; o += COLS) {
            int nc = o + COLS <= o1 ? COLS : (int)(o1 - o);
            float sums[ROWS][COLS];
#if defined(__x86_64__)
            if (isa == 3) tile_avx512bf16(xh, nr, w, o, nc, in, sums);
            else if (isa == 2) tile_avx512(xr, nr, w, o, nc, in, bf16, sums);
            else if (isa == 1) tile_avx2(xr, nr, w, o, nc, in, bf16, sums);
            else
#endif
                tile_const(xr, nr, w, o, nc, in, bf16, sums);
            for (int r = 0; r < nr; r++)
                for (int c = 0; c < nc; c++) {
                    int64_t at = (t + r) * out + o + c;
                    float v = sums[r][c];
                    if (bf16) {
                        if (bias) v += bi_bf16_to_float(((const uint16_t *)bias)[o + c]);
                        if (residual) v += bi_bf16_to_float(((const uint16_t *)residual)[at]);
                        ((uint16_t *)y)[at] = bi_float_to_bf16(v);
                    } else {
                        if (bias) v += ((const float *)bias)[o + c];
                        if (residual) v += ((const float *)residual)[at];
                        ((float *)y)[at] = v;
                    }
                }
        }
    }
}

#define ARGS                                                                                   \
    const void *x, int64_t t0, int64_t t1, int in, const void *w, int out, int64_t o0,         \
        int64_t o1, const void *bias, const void *residual, void *y, int bf16, float *xf
#define PASS x, t0, t1, in, w, out, o0, o1, bias, residual, y, bf16, xf

/* the ISA copies hold no OpenMP region: an outlined parallel body would not inherit their
 * target, so the parallel loop lives in bi_matmul and calls one of these per item */
static void item_c(ARGS) { item_body(PASS, 0); }
#if defined(__x86_64__)
BI_TARGET_AVX2 static void item_avx2(ARGS) { item_body(PASS, 1); }
BI_TARGET_AVX512 static void item_avx512(ARGS) { item_body(PASS, 2); }
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma"))) static void item_avx512bf16(
    ARGS) {
    item_body(PASS, 3);
}
#endif

int bi_matmul(const void *x, int T, int in, const void *w, int out, const void *bias,
              const void *residual, void *y, int bf16, int isa) {
    if (T < 0 || in < 1 || out < 1) return -1;
    void (*item)(ARGS) = item_c;
#if defined(__x86_64__)
    if (isa >= 2) item = bf16 && wo_has_bf16() ? item_avx512bf16 : item_avx512;
    else if (isa == 1) item = item_avx2;
#endif
    int64_t col_blocks = (out + BLOCK - 1) / BLOCK, row_blocks = (T + ROW_BLOCK - 1) / ROW_BLOCK;
#pragma omp parallel
    {
        float *xf = malloc(sizeof(float) * (size_t)ROWS * (size_t)in);
#pragma omp for schedule(static)
        for (int64_t i = 0; i < col_blocks * row_blocks; i++) {
            int64_t o0 = i % col_blocks * BLOCK, t0 = i / col_blocks * ROW_BLOCK;
            item(x, t0, t0 + ROW_BLOCK < T ? t0 + ROW_BLOCK : T, in, w, out, o0,
                 o0 + BLOCK < out ? o0 + BLOCK : out, bias, residual, y, bf16, xf);
        }
        free(xf);
    }
    return 0;
}
