/* What the weight-only GEMMs on AVX512-BF16 share (internal: not part of the library's interface).
 *
 * avx512/wo_gemm_bf16.c (int8) and avx512/wo_gemm_int4_bf16.c (int4) unpack a panel of
 * PANEL_COLS output rows at a time into vdpbf16ps's pair order, [pairs][PANEL_COLS] dwords, and
 * run every input row over it; this header holds the weight's description, the 16 x 16 dword
 * transpose both unpackers use and the store of a block of sums.
 */
#ifndef MINISGL_WO_GEMM_H
#define MINISGL_WO_GEMM_H

#include <stdint.h>

#define GROUP 32
#define PANEL_VECS 3  /* 16-output vectors a panel: rows x PANEL_VECS accumulators + the weights */
#define PANEL_COLS (PANEL_VECS * 16)

typedef struct {
    const uint8_t *q;       /* int4 [out][groups][16] or int8 [out][in] */
    const uint16_t *scale;  /* int4: fp16 [out][groups] */
    const uint16_t *mn;     /* int4: fp16 [out][groups] */
    const float *row_scale; /* int8: fp32 [out] */
    int in, out, groups, int4;
} Weight;

#if defined(__x86_64__)
#include <immintrin.h>

#define TB __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

/* 16 vectors of 16 dwords, r[c][p] -> r[p][c] (four rounds of in-lane and cross-lane shuffles) */
TB INLINE void transpose16(__m512i r[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* u[4b + j] holds, in 128-bit lane L, dwords 4L + j of rows 4b .. 4b + 3 */
    for (int i = 0; i < 8; i++) {
        int b = (i / 4) * 8 + i % 4;  /* row blocks 0,1 then 2,3 */
        t[i] = _mm512_shuffle_i32x4(u[b], u[b + 4], 0x88);
        t[i + 8] = _mm512_shuffle_i32x4(u[b], u[b + 4], 0xdd);
    }
    for (int j = 0; j < 4; j++) {
        r[j] = _mm512_shuffle_i32x4(t[j], t[j + 4], 0x88);
        r[j + 4] = _mm512_shuffle_i32x4(t[j + 8], t[j + 12], 0x88);
        r[j + 8] = _mm512_shuffle_i32x4(t[j], t[j + 4], 0xdd);
        r[j + 12] = _mm512_shuffle_i32x4(t[j + 8], t[j + 12], 0xdd);
    }
}

/* acc [mr][nv] -> y rows [t0, t0 + mr) x outputs [o0, o0 + 16 nv): the row's scale (int8), the
 * residual in fp32, then fp32 or bf16 (rounded once) */
TB INLINE void finish(const Weight *w, __m512 acc[][PANEL_VECS], int o0, void *y, int y_bf16,
                      const void *residual, int64_t t0, const int mr, const int nv) {
    for (int v = 0; v < nv; v++) {
        int o = o0 + 16 * v, left = w->out - o;
        __mmask16 keep = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
        __m512 s = w->int4 ? _mm512_set1_ps(1.0f) : _mm512_maskz_loadu_ps(keep, w->row_scale + o);
        for (int r = 0; r < mr; r++) {
            int64_t at = (t0 + r) * w->out + o;
            __m512 sum = _mm512_mul_ps(acc[r][v], s);
            if (y_bf16) {
                if (residual)
                    sum = _mm512_add_ps(sum, _mm512_castsi512_ps(_mm512_slli_epi32(
                        _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(
                            keep, (const uint16_t *)residual + at)), 16)));
                _mm256_mask_storeu_epi16((uint16_t *)y + at, keep,
                                         (__m256i)_mm512_cvtneps_pbh(sum));
            } else {
                if (residual)
                    sum = _mm512_add_ps(sum, _mm512_maskz_loadu_ps(keep, (const float *)residual + at));
                _mm512_mask_storeu_ps((float *)y + at, keep, sum);
            }
        }
    }
}

#endif

#endif
