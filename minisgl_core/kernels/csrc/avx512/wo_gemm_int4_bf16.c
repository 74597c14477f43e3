/* int4 weights against many bf16 input rows: the GEMM of wo_gemm_bf16.c (see there) for Q4_1
 * groups, unpacked exactly as 1 + nib / 16 with each group's scale and min applied in fp32.
 */
#include "../minisgl_kernels.h"
#include "wo_gemm.h"
#include <stdint.h>
#include <stdlib.h>

#if defined(__x86_64__)
#define MR4 4  /* input rows a step: MR4 x PANEL_VECS group sums and as many accumulators */
#define NIB_BF16(v) _mm512_ternarylogic_epi32(v, nib_bits, one_bits, 0xEA)

/* The element that word w of nibble plane p of a 64-byte block (four groups) stands for: byte
 * 2w + (p >> 1) of the block, its low nibble for even p, its high one (element + 16) for odd p */
static inline int element_of(int w, int p) {
    int byte = 2 * w + (p >> 1);
    return (byte / 16) * GROUP + byte % 16 + 16 * (p & 1);
}

static inline float bf16_to_float(uint16_t h) {
    union { uint32_t u; float f; } v = {.u = (uint32_t)h << 16};
    return v.f;
}

/* x [T][in] -> xl [T][pairs]: dword block * 64 + 16 p + d holds the inputs that plane p's
 * dword d meets (zeros past `in`); xneg [T][groups]: -sum of each group's inputs */
static void lay_out_i4(const uint16_t *x, int T, const Weight *w, int pairs, uint32_t *xl,
                       float *xneg) {
    for (int t = 0; t < T; t++) {
        const uint16_t *row = x + (int64_t)t * w->in;
        for (int pair = 0; pair < pairs; pair++) {
            int base = pair / 64 * 4 * GROUP, p = pair % 64 / 16, d = pair % 16;
            int e0 = base + element_of(2 * d, p), e1 = base + element_of(2 * d + 1, p);
            uint32_t lo = e0 < w->in ? row[e0] : 0, hi = e1 < w->in ? row[e1] : 0;
            xl[(int64_t)t * pairs + pair] = lo | hi << 16;
        }
        for (int g = 0; g < w->groups; g++) {
            float sum = 0.0f;
            for (int e = g * GROUP; e < w->in && e < (g + 1) * GROUP; e++) sum += bf16_to_float(row[e]);
            xneg[(int64_t)t * w->groups + g] = -sum;
        }
    }
}

/* Output rows [o0, o0 + 16 vecs) into the panel, dword (pair, c) at pair * PANEL_COLS + c, and
 * their 16 scale and min [groups][2][PANEL_COLS] (zeros past `out`). The 16 rows' raw blocks
 * are transposed first (dword d of each row into one vector), then each nibble plane is two
 * lane-wise ops on it */
TB static void pack_panel_i4(const Weight *w, int o0, int vecs, uint32_t *panel, float *sm) {
    const __m512i nib_bits = _mm512_set1_epi16(0x0078), one_bits = _mm512_set1_epi16(0x3F80);
    int blocks = (w->groups + 3) / 4;
    __m512i r[16];
    for (int v = 0; v < vecs; v++) {
        for (int blk = 0; blk < blocks; blk++) {
            int left = w->groups - 4 * blk;
            __mmask64 keep = left >= 4 ? ~(__mmask64)0 : (((__mmask64)1 << (16 * left)) - 1);
            for (int c = 0; c < 16; c++) {
                int o = o0 + 16 * v + c;
                const uint8_t *src = w->q + ((int64_t)o * w->groups + 4 * blk) * 16;
                r[c] = o < w->out ? _mm512_maskz_loadu_epi8(keep, src) : _mm512_setzero_si512();
                /* the next 16 rows' block: 16 strided streams the hardware prefetcher misses */
                if (o + 16 < w->out) _mm_prefetch((const char *)(src + (int64_t)16 * w->groups * 16),
                                                  _MM_HINT_T0);
            }
            transpose16(r);  /* r[d]: dword d of the block, for the 16 outputs */
            uint32_t *dst = panel + (int64_t)blk * 64 * PANEL_COLS + 16 * v;
            for (int d = 0; d < 16; d++) {
                _mm512_store_si512(dst + d * PANEL_COLS, NIB_BF16(_mm512_slli_epi16(r[d], 3)));
                _mm512_store_si512(dst + (16 + d) * PANEL_COLS, NIB_BF16(_mm512_srli_epi16(r[d], 1)));
                _mm512_store_si512(dst + (32 + d) * PANEL_COLS, NIB_BF16(_mm512_srli_epi16(r[d], 5)));
                _mm512_store_si512(dst + (48 + d) * PANEL_COLS, NIB_BF16(_mm512_srli_epi16(r[d], 9)));
            }
        }
        for (int g0 = 0; g0 < w->groups; g0 += 16) {  /* 16 groups of 16 rows, transposed too */
            int n = w->groups - g0 < 16 ? w->groups - g0 : 16;
            for (int which = 0; which < 2; which++) {
                const uint16_t *src = which ? w->mn : w->scale;
                for (int c = 0; c < 16; c++) {
                    int o = o0 + 16 * v + c;
                    r[c] = o < w->out ? _mm512_castps_si512(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(
                        (__mmask16)((1u << n) - 1), src + (int64_t)o * w->groups + g0)))
                        : _mm512_setzero_si512();
                }
                transpose16(r);  /* r[j]: group g0 + j of the 16 outputs */
                __m512 times = _mm512_set1_ps(which ? 1.0f : 16.0f);
                for (int j = 0; j < n; j++)
                    _mm512_store_ps(sm + (int64_t)(g0 + j) * 2 * PANEL_COLS + which * PANEL_COLS + 16 * v,
                                    _mm512_mul_ps(_mm512_castsi512_ps(r[j]), times));
            }
        }
    }
}

/* y rows [t0, t0 + mr) x outputs [o0, o0 + 16 nv): per group, sums that start at -sum(x) and
 * add x f (so sum(x nib) / 16), then acc += 16 scale * sums + min * sum(x) */
TB INLINE void block_i4(const uint32_t *x, const float *xneg, int pairs, const uint32_t *panel,
                        const float *sm, const Weight *w, int o0, void *y, int y_bf16,
                        const void *residual, int64_t t0, const int mr, const int nv) {
    __m512 acc[MR4][PANEL_VECS], sum[MR4][PANEL_VECS];
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < nv; v++) acc[r][v] = _mm512_setzero_ps();
    for (int g = 0; g < w->groups; g++) {
        for (int r = 0; r < mr; r++) {
            __m512 xn = _mm512_set1_ps(xneg[r * w->groups + g]);
            for (int v = 0; v < nv; v++) sum[r][v] = xn;
        }
        int first = g / 4 * 64 + g % 4 * 4;  /* plane p's dwords: first + 16 p .. + 3 */
        for (int p = 0; p < 4; p++)
            for (int d = 0; d < 4; d++) {
                int pair = first + 16 * p + d;
                const uint32_t *wp = panel + (int64_t)pair * PANEL_COLS;
                __m512bh wv[PANEL_VECS];
                for (int v = 0; v < nv; v++) wv[v] = (__m512bh)_mm512_load_si512(wp + 16 * v);
                for (int r = 0; r < mr; r++) {
                    __m512bh xb = (__m512bh)_mm512_set1_epi32((int)x[r * pairs + pair]);
                    for (int v = 0; v < nv; v++) sum[r][v] = _mm512_dpbf16_ps(sum[r][v], wv[v], xb);
                }
            }
        const float *at = sm + (int64_t)g * 2 * PANEL_COLS;
        for (int v = 0; v < nv; v++) {
            __m512 s16 = _mm512_load_ps(at + 16 * v), m = _mm512_load_ps(at + PANEL_COLS + 16 * v);
            for (int r = 0; r < mr; r++)
                acc[r][v] = _mm512_fnmadd_ps(m, _mm512_set1_ps(xneg[r * w->groups + g]),
                                             _mm512_fmadd_ps(sum[r][v], s16, acc[r][v]));
        }
    }
    __m512 out[MR4][PANEL_VECS];  /* finish() takes MR-row arrays' shape: PANEL_VECS columns */
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < nv; v++) out[r][v] = acc[r][v];
    finish(w, out, o0, y, y_bf16, residual, t0, mr, nv);
}

#define BLOCK_I4(mr) do { \
        const uint32_t *xt = x + (int64_t)t * pairs; \
        const float *nt = xneg + (int64_t)t * w->groups; \
        if (nv == 3) block_i4(xt, nt, pairs, panel, sm, w, o0, y, y_bf16, residual, t, mr, 3); \
        else if (nv == 2) block_i4(xt, nt, pairs, panel, sm, w, o0, y, y_bf16, residual, t, mr, 2); \
        else block_i4(xt, nt, pairs, panel, sm, w, o0, y, y_bf16, residual, t, mr, 1); \
    } while (0)

TB static void panel_rows_i4(const uint32_t *x, const float *xneg, int T, int pairs,
                             const uint32_t *panel, const float *sm, const Weight *w, int o0,
                             int nv, void *y, int y_bf16, const void *residual) {
    int t = 0;
    for (; t + MR4 <= T; t += MR4) BLOCK_I4(MR4);
    switch (T - t) {  /* the last 1 .. MR4 - 1 rows */
    case 1: BLOCK_I4(1); break;
    case 2: BLOCK_I4(2); break;
    case 3: BLOCK_I4(3); break;
    }
}
#undef BLOCK_I4

TB static int gemm_i4(const uint16_t *x, int T, const Weight *w, void *y, int y_bf16,
                      const void *residual, int threads) {
    int pairs = (w->groups + 3) / 4 * 64;
    uint32_t *xl = malloc((size_t)T * pairs * 4);
    float *xneg = malloc((size_t)T * w->groups * 4);
    int failed = xl == NULL || xneg == NULL;
    if (!failed) {
        lay_out_i4(x, T, w, pairs, xl, xneg);
        int panels = (w->out + PANEL_COLS - 1) / PANEL_COLS;
        size_t panel_bytes = (size_t)pairs * PANEL_COLS * 4;
        size_t sm_bytes = (size_t)w->groups * 2 * PANEL_COLS * 4;
#pragma omp parallel num_threads(threads) reduction(| : failed)
        {
            uint32_t *panel = aligned_alloc(64, panel_bytes + sm_bytes);
            if (panel == NULL) failed = 1;
#pragma omp for schedule(static)
            for (int i = 0; i < panels; i++) {
                if (panel == NULL) continue;
                float *sm = (float *)((uint8_t *)panel + panel_bytes);
                int o0 = i * PANEL_COLS, left = w->out - o0;
                int nv = left >= PANEL_COLS ? PANEL_VECS : (left + 15) / 16;
                pack_panel_i4(w, o0, nv, panel, sm);
                panel_rows_i4(xl, xneg, T, pairs, panel, sm, w, o0, nv, y, y_bf16, residual);
            }
            free(panel);
        }
    }
    free(xl);
    free(xneg);
    return failed ? -1 : 0;
}

int wo_gemm_int4_bf16(const uint16_t *x, int T, int in, const uint8_t *q, const uint16_t *scale,
                      const uint16_t *mn, int out, void *y, int y_bf16, const void *residual,
                      int threads) {
    static int has = -1;
    if (has < 0) has = wo_has_bf16();
    if (!has) return -1;
    Weight w = {q, scale, mn, NULL, in, out, (in + GROUP - 1) / GROUP, 1};
    return gemm_i4(x, T, &w, y, y_bf16, residual, threads);
}

#else
int wo_gemm_int4_bf16(const uint16_t *x, int T, int in, const uint8_t *q, const uint16_t *scale,
                      const uint16_t *mn, int out, void *y, int y_bf16, const void *residual,
                      int threads) {
    return -1;
}
#endif
