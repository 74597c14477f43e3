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
#include "minisgl_kernels.h"
#include <stdint.h>
#include <stdlib.h>

#include "cpu_features.h"

#define TILE 4
#define GROUP 32
/* How far ahead of the weight being read the next is asked for: the row's end and the rows after
 * it, which the hardware prefetcher alone fetched too late (int8 at one row: 21-23 GB/s without,
 * 26-28 GB/s with, 2 threads, a 36 GB/s host; docs/design/kernels.md, 7. The native kernels
 * alone) */
#define PREFETCH_BYTES 2048
#define BLOCK_FLOATS (9 * 16)  /* a block's inputs in lane order (8 x 16), then its lane x-sums */

/* one row of x rearranged for the AVX-512 int4 blocks: [blocks][BLOCK_FLOATS] */
typedef struct {
    const float *x;
    int blocks;  /* ceil(groups / 4): the last block may hold fewer than four groups */
    int groups;
} Blocked;

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
        _mm_prefetch((const char *)(w + i + PREFETCH_BYTES), _MM_HINT_T0);
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
 * their sums (i4_blocks_prep). */
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
         * those lanes add nothing; their inputs are zeros too, see i4_blocks_prep) */
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
T5 static void i4_blocks_prep(const float *x, int in, int blocks, float *out) {
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

T5 static void i4_row_avx512(const float *x, int T, int in, const Blocked *bx, const uint8_t *w,
                             const uint16_t *sc, const uint16_t *mn, float *y, int out) {
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

int wo_best_isa(void) {
#ifdef HAVE_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && cpu_feature_allowed("avx512"))
        return 2;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        cpu_feature_allowed("avx2"))
        return 1;
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
    /* blocks at one row only: from two rows up the per-group path, whose dequantized vectors
     * serve every row of a tile, measured faster (docs/design/kernels.md, 7. The native kernels
     * alone) */
    Blocked bx = {NULL, isa == 2 && T == 1 ? (groups + 3) / 4 : 0, groups};
    float *buf = NULL;
    if (bx.blocks > 0) {
        buf = malloc(sizeof(float) * (size_t)bx.blocks * BLOCK_FLOATS);
        if (buf == NULL) bx.blocks = 0;  /* the per-group path needs no buffer */
#ifdef HAVE_X86
        else i4_blocks_prep(x, in, bx.blocks, buf);
#endif
        bx.x = buf;
    }
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int o = 0; o < out; o++) {
        const uint8_t *w = q + (int64_t)o * groups * 16;
        const uint16_t *s = scale + (int64_t)o * groups, *m = mn + (int64_t)o * groups;
#ifdef HAVE_X86
        if (isa == 2) { i4_row_avx512(x, T, in, &bx, w, s, m, y + o, out); continue; }
        if (isa == 1) { i4_row_avx2(x, T, in, w, s, m, y + o, out); continue; }
#endif
        i4_row_c(x, T, in, w, s, m, y + o, out);
    }
    free(buf);
}
