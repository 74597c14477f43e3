/* int4 weights against one row of bf16 inputs, on AVX512-BF16's dot product (vdpbf16ps).
 *
 * The weights are portable/wo_matmul.c's Q4_1 groups (32 inputs per group, 16 bytes, byte j
 * holding element j low and element j + 16 high; fp16 scale and min per group). Read as 16-bit words, a
 * 64-byte block (four groups) holds four nibbles per word; one shift and one vpternlogd put
 * nibble p at bits 3-6 of each word and OR in 0x3F80, bf16's 1.0: the bf16 number 1 + nib / 16,
 * exact, with no conversion. So 8 integer ops unpack 128 weights into four vectors of 32 bf16,
 * and four vdpbf16ps multiply them with the inputs (laid out once per call in the same order),
 * summing word pairs into fp32 lanes; every lane stays in one group, so with s16 = 16 scale and
 * m16 = min - 16 scale a lane adds s16 * sum(f x) + m16 * sum(x) once per block. About 22 vector
 * ops per 128 weights against 33 for the fp32 block path, whose inputs stay fp32: this one is
 * for inputs that already are bf16 (the engine computing in bf16), rounded nowhere else.
 * wo_int4_dequant_bf16 writes a tile of the weight as bf16 instead, for AMX's GEMM from 32 rows
 * (wo_int4_panels_dequant_bf16: of the same weight in 16-output panels).
 */
#include "../minisgl_kernels.h"
#include <stdint.h>
#include <stdlib.h>

#define GROUP 32
#define BLOCK_BYTES 64
#define PREFETCH_BYTES 2048
/* a block's inputs: 4 vectors of 32 bf16 (64 bytes each), then 16 fp32 lane sums */
#define PREP_BYTES (4 * 64 + 16 * 4)
#define PASS_ROWS 8  /* input rows a pass over a weight row (their sums stay in registers) */
#ifndef ROWS
#define ROWS 4  /* output rows a step at one input row: independent chains, inputs loaded once
                  * for all (3.4 ms for the default model's layers against 3.7 on pass_rows()) */
#endif

#if defined(__x86_64__)
#include <immintrin.h>

#include "../cpu_features.h"

int wo_has_bf16(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && cpu_feature_allowed("avx512_bf16");
}

static inline float bf16_to_float(uint16_t h) {
    union { uint32_t u; float f; } v = {.u = (uint32_t)h << 16};
    return v.f;
}

/* The element of a block that word w of nibble vector p meets: byte 2w + (p >> 1) of the block,
 * its low nibble for even p, its high one for odd p (element j + 16 of its group) */
static inline int element_of(int w, int p) {
    int byte = 2 * w + (p >> 1);
    return (byte / 16) * GROUP + byte % 16 + 16 * (p & 1);
}

/* x [in] bf16 -> per block the inputs in nibble order (zeros past the row's end) and the sum
 * of every fp32 lane's eight inputs */
static void prep(const uint16_t *x, int in, int blocks, uint8_t *out) {
    for (int blk = 0; blk < blocks; blk++) {
        uint16_t *xv = (uint16_t *)(out + (size_t)blk * PREP_BYTES);
        float *sums = (float *)(out + (size_t)blk * PREP_BYTES + 4 * 64);
        for (int k = 0; k < 16; k++) sums[k] = 0.0f;
        for (int p = 0; p < 4; p++)
            for (int w = 0; w < 32; w++) {
                int e = blk * 4 * GROUP + element_of(w, p);
                uint16_t v = e < in ? x[e] : 0;
                xv[p * 32 + w] = v;
                sums[w / 2] += bf16_to_float(v);
            }
    }
}

#define TB __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma,f16c")))
#define NIB_BF16(v) ((__m512bh)_mm512_ternarylogic_epi32(v, nib_bits, one_bits, 0xEA))

/* R (1..4) consecutive output rows at once: independent chains for the out-of-order core, and
 * each input vector loaded once for all of them */
TB static inline __attribute__((always_inline)) void rows(
        const uint8_t *xp, int blocks, int groups, const uint8_t *w, const uint16_t *sc,
        const uint16_t *mn, float *y, const int R) {
    const __m512i nib_bits = _mm512_set1_epi16(0x0078), one_bits = _mm512_set1_epi16(0x3F80);
    const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512 sixteen = _mm512_set1_ps(16.0f);
    const int64_t stride = (int64_t)groups * 16;  /* bytes of one output row */
    __m512 acc[4], mins[4];  /* sum of s (sum(f x) - sum(x)); sum of m sum(x) */
    for (int r = 0; r < R; r++) acc[r] = mins[r] = _mm512_setzero_ps();
    for (int blk = 0; blk < blocks; blk++) {
        int left = groups - 4 * blk;  /* the last block may hold 1-3 groups: zeros past them */
        __mmask64 qm = left >= 4 ? ~(__mmask64)0 : (((__mmask64)1 << (16 * left)) - 1);
        __mmask8 gm = left >= 4 ? 0x0f : (__mmask8)((1u << left) - 1);
        const uint8_t *xb = xp + (size_t)blk * PREP_BYTES;
        __m512bh x0 = (__m512bh)_mm512_loadu_si512(xb), x1 = (__m512bh)_mm512_loadu_si512(xb + 64);
        __m512bh x2 = (__m512bh)_mm512_loadu_si512(xb + 128);
        __m512bh x3 = (__m512bh)_mm512_loadu_si512(xb + 192);
        __m512 xs = _mm512_loadu_ps((const float *)(xb + 256));
        __m512 xneg = _mm512_sub_ps(_mm512_setzero_ps(), xs);
        for (int r = 0; r < R; r++) {
            const uint8_t *wr = w + r * stride + blk * BLOCK_BYTES;
            const uint16_t *sr = sc + r * groups + 4 * blk, *mr = mn + r * groups + 4 * blk;
            __m512i q = _mm512_maskz_loadu_epi8(qm, wr);
            _mm_prefetch((const char *)(wr + PREFETCH_BYTES), _MM_HINT_T0);
            __m512 s = _mm512_permutexvar_ps(spread,
                _mm512_castps128_ps512(_mm_cvtph_ps(_mm_maskz_loadu_epi16(gm, sr))));
            __m512 m = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(
                _mm_cvtph_ps(_mm_maskz_loadu_epi16(gm, mr))));
            /* sum(f x) - sum(x), f = 1 + nib / 16: the weight is 16 s (f - 1) + m */
            __m512 d = _mm512_dpbf16_ps(xneg, NIB_BF16(_mm512_slli_epi16(q, 3)), x0);
            d = _mm512_dpbf16_ps(d, NIB_BF16(_mm512_srli_epi16(q, 1)), x1);
            d = _mm512_dpbf16_ps(d, NIB_BF16(_mm512_srli_epi16(q, 5)), x2);
            d = _mm512_dpbf16_ps(d, NIB_BF16(_mm512_srli_epi16(q, 9)), x3);
            acc[r] = _mm512_fmadd_ps(d, s, acc[r]);
            mins[r] = _mm512_fmadd_ps(m, xs, mins[r]);
        }
    }
    for (int r = 0; r < R; r++)
        y[r] = _mm512_reduce_add_ps(_mm512_fmadd_ps(sixteen, acc[r], mins[r]));
}

/* nt (1..PASS_ROWS) input rows against one output row: the block unpacked once for all of them */
TB static inline __attribute__((always_inline)) void pass_rows(
        const uint8_t *xp, int64_t xrow, int blocks, int groups, const uint8_t *w,
        const uint16_t *sc, const uint16_t *mn, float *y, int out, const int nt) {
    const __m512i nib_bits = _mm512_set1_epi16(0x0078), one_bits = _mm512_set1_epi16(0x3F80);
    const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    __m512 acc[PASS_ROWS], mins[PASS_ROWS];
    for (int t = 0; t < nt; t++) acc[t] = mins[t] = _mm512_setzero_ps();
    for (int blk = 0; blk < blocks; blk++) {
        int left = groups - 4 * blk;
        __mmask64 qm = left >= 4 ? ~(__mmask64)0 : (((__mmask64)1 << (16 * left)) - 1);
        __mmask8 gm = left >= 4 ? 0x0f : (__mmask8)((1u << left) - 1);
        __m512i q = _mm512_maskz_loadu_epi8(qm, w + blk * BLOCK_BYTES);
        _mm_prefetch((const char *)(w + blk * BLOCK_BYTES + PREFETCH_BYTES), _MM_HINT_T0);
        __m512bh v0 = NIB_BF16(_mm512_slli_epi16(q, 3)), v1 = NIB_BF16(_mm512_srli_epi16(q, 1));
        __m512bh v2 = NIB_BF16(_mm512_srli_epi16(q, 5)), v3 = NIB_BF16(_mm512_srli_epi16(q, 9));
        __m512 s = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(
            _mm_cvtph_ps(_mm_maskz_loadu_epi16(gm, sc + 4 * blk))));
        __m512 m = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(
            _mm_cvtph_ps(_mm_maskz_loadu_epi16(gm, mn + 4 * blk))));
        for (int t = 0; t < nt; t++) {
            const uint8_t *xb = xp + t * xrow + (size_t)blk * PREP_BYTES;
            __m512 xs = _mm512_loadu_ps((const float *)(xb + 256));
            __m512 d = _mm512_dpbf16_ps(_mm512_sub_ps(_mm512_setzero_ps(), xs), v0,
                                        (__m512bh)_mm512_loadu_si512(xb));
            d = _mm512_dpbf16_ps(d, v1, (__m512bh)_mm512_loadu_si512(xb + 64));
            d = _mm512_dpbf16_ps(d, v2, (__m512bh)_mm512_loadu_si512(xb + 128));
            d = _mm512_dpbf16_ps(d, v3, (__m512bh)_mm512_loadu_si512(xb + 192));
            acc[t] = _mm512_fmadd_ps(d, s, acc[t]);
            mins[t] = _mm512_fmadd_ps(m, xs, mins[t]);
        }
    }
    const __m512 sixteen = _mm512_set1_ps(16.0f);
    for (int t = 0; t < nt; t++)
        y[(int64_t)t * out] = _mm512_reduce_add_ps(_mm512_fmadd_ps(sixteen, acc[t], mins[t]));
}

TB static void all_rows(const uint8_t *xp, int T, int blocks, int groups, const uint8_t *q,
                        const uint16_t *scale, const uint16_t *mn, int out, float *y,
                        int threads) {
    int64_t stride = (int64_t)groups * 16, xrow = (int64_t)blocks * PREP_BYTES;
    if (T == 1) {
#pragma omp parallel for schedule(static) num_threads(threads)
        for (int o = 0; o < out; o += ROWS) {
            if (o + ROWS <= out) {
                rows(xp, blocks, groups, q + o * stride, scale + (int64_t)o * groups,
                     mn + (int64_t)o * groups, y + o, ROWS);
                continue;
            }
            for (int r = o; r < out; r++)  /* the last 1 .. ROWS - 1 rows */
                rows(xp, blocks, groups, q + r * stride, scale + (int64_t)r * groups,
                     mn + (int64_t)r * groups, y + r, 1);
        }
        return;
    }
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int o = 0; o < out; o++) {
        const uint8_t *w = q + o * stride;
        const uint16_t *s = scale + (int64_t)o * groups, *m = mn + (int64_t)o * groups;
        int t = 0;
        for (; t + PASS_ROWS <= T; t += PASS_ROWS)
            pass_rows(xp + t * xrow, xrow, blocks, groups, w, s, m, y + (int64_t)t * out + o,
                      out, PASS_ROWS);
        switch (T - t) {  /* a constant row count at each call: the loops unroll */
#define REST(n) case n: pass_rows(xp + t * xrow, xrow, blocks, groups, w, s, m, \
                                  y + (int64_t)t * out + o, out, n); break;
        REST(1) REST(2) REST(3) REST(4) REST(5) REST(6) REST(7)
#undef REST
        }
    }
}

#undef NIB_BF16

/* Rows [a, b) of the weight as bf16 [b - a, in]: nib * scale + min in fp32, rounded to nearest
 * even, for a GEMM on AMX where many input rows share each weight (dequantizing costs about as
 * much as a few rows of the dot-product path, and the GEMM's rows are then almost free). The
 * weight in rows (q [out][groups][16], scale and mn [out][groups]) or, with ``panels``, in
 * wo_panels.c's 16-output panels (q [panels][groups][4][16][4]: output o's bytes 4k..4k+3 of a
 * group are dword o % 16 of the group's vector k; scale and mn [panels][groups][16]): the same
 * group bytes either way, so the same bf16 values. */
TB static void dequant_rows(const uint8_t *q, const uint16_t *scale, const uint16_t *mn, int in,
                            int a, int b, uint16_t *out, int threads, int panels) {
    int groups = (in + GROUP - 1) / GROUP;
    const __m128i low4 = _mm_set1_epi8(0x0f);
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int o = a; o < b; o++) {
        uint16_t *dst = out + (int64_t)(o - a) * in;
        int64_t panel = o / 16, lane = o % 16;
        for (int g = 0; g < groups; g++) {
            __m128i raw;
            int64_t at;  /* the group's scale and min */
            if (panels) {
                const int32_t *v = (const int32_t *)(q + (panel * groups + g) * 256) + lane;
                raw = _mm_set_epi32(v[48], v[32], v[16], v[0]);
                at = (panel * groups + g) * 16 + lane;
            } else {
                raw = _mm_loadu_si128((const __m128i *)(q + ((int64_t)o * groups + g) * 16));
                at = (int64_t)o * groups + g;
            }
            __m128i lo = _mm_and_si128(raw, low4), hi = _mm_and_si128(_mm_srli_epi16(raw, 4), low4);
            __m512 s = _mm512_set1_ps(_cvtsh_ss(scale[at]));
            __m512 m = mn ? _mm512_set1_ps(_cvtsh_ss(mn[at]))
                          : _mm512_mul_ps(s, _mm512_set1_ps(-8.0f));  /* Q4_0: min = -8 scale */
            __m256bh w0 = _mm512_cvtneps_pbh(_mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo)), s, m));
            __m256bh w1 = _mm512_cvtneps_pbh(_mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi)), s, m));
            int left = in - g * GROUP;  /* elements 0-15 low nibbles, 16-31 high ones */
            __mmask16 m0 = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
            __mmask16 m1 = left >= 32 ? 0xffff : left <= 16 ? 0 : (__mmask16)((1u << (left - 16)) - 1);
            _mm256_mask_storeu_epi16(dst + g * GROUP, m0, (__m256i)w0);
            _mm256_mask_storeu_epi16(dst + g * GROUP + 16, m1, (__m256i)w1);
        }
    }
}

int wo_int4_dequant_bf16(const uint8_t *q, const uint16_t *scale, const uint16_t *mn, int in,
                         int a, int b, uint16_t *out, int threads) {
    static int has = -1;
    if (has < 0) has = wo_has_bf16();
    if (!has) return -1;
    dequant_rows(q, scale, mn, in, a, b, out, threads, 0);
    return 0;
}

int wo_int4_panels_dequant_bf16(const uint8_t *q, const uint16_t *scale, const uint16_t *mn,
                                int in, int a, int b, uint16_t *out, int threads) {
    static int has = -1;
    if (has < 0) has = wo_has_bf16();
    if (!has) return -1;
    dequant_rows(q, scale, mn, in, a, b, out, threads, 1);
    return 0;
}

/* y [T, out] fp32 = x [T, in] bf16 @ dequant(W)^T; 0 when done, -1 where the CPU lacks
 * AVX512-BF16 or the buffer cannot be had (the caller then converts x to fp32 for wo_int4) */
int wo_int4_bf16(const uint16_t *x, int T, int in, const uint8_t *q, const uint16_t *scale,
                 const uint16_t *mn, int out, float *y, int threads) {
    static int has = -1;
    if (has < 0) has = wo_has_bf16();
    if (!has) return -1;
    int groups = (in + GROUP - 1) / GROUP, blocks = (groups + 3) / 4;
    uint8_t *xp = aligned_alloc(64, (size_t)T * blocks * PREP_BYTES);
    if (xp == NULL) return -1;
    for (int t = 0; t < T; t++)
        prep(x + (int64_t)t * in, in, blocks, xp + (size_t)t * blocks * PREP_BYTES);
    all_rows(xp, T, blocks, groups, q, scale, mn, out, y, threads);
    free(xp);
    return 0;
}
#else
int wo_has_bf16(void) { return 0; }
int wo_int4_dequant_bf16(const uint8_t *q, const uint16_t *scale, const uint16_t *mn, int in,
                         int a, int b, uint16_t *out, int threads) {
    return -1;
}
int wo_int4_panels_dequant_bf16(const uint8_t *q, const uint16_t *scale, const uint16_t *mn,
                                int in, int a, int b, uint16_t *out, int threads) {
    return -1;
}
int wo_int4_bf16(const uint16_t *x, int T, int in, const uint8_t *q, const uint16_t *scale,
                 const uint16_t *mn, int out, float *y, int threads) {
    return -1;
}
#endif
