/* Causal attention of one sequence's new rows in bf16 on AVX512-BF16 (a prefill chunk): query i
 * of n sits at position S - n + i and sees keys 0 .. S - n + i (the last n keys are its own
 * chunk's). Flash-style: 4 query rows at a time walk the keys in blocks of 32, each block's
 * scores by pair products (vdpbf16ps: 16 keys a vector), an online softmax in fp32, and the
 * values' weighted sums by pair products again (16 output dims a vector); only blocks the
 * rows can see are read. Keys and values are first packed per KV head, pairs of dims (keys) or
 * pairs of keys (values) side by side, so every product is one vector load.
 * torch's CPU SDPA ran a 512-token causal chunk (9 heads of 64) at 61 GFLOP/s on Zen 4.
 */
#include "../minisgl_kernels.h"
#include "../cpu_features.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define RQ 4   /* query rows a block (8, and 64 keys a block, measured no faster) */
#define BK 32  /* keys a block (a multiple of 32) */

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define TBF __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))
#define IBF static inline __attribute__((always_inline, \
    target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))

static int has_bf16(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && cpu_feature_allowed("avx512_bf16");
}

/* e^x for x <= 0 (and -inf -> 0): x = n ln2 + r, |r| <= ln2 / 2, e^r by a degree-6 polynomial
 * (within 2e-7 relative), times 2^n by scalef */
IBF __m512 exp_neg(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* keys [S][row] -> kp [Hkv][blocks][D / 2][BK][2], values -> vp [Hkv][blocks][BK / 2][D][2]
 * (bf16 bits; keys past S zero: every row's causal limit masks them) */
static void pack(const uint16_t *k, int k_row, const uint16_t *v, int v_row, int S, int Hkv,
                 int D, int blocks, uint16_t *kp, uint16_t *vp, int threads) {
#pragma omp parallel for collapse(2) num_threads(threads)
    for (int h = 0; h < Hkv; h++)
        for (int b = 0; b < blocks; b++) {
            uint16_t *kb = kp + ((size_t)h * blocks + b) * BK * D;
            uint16_t *vb = vp + ((size_t)h * blocks + b) * BK * D;
            for (int j = 0; j < BK; j++) {
                int key = b * BK + j;
                const uint16_t *kr = k + (size_t)key * k_row + (size_t)h * D;
                const uint16_t *vr = v + (size_t)key * v_row + (size_t)h * D;
                for (int d = 0; d < D; d++) {
                    kb[((size_t)(d / 2) * BK + j) * 2 + d % 2] = key < S ? kr[d] : 0;
                    vb[((size_t)(j / 2) * D + d) * 2 + j % 2] = key < S ? vr[d] : 0;
                }
            }
        }
}

/* rows i0 .. i0 + RQ - 1 (those past n repeat row n - 1, never stored) of query head h */
TBF static void rows_block(const uint16_t *q, int q_row, int n, int S, int Hq, int G, int D,
                           int blocks, const uint16_t *kp, const uint16_t *vp, float scale,
                           int h, int i0, uint16_t *out) {
    enum { NC = BK / 16 };  /* vectors of 16 keys a block */
    const int start = S - n;
    const uint16_t *qr[RQ];
    int limit[RQ];  /* the last key each row sees */
    float m[RQ], l[RQ];
    float acc[RQ][256] __attribute__((aligned(64)));
    uint16_t pw[RQ][BK] __attribute__((aligned(64)));
    for (int r = 0; r < RQ; r++) {
        int i = i0 + r < n ? i0 + r : n - 1;
        qr[r] = q + (size_t)i * q_row + (size_t)h * D;
        limit[r] = start + i;
        m[r] = -INFINITY;
        l[r] = 0.0f;
        memset(acc[r], 0, sizeof(float) * D);
    }
    const uint16_t *kh = kp + (size_t)(h / G) * blocks * BK * D;
    const uint16_t *vh = vp + (size_t)(h / G) * blocks * BK * D;
    const int last = limit[RQ - 1] / BK;  /* the rows' last block */
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    for (int b = 0; b <= last; b++) {
        const uint16_t *kb = kh + (size_t)b * BK * D, *vb = vh + (size_t)b * BK * D;
        __m512 s[RQ][NC];
        for (int r = 0; r < RQ; r++)
            for (int c = 0; c < NC; c++) s[r][c] = _mm512_setzero_ps();
        for (int dp = 0; dp < D / 2; dp++) {  /* scores: BK keys x RQ rows, a pair of dims */
            __m512bh kk[NC];
            for (int c = 0; c < NC; c++)
                kk[c] = (__m512bh)_mm512_loadu_si512(kb + ((size_t)dp * BK + 16 * c) * 2);
            for (int r = 0; r < RQ; r++) {
                __m512bh qq = (__m512bh)_mm512_set1_epi32(*(const int32_t *)(qr[r] + 2 * dp));
                for (int c = 0; c < NC; c++) s[r][c] = _mm512_dpbf16_ps(s[r][c], kk[c], qq);
            }
        }
        for (int r = 0; r < RQ; r++) {  /* online softmax of the block's scores */
            int seen = limit[r] - b * BK;  /* keys b BK + 0..seen are visible */
            __mmask16 keep[NC];
            __m512 x[NC], top = _mm512_set1_ps(-INFINITY);
            for (int c = 0; c < NC; c++) {
                keep[c] = seen >= 16 * c + 15 ? (__mmask16)0xffff : _mm512_cmple_epi32_mask(
                    _mm512_add_epi32(lane, _mm512_set1_epi32(16 * c)), _mm512_set1_epi32(seen));
                x[c] = _mm512_mask_mul_ps(_mm512_set1_ps(-INFINITY), keep[c], s[r][c],
                                          _mm512_set1_ps(scale));
                top = _mm512_max_ps(top, x[c]);
            }
            float most = _mm512_reduce_max_ps(top);
            float mn = most > m[r] ? most : m[r];
            if (mn == -INFINITY) {  /* nothing seen yet: all weights 0 */
                memset(pw[r], 0, sizeof pw[r]);
                continue;
            }
            /* masked keys weigh 0 (exp_neg's clamp would leave them e^-87) */
            __m512 p[NC], sum = _mm512_setzero_ps();
            for (int c = 0; c < NC; c++) {
                p[c] = _mm512_maskz_mov_ps(keep[c], exp_neg(_mm512_sub_ps(x[c],
                                                                         _mm512_set1_ps(mn))));
                sum = _mm512_add_ps(sum, p[c]);
            }
            float alpha = m[r] == -INFINITY ? 0.0f : expf(m[r] - mn);
            m[r] = mn;
            l[r] = l[r] * alpha + _mm512_reduce_add_ps(sum);
            if (alpha != 1.0f)
                for (int d = 0; d < D; d += 16)
                    _mm512_store_ps(acc[r] + d, _mm512_mul_ps(_mm512_load_ps(acc[r] + d),
                                                              _mm512_set1_ps(alpha)));
            for (int c = 0; c < NC; c += 2)
                _mm512_store_si512(pw[r] + 16 * c,
                                   (__m512i)_mm512_cvtne2ps_pbh(p[c + 1], p[c]));
        }
        for (int d0 = 0; d0 < D; d0 += 64) {  /* values: 64 dims x RQ rows, a pair of keys */
            __m512 o[RQ][4];
            for (int r = 0; r < RQ; r++)
                for (int c = 0; c < 4; c++) o[r][c] = _mm512_load_ps(acc[r] + d0 + 16 * c);
            for (int jp = 0; jp < BK / 2; jp++) {
                const uint16_t *vr = vb + ((size_t)jp * D + d0) * 2;
                __m512bh vv[4];
                for (int c = 0; c < 4; c++) vv[c] = (__m512bh)_mm512_loadu_si512(vr + 32 * c);
                for (int r = 0; r < RQ; r++) {
                    __m512bh pp = (__m512bh)_mm512_set1_epi32(*(const int32_t *)(pw[r] + 2 * jp));
                    for (int c = 0; c < 4; c++) o[r][c] = _mm512_dpbf16_ps(o[r][c], vv[c], pp);
                }
            }
            for (int r = 0; r < RQ; r++)
                for (int c = 0; c < 4; c++) _mm512_store_ps(acc[r] + d0 + 16 * c, o[r][c]);
        }
    }
    for (int r = 0; r < RQ && i0 + r < n; r++) {
        uint16_t *dst = out + ((size_t)(i0 + r) * Hq + h) * D;
        __m512 inv = _mm512_set1_ps(1.0f / l[r]);
        for (int d = 0; d < D; d += 16)
            _mm256_storeu_si256((__m256i *)(dst + d), (__m256i)_mm512_cvtneps_pbh(
                                    _mm512_mul_ps(_mm512_load_ps(acc[r] + d), inv)));
    }
}

int prefill_attention(const void *q, int q_row, const void *k, int k_row, const void *v,
                      int v_row, int n, int S, int Hq, int Hkv, int D, float scale, void *out,
                      int threads) {
    static int ok = -1;
    if (ok < 0) ok = has_bf16();
    if (!ok || D % 64 != 0 || D > 256 || n < 1 || n > S || Hkv < 1 || Hq % Hkv != 0) return -1;
    int blocks = (S + BK - 1) / BK;
    size_t each = (size_t)Hkv * blocks * BK * D;
    uint16_t *kp = aligned_alloc(64, each * 2 * sizeof(uint16_t));
    if (kp == NULL) return -1;
    uint16_t *vp = kp + each;
    pack(k, k_row, v, v_row, S, Hkv, D, blocks, kp, vp, threads);
    int qblocks = (n + RQ - 1) / RQ, G = Hq / Hkv;
    /* the later row blocks see more keys: handed out a few at a time, last first */
#pragma omp parallel for schedule(dynamic, 2) num_threads(threads)
    for (int t = 0; t < Hq * qblocks; t++) {
        int qb = qblocks - 1 - t / Hq, h = t % Hq;
        rows_block(q, q_row, n, S, Hq, G, D, blocks, kp, vp, scale, h, qb * RQ, out);
    }
    free(kp);
    return 0;
}
#else
int prefill_attention(const void *q, int q_row, const void *k, int k_row, const void *v,
                      int v_row, int n, int S, int Hq, int Hkv, int D, float scale, void *out,
                      int threads) {
    (void)q; (void)q_row; (void)k; (void)k_row; (void)v; (void)v_row; (void)n; (void)S;
    (void)Hq; (void)Hkv; (void)D; (void)scale; (void)out; (void)threads;
    return -1;
}
#endif
