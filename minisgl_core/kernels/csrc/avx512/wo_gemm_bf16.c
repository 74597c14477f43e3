/* int8 and int4 weights against many bf16 input rows: a register-blocked GEMM on AVX512-BF16.
 *
 * The dot-product kernels (wo_int4_bf16.c, wo_matmul_avx512.c) unpack a weight again for every
 * input row, so their time grows with the rows (docs/design/kernels.md, 8. and 9.). Here each
 * thread takes a panel of PANEL_COLS output rows of the weight, unpacks all of it once into bf16
 * in vdpbf16ps's pair order (a dword per two inputs, 16 outputs a vector: [pairs][PANEL_COLS],
 * L2-sized for the layers of a 0.1-4B model), then runs every input row over it, a few rows by
 * PANEL_VECS vectors a step: fp32 accumulators [rows][16 outputs] in registers, each step
 * loading PANEL_VECS weight vectors and broadcasting one input pair per row. The unpacking is
 * paid once per call whatever the rows.
 *
 * int8: the integers, exact in bf16, converted (two fp32 conversions and one to bf16 per 32) and
 * transposed 16 x 16 dwords; the row's scale multiplies the sums.
 * int4 (Q4_1 groups of 32: byte j holds element j low and j + 16 high; fp16 scale and min): the
 * raw 64-byte blocks (four groups) of 16 rows are transposed first (dword d of each row into one
 * vector), then read as words each dword holds four nibbles a word: a shift and a vpternlogd put
 * nibble p at bits 3-6 and OR in bf16's 1.0, giving 1 + nib / 16 exactly (as wo_int4_bf16.c),
 * two lane-wise ops per 32 weights, no conversion. The inputs are laid out once per call in the
 * same order. Per group, sums start at -sum(x) and add x f, i.e. sum(x nib) / 16; then acc += 16
 * scale * sums + min * sum(x): the weight is nib * scale + min in fp32, never rounded to bf16.
 * Inputs past `in` and outputs past `out` are zeros, never read from the weight's padding.
 * This file: int8 (the int4 path is wo_gemm_int4_bf16.c; wo_gemm.h what they share).
 */
#include "../minisgl_kernels.h"
#include "wo_gemm.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MR 8  /* input rows a step: MR x PANEL_VECS accumulators */

#if defined(__x86_64__)
/* One group (32 inputs) of output row o as 32 bf16 in input order; zeros past `in` */
TB INLINE __m512i group_bf16(const Weight *w, int o, int g) {
    int left = w->in - g * GROUP;
    __mmask32 keep = left >= 32 ? ~(__mmask32)0 : (((__mmask32)1 << left) - 1);
    const int8_t *src = (const int8_t *)w->q + (int64_t)o * w->in + g * GROUP;
    __m256i raw = _mm256_maskz_loadu_epi8(keep, src);
    __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(raw)));
    __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(raw, 1)));
    return _mm512_maskz_mov_epi16(keep, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

/* Output rows [o0, o0 + 16 * vecs) of the weight into panel: dword (p, c) at p * PANEL_COLS + c */
TB static void pack_panel(const Weight *w, int o0, int vecs, uint32_t *panel) {
    __m512i r[16];
    for (int v = 0; v < vecs; v++)
        for (int g = 0; g < w->groups; g++) {
            for (int c = 0; c < 16; c++) {
                int o = o0 + 16 * v + c;
                r[c] = o < w->out ? group_bf16(w, o, g) : _mm512_setzero_si512();
            }
            transpose16(r);  /* r[p]: input pair p of the group, for the 16 outputs */
            uint32_t *dst = panel + (int64_t)g * 16 * PANEL_COLS + 16 * v;
            for (int p = 0; p < 16; p++) _mm512_store_si512(dst + p * PANEL_COLS, r[p]);
        }
}

/* y rows [t0, t0 + mr) x outputs [o0, o0 + 16 * nv) over `pairs` input pairs; x rows are
 * `xstride` dwords apart. mr and nv are constants at each call: the loops unroll and the
 * accumulators stay in registers */
TB INLINE void block(const uint32_t *x, int64_t xstride, int pairs, const uint32_t *panel,
                     const Weight *w, int o0, void *y, int y_bf16, const void *residual,
                     int64_t t0, const int mr, const int nv) {
    __m512 acc[MR][PANEL_VECS];
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < nv; v++) acc[r][v] = _mm512_setzero_ps();
    for (int p = 0; p < pairs; p++) {
        const uint32_t *wp = panel + (int64_t)p * PANEL_COLS;
        __m512bh wv[PANEL_VECS];
        for (int v = 0; v < nv; v++) wv[v] = (__m512bh)_mm512_load_si512(wp + 16 * v);
        for (int r = 0; r < mr; r++) {
            __m512bh xb = (__m512bh)_mm512_set1_epi32((int)x[r * xstride + p]);
            for (int v = 0; v < nv; v++) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], wv[v], xb);
        }
    }
    finish(w, acc, o0, y, y_bf16, residual, t0, mr, nv);
}

/* mr rows at the panel's width nv: both constants in each call below */
#define BLOCK(mr) do { \
        if (nv == 3) block(xt, xstride, pairs, panel, w, o0, y, y_bf16, residual, t, mr, 3); \
        else if (nv == 2) block(xt, xstride, pairs, panel, w, o0, y, y_bf16, residual, t, mr, 2); \
        else block(xt, xstride, pairs, panel, w, o0, y, y_bf16, residual, t, mr, 1); \
    } while (0)

TB static void panel_rows(const uint32_t *x, int64_t xstride, int T, int pairs,
                          const uint32_t *panel, const Weight *w, int o0, int nv, void *y,
                          int y_bf16, const void *residual) {
    int t = 0;
    for (; t + MR <= T; t += MR) {
        const uint32_t *xt = x + t * xstride;
        BLOCK(MR);
    }
    const uint32_t *xt = x + t * xstride;
    switch (T - t) {  /* the last 1 .. MR - 1 rows */
    case 1: BLOCK(1); break;
    case 2: BLOCK(2); break;
    case 3: BLOCK(3); break;
    case 4: BLOCK(4); break;
    case 5: BLOCK(5); break;
    case 6: BLOCK(6); break;
    case 7: BLOCK(7); break;
    }
}
#undef BLOCK

TB static int gemm(const uint16_t *x, int T, const Weight *w, void *y, int y_bf16,
                   const void *residual, int threads) {
    int in = w->in, pairs = (in + 1) / 2;
    const uint32_t *xp = (const uint32_t *)x;
    uint16_t *padded = NULL;
    if (in % 2) {  /* the last pair's second input would be the next row's first: a zero here */
        padded = malloc((size_t)T * pairs * 4);
        if (padded == NULL) return -1;
        for (int t = 0; t < T; t++) {
            memcpy(padded + (int64_t)t * 2 * pairs, x + (int64_t)t * in, (size_t)in * 2);
            padded[(int64_t)t * 2 * pairs + in] = 0;
        }
        xp = (const uint32_t *)padded;
    }
    int panels = (w->out + PANEL_COLS - 1) / PANEL_COLS, failed = 0;
    size_t panel_bytes = (size_t)w->groups * 16 * PANEL_COLS * 4;
#pragma omp parallel num_threads(threads) reduction(| : failed)
    {
        uint32_t *panel = aligned_alloc(64, panel_bytes);
        if (panel == NULL) failed = 1;
#pragma omp for schedule(static)
        for (int i = 0; i < panels; i++) {
            if (panel == NULL) continue;
            int o0 = i * PANEL_COLS, left = w->out - o0;
            int nv = left >= PANEL_COLS ? PANEL_VECS : (left + 15) / 16;
            pack_panel(w, o0, nv, panel);
            panel_rows(xp, pairs, T, pairs, panel, w, o0, nv, y, y_bf16, residual);
        }
        free(panel);
    }
    free(padded);
    return failed ? -1 : 0;
}

int wo_gemm_int8_bf16(const uint16_t *x, int T, int in, const int8_t *q, const float *scale,
                      int out, void *y, int y_bf16, const void *residual, int threads) {
    static int has = -1;
    if (has < 0) has = wo_has_bf16();
    if (!has) return -1;
    Weight w = {(const uint8_t *)q, NULL, NULL, scale, in, out, (in + GROUP - 1) / GROUP, 0};
    return gemm(x, T, &w, y, y_bf16, residual, threads);
}
#else
int wo_gemm_int8_bf16(const uint16_t *x, int T, int in, const int8_t *q, const float *scale,
                      int out, void *y, int y_bf16, const void *residual, int threads) {
    return -1;
}
#endif
