/* The weight-only matmul's rows on AVX-512: 16 lanes (portable/wo_matmul.c dispatches). */
#include "../portable/wo_shared.h"

#ifdef HAVE_X86
#include <immintrin.h>

#define T5 __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))
#define INL5 static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,fma,f16c")))

INL5 void i8_tile_avx512(const float *x, int in, const int8_t *w, float s, float *y, int out,
                         const int nt) {
    __m512 a[TILE], b[TILE];
    for (int t = 0; t < nt; t++) a[t] = b[t] = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= in; i += 32) {
        _mm_prefetch((const char *)(w + i + PREFETCH_BYTES), _MM_HINT_T0);
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

WO_HIDDEN T5 void wo_i8_row_avx512(const float *x, int T, int in, const int8_t *w, float s,
                                   float *y, int out) {
    int t = 0;
    for (; t + TILE <= T; t += TILE) i8_tile_avx512(x + (int64_t)t * in, in, w, s, y + (int64_t)t * out, out, TILE);
    switch (T - t) {
    case 1: i8_tile_avx512(x + (int64_t)t * in, in, w, s, y + (int64_t)t * out, out, 1); break;
    case 2: i8_tile_avx512(x + (int64_t)t * in, in, w, s, y + (int64_t)t * out, out, 2); break;
    case 3: i8_tile_avx512(x + (int64_t)t * in, in, w, s, y + (int64_t)t * out, out, 3); break;
    }
}

/* The per-group path: nt (1..TILE) rows; constant nt at each call site */
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

/* One row, four groups (64 bytes, 128 weights) at a time. As 16 dwords, dword k holds 8 nibbles
 * of group k / 4; a shift puts nibble p at bits 19-22 and one vpternlogd masks it and ORs in
 * 1.0's exponent, giving the float f = 1 + nib / 16 without a conversion. So 16 integer ops
 * unpack 128 weights where the per-group path spends 28 and 8 FMAs, and every lane stays in one
 * group: with s16 = 16 scale and m16 = min - 16 scale the weight is f * s16 + m16, and a lane
 * adds s16 * sum(f x) + m16 * sum(x) once per block. bx holds the row's inputs in lane order and
 * their sums (wo_i4_blocks_prep). */
#define NIB_FLOAT(q, p) _mm512_castsi512_ps(_mm512_ternarylogic_epi32( \
    (p) <= 4 ? _mm512_slli_epi32(q, 19 - 4 * (p)) : _mm512_srli_epi32(q, 4 * (p) - 19), \
    nib_bits, one_bits, 0xEA))  /* (A & B) | C */

INL5 float i4_blocks_avx512(const Blocked *bx, const uint8_t *w, const uint16_t *sc,
                            const uint16_t *mn) {
    const __m512i nib_bits = _mm512_set1_epi32(0x00780000), one_bits = _mm512_set1_epi32(0x3f800000);
    const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512 sixteen = _mm512_set1_ps(16.0f);
    __m512 acc = _mm512_setzero_ps();
    for (int blk = 0; blk < bx->blocks; blk++) {
        /* the last block may hold 1-3 groups: the rest loads as zeros (scale and min 0, so
         * those lanes add nothing; their inputs are zeros too, see wo_i4_blocks_prep) */
        int left = bx->groups - 4 * blk;
        __mmask64 qm = left >= 4 ? ~(__mmask64)0 : (((__mmask64)1 << (16 * left)) - 1);
        __mmask8 gm = left >= 4 ? 0x0f : (__mmask8)((1u << left) - 1);
        __m512i q = _mm512_maskz_loadu_epi8(qm, (const void *)(w + blk * 64));
        _mm_prefetch((const char *)(w + blk * 64 + PREFETCH_BYTES), _MM_HINT_T0);
        __m512 s16 = _mm512_mul_ps(sixteen, _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(
            _mm_cvtph_ps(_mm_maskz_loadu_epi16(gm, sc + 4 * blk)))));
        __m512 m16 = _mm512_sub_ps(_mm512_permutexvar_ps(spread, _mm512_castps128_ps512(
            _mm_cvtph_ps(_mm_maskz_loadu_epi16(gm, mn + 4 * blk)))), s16);
        const float *xb = bx->x + (int64_t)blk * BLOCK_FLOATS;
        __m512 d0 = _mm512_mul_ps(NIB_FLOAT(q, 0), _mm512_loadu_ps(xb));  /* two chains */
        __m512 d1 = _mm512_mul_ps(NIB_FLOAT(q, 1), _mm512_loadu_ps(xb + 16));
        d0 = _mm512_fmadd_ps(NIB_FLOAT(q, 2), _mm512_loadu_ps(xb + 32), d0);
        d1 = _mm512_fmadd_ps(NIB_FLOAT(q, 3), _mm512_loadu_ps(xb + 48), d1);
        d0 = _mm512_fmadd_ps(NIB_FLOAT(q, 4), _mm512_loadu_ps(xb + 64), d0);
        d1 = _mm512_fmadd_ps(NIB_FLOAT(q, 5), _mm512_loadu_ps(xb + 80), d1);
        d0 = _mm512_fmadd_ps(NIB_FLOAT(q, 6), _mm512_loadu_ps(xb + 96), d0);
        d1 = _mm512_fmadd_ps(NIB_FLOAT(q, 7), _mm512_loadu_ps(xb + 112), d1);
        acc = _mm512_fmadd_ps(_mm512_add_ps(d0, d1), s16, acc);
        acc = _mm512_fmadd_ps(m16, _mm512_loadu_ps(xb + 128), acc);
    }
    return _mm512_reduce_add_ps(acc);
}
#undef NIB_FLOAT

/* out [blocks][BLOCK_FLOATS]: one row's inputs of each block in the order lane k's nibble p
 * reads them (dword k is bytes 4 (k % 4) .. 4 (k % 4) + 3 of group k / 4, a byte's low nibble
 * element j of its group, its high one element j + 16), then the sum of every lane's 8 inputs */
WO_HIDDEN T5 void wo_i4_blocks_prep(const float *x, int in, int blocks, float *out) {
    const __m512i lane = _mm512_setr_epi32(0, 4, 8, 12, 32, 36, 40, 44, 64, 68, 72, 76,
                                           96, 100, 104, 108);
    for (int blk = 0; blk < blocks; blk++) {
        const float *src = x + blk * 4 * GROUP;
        const __m512i left = _mm512_set1_epi32(in - blk * 4 * GROUP);  /* inputs from src on */
        float *dst = out + (int64_t)blk * BLOCK_FLOATS;
        __m512 sum = _mm512_setzero_ps();
        for (int p = 0; p < 8; p++) {
            __m512i at = _mm512_add_epi32(lane, _mm512_set1_epi32((p >> 1) + 16 * (p & 1)));
            /* past the row's end: zeros, never read */
            __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(),
                                                _mm512_cmplt_epi32_mask(at, left), at, src, 4);
            _mm512_storeu_ps(dst + p * 16, v);
            sum = _mm512_add_ps(sum, v);
        }
        _mm512_storeu_ps(dst + 8 * 16, sum);
    }
}

WO_HIDDEN T5 void wo_i4_row_avx512(const float *x, int T, int in, const Blocked *bx,
                                   const uint8_t *w, const uint16_t *sc, const uint16_t *mn,
                                   float *y, int out) {
    if (bx->blocks > 0) {  /* one row: every group in blocks, the last one maybe partial */
        y[0] = i4_blocks_avx512(bx, w, sc, mn);
        return;
    }
    int t = 0;
    for (; t + TILE <= T; t += TILE) i4_tile_avx512(x + (int64_t)t * in, in, w, sc, mn, y + (int64_t)t * out, out, TILE);
    switch (T - t) {
    case 1: i4_tile_avx512(x + (int64_t)t * in, in, w, sc, mn, y + (int64_t)t * out, out, 1); break;
    case 2: i4_tile_avx512(x + (int64_t)t * in, in, w, sc, mn, y + (int64_t)t * out, out, 2); break;
    case 3: i4_tile_avx512(x + (int64_t)t * in, in, w, sc, mn, y + (int64_t)t * out, out, 3); break;
    }
}
#endif
