/* Batch-invariant matmul: y[t, o] = sum_i x[t, i] * w[o, i] (+ bias[o]) (+ residual[t, o]).
 *
 * x [T, in], w [out, in] (the HF layout), residual and y [T, out]: all fp32 (bf16 = 0) or all
 * bf16 (bf16 = 1; bias likewise). Each output is one fixed-order dot product in fp32
 * (bi_common.h), plus the bias and the residual in fp32, rounded once to y's dtype: its bits do
 * not depend on T or on the row's place in x. oneDNN and MKL change their blocking, and with it
 * the order of the sum, with the row count; this kernel splits rows and columns, never the sum.
 * Work items are (block of BLOCK output columns, block of ROW_BLOCK rows), shared by OpenMP; in
 * an item, ROWS rows x COLS columns are summed together so that each weight load serves ROWS
 * rows and the COLS independent sums hide each other's latency.
 */
#include "../minisgl_kernels.h"
#include "bi_common.h"
#include <stdlib.h>

#define BLOCK 64      /* output columns per work item: their weights stay in cache across rows */
#define ROW_BLOCK 64  /* rows per work item */
#define COLS 4
#define ROWS 2

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
    TILE(2, 4) TILE(1, 4) TILE(2, 1) TILE(1, 1)
#undef TILE
    for (int c = 0; c < nc; c++) { /* 2 or 3 columns: one at a time */
        float one[ROWS][COLS];
        if (nr == 2) {
            if (bf16) tile(xr, 2, w, o + c, 1, in, 1, one);
            else tile(xr, 2, w, o + c, 1, in, 0, one);
        } else {
            if (bf16) tile(xr, 1, w, o + c, 1, in, 1, one);
            else tile(xr, 1, w, o + c, 1, in, 0, one);
        }
        for (int r = 0; r < nr; r++) out[r][c] = one[r][0];
    }
}

/* one work item: rows t0..t1-1 x output columns o0..o1-1; xf: room for ROWS rows of fp32 */
BI_INLINE void item_body(const void *x, int64_t t0, int64_t t1, int in, const void *w, int out,
                         int64_t o0, int64_t o1, const void *bias, const void *residual,
                         void *y, int bf16, float *xf) {
    for (int64_t t = t0; t < t1; t += ROWS) {
        int nr = t + ROWS <= t1 ? ROWS : (int)(t1 - t);
        const float *xr[ROWS];
        for (int r = 0; r < nr; r++) {
            bi_load_row(x, t + r, in, bf16, xf + (int64_t)r * in);
            xr[r] = xf + (int64_t)r * in;
        }
        for (int64_t o = o0; o < o1; o += COLS) {
            int nc = o + COLS <= o1 ? COLS : (int)(o1 - o);
            float sums[ROWS][COLS];
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
static void item_c(ARGS) { item_body(PASS); }
#if defined(__x86_64__)
BI_TARGET_AVX2 static void item_avx2(ARGS) { item_body(PASS); }
BI_TARGET_AVX512 static void item_avx512(ARGS) { item_body(PASS); }
#endif

int bi_matmul(const void *x, int T, int in, const void *w, int out, const void *bias,
              const void *residual, void *y, int bf16, int isa) {
    if (T < 0 || in < 1 || out < 1) return -1;
    void (*item)(ARGS) = item_c;
#if defined(__x86_64__)
    if (isa >= 2) item = item_avx512;
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
