/* int4 weights against int8 inputs on AVX512-VNNI's dot product (ggml's Q4_1 x Q8_1); on AVX2
 * without it, avx2/wo_int4_q8_avx2.c.
 *
 * Each row of x is quantized once per call, in groups of 32 inputs: d = max|x| / 127 and
 * qx = round(x / d) (int8), so x ~= qx * d. A group's product with a weight group
 * (W = nib * s + m) is then s d sum(nib qx) + m d sum(qx): vpdpbusd sums four nib x qx byte
 * products into each dword, 64 of them an instruction, where the fp32 kernels
 * (wo_matmul_avx512.c) turn every nibble into a float first. That conversion, not the memory,
 * bounded int4 at one row (14 GB/s against 60 of read bandwidth, 2 threads, Zen 4).
 *
 * A block is four groups: the weight's 64 bytes as they lie (byte j of group k holds element j
 * in its low nibble and element j + 16 in its high one), and the inputs laid out to match:
 * elements 0-15 of each group (64 bytes), then elements 16-31 (64 bytes), then each group's d in
 * its four dword lanes; the first block of every four also holds d sum(qx) of their sixteen
 * groups, which meet the sixteen mins in one FMA.
 * x and y are fp32 or bf16; a residual (y's dtype, or NULL) is added before y is rounded.
 */
#include "../minisgl_kernels.h"
#include "../portable/wo_matmul.h"
#include <stdlib.h>
#include <string.h>

#include "../cpu_features.h"

#define PREP_BYTES 256  /* a block of one row: 128 int8 inputs, 16 floats d, [16 floats d sum] */

#ifdef HAVE_X86
#include <immintrin.h>

#define TQ __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")))
#define INLQ static inline __attribute__((always_inline, \
    target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")))

static int has_vnni(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && cpu_feature_allowed("avx512_vnni");
}

/* 16 inputs from p (fp32 or bf16), the first n of them; zeros after */
INLQ __m512 load16(const void *p, int bf16, int n) {
    __mmask16 m = n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n > 0 ? n : 0)) - 1);
    if (!bf16) return _mm512_maskz_loadu_ps(m, p);
    __m256i h = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* one row of x ([in] fp32 or bf16) -> [blocks][PREP_BYTES] */
TQ static void prep_row(const void *x, int bf16, int in, int blocks, uint8_t *out) {
    for (int blk = 0; blk < blocks; blk++) {
        int8_t *q = (int8_t *)(out + (size_t)blk * PREP_BYTES);
        float *d = (float *)(q + 128), *ds = d + 16;
        for (int k = 0; k < 4; k++) {
            int at = (4 * blk + k) * GROUP, left = in - at;
            const char *src = (const char *)x + (size_t)(left > 0 ? at : 0) * (bf16 ? 2 : 4);
            __m512 a = load16(src, bf16, left), b = load16(src + (bf16 ? 32 : 64), bf16, left - 16);
            float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
            float dk = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
            /* round to nearest even (the default rounding mode), as torch.round does */
            __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, _mm512_set1_ps(inv)));
            __m512i qb = _mm512_cvtps_epi32(_mm512_mul_ps(b, _mm512_set1_ps(inv)));
            _mm_storeu_si128((__m128i *)(q + 16 * k), _mm512_cvtsepi32_epi8(qa));
            _mm_storeu_si128((__m128i *)(q + 64 + 16 * k), _mm512_cvtsepi32_epi8(qb));
            int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb));
            for (int l = 0; l < 4; l++) d[4 * k + l] = dk;
            /* d sum(qx) of the 16 groups of blocks blk & ~3 .. (blk & ~3) + 3, in group order,
             * in the first of those blocks (zeros past the row's groups) */
            float *quad = (float *)(out + (size_t)(blk & ~3) * PREP_BYTES + 128 + 64);
            quad[4 * (blk & 3) + k] = dk * (float)sum;
        }
    }
}

/* nt (1..TILE) prepared rows against one weight row: their sums, in acc[t]. Per block of four
 * groups and row: two dot products, a conversion, the scales' product and one FMA; the mins'
 * term once per four blocks (sixteen groups, a lane each). */
INLQ void q8_tile(const uint8_t *xp, int blocks, int groups, const uint8_t *w,
                  const uint16_t *sc, const uint16_t *mn, float *acc, const int nt) {
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    __m512 dot[TILE], mins[TILE];
    for (int t = 0; t < nt; t++) dot[t] = mins[t] = _mm512_setzero_ps();
    for (int b0 = 0; b0 < blocks; b0 += 4) {
        int g0 = 4 * b0, left16 = groups - g0;  /* groups from g0 on */
        __mmask16 gm = left16 >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left16) - 1);
        __m512 s16 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(gm, sc + g0));
        __m512 m16 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(gm, mn + g0));
        for (int t = 0; t < nt; t++) {
            const float *quad = (const float *)(xp + ((size_t)t * blocks + b0) * PREP_BYTES + 192);
            mins[t] = _mm512_fmadd_ps(m16, _mm512_load_ps(quad), mins[t]);
        }
        int end = b0 + 4 < blocks ? b0 + 4 : blocks;
        for (int blk = b0; blk < end; blk++) {
            /* the last block may hold 1-3 groups: the rest loads as zeros (scale 0) */
            int left = groups - 4 * blk;
            __mmask64 qm = left >= 4 ? ~(__mmask64)0 : (((__mmask64)1 << (16 * left)) - 1);
            _mm_prefetch((const char *)(w + blk * 64 + PREFETCH_BYTES), _MM_HINT_T0);
            __m512i raw = _mm512_maskz_loadu_epi8(qm, w + blk * 64);
            __m512i lo = _mm512_and_si512(raw, low4);
            __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
            /* lanes 4k..4k+3 get group k's scale */
            const int j = 4 * (blk - b0);
            __m512 s = _mm512_permutexvar_ps(_mm512_setr_epi32(
                j, j, j, j, j + 1, j + 1, j + 1, j + 1, j + 2, j + 2, j + 2, j + 2,
                j + 3, j + 3, j + 3, j + 3), s16);
            for (int t = 0; t < nt; t++) {
                const uint8_t *p = xp + ((size_t)t * blocks + blk) * PREP_BYTES;
                __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo,
                                                   _mm512_load_si512((const void *)p));
                sums = _mm512_dpbusd_epi32(sums, hi, _mm512_load_si512((const void *)(p + 64)));
                __m512 sd = _mm512_mul_ps(s, _mm512_load_ps((const float *)(p + 128)));
                dot[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), sd, dot[t]);
            }
        }
    }
    for (int t = 0; t < nt; t++) acc[t] = _mm512_reduce_add_ps(_mm512_add_ps(dot[t], mins[t]));
}

static inline uint16_t float_to_bf16(float f) {  /* round to nearest even */
    union { float f; uint32_t u; } v = {.f = f};
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40);  /* NaN */
    return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}

static inline float bf16_value(const void *p, int64_t i) {
    union { uint32_t u; float f; } v = {.u = (uint32_t)((const uint16_t *)p)[i] << 16};
    return v.f;
}

TQ static void all_rows(const uint8_t *xp, int T, int blocks, int groups, const uint8_t *q,
                        const uint16_t *scale, const uint16_t *mn, int out, void *y, int y_bf16,
                        const void *residual, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int o = 0; o < out; o++) {
        const uint8_t *w = q + (int64_t)o * groups * 16;
        const uint16_t *s = scale + (int64_t)o * groups, *m = mn + (int64_t)o * groups;
        for (int t0 = 0; t0 < T; t0 += TILE) {
            float acc[TILE];
            const uint8_t *xt = xp + (size_t)t0 * blocks * PREP_BYTES;
            switch (T - t0 < TILE ? T - t0 : TILE) {  /* a constant row count at each call */
            case 1: q8_tile(xt, blocks, groups, w, s, m, acc, 1); break;
            case 2: q8_tile(xt, blocks, groups, w, s, m, acc, 2); break;
            case 3: q8_tile(xt, blocks, groups, w, s, m, acc, 3); break;
            default: q8_tile(xt, blocks, groups, w, s, m, acc, TILE); break;
            }
            for (int t = t0; t < T && t < t0 + TILE; t++) {
                int64_t at = (int64_t)t * out + o;
                float v = acc[t - t0];
                if (y_bf16) {
                    if (residual) v += bf16_value(residual, at);
                    ((uint16_t *)y)[at] = float_to_bf16(v);
                } else {
                    ((float *)y)[at] = residual ? v + ((const float *)residual)[at] : v;
                }
            }
        }
    }
}

int wo_int4_q8(const void *x, int x_bf16, int T, int in, const uint8_t *q,
               const uint16_t *scale, const uint16_t *mn, int out, void *y, int y_bf16,
               const void *residual, int threads) {
    static int has = -1;
    if (has < 0) has = has_vnni();
    if (!has)
        return wo_int4_q8_avx2(x, x_bf16, T, in, q, scale, mn, out, y, y_bf16, residual, threads);
    int groups = (in + GROUP - 1) / GROUP, blocks = (groups + 3) / 4;
    uint8_t *xp = aligned_alloc(64, (size_t)T * blocks * PREP_BYTES);
    if (xp == NULL) return -1;
    for (int t = 0; t < T; t++) {  /* the quads' sums of groups past the row stay zero */
        uint8_t *row = xp + (size_t)t * blocks * PREP_BYTES;
        for (int b0 = 0; b0 < blocks; b0 += 4) memset(row + (size_t)b0 * PREP_BYTES + 192, 0, 64);
    }
    for (int t = 0; t < T; t++)
        prep_row((const char *)x + (size_t)t * in * (x_bf16 ? 2 : 4), x_bf16, in, blocks,
                 xp + (size_t)t * blocks * PREP_BYTES);
    all_rows(xp, T, blocks, groups, q, scale, mn, out, y, y_bf16, residual, threads);
    free(xp);
    return 0;
}
#else
int wo_int4_q8(const void *x, int x_bf16, int T, int in, const uint8_t *q,
               const uint16_t *scale, const uint16_t *mn, int out, void *y, int y_bf16,
               const void *residual, int threads) {
    (void)x; (void)x_bf16; (void)T; (void)in; (void)q; (void)scale; (void)mn; (void)out;
    (void)y; (void)y_bf16; (void)residual; (void)threads;
    return -1;
}
#endif
