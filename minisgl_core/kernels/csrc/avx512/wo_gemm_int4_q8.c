/* int4 weights against int8 inputs as a GEMM on AVX512-VNNI, for many rows (a decode batch, a
 * prefill chunk): y[T, out] = q8(x)[T, in] @ dequant(W)^T, the inputs rounded as wo_int4_q8.c
 * rounds them.
 *
 * Each panel of 16 output rows is unpacked once per call into vpdpbusd's order, [groups][8
 * quads][16 outputs][4 nibbles as bytes] (quad k: the group's inputs 4k..4k+3) (two ANDs and a shift per 4 x 16 weights, against
 * wo_gemm_int4_bf16.c's conversion of every weight to bf16), with its scales and mins as fp32
 * [groups][16]. Then every block of up to RB input rows runs over it: one load of 64 weight bytes
 * serves RB vpdpbusd, each against 4 input bytes broadcast (64 products an instruction, twice
 * vdpbf16ps's 32); a group's sums are scaled once per group and row.
 */
#include "../minisgl_kernels.h"
#include "../portable/wo_matmul.h"
#include <stdlib.h>

#include "../cpu_features.h"

#define RB 8             /* input rows a register block: RB int32 + RB fp32 accumulators */
#define QUADS 8          /* 4-input steps a group */
#define PANEL_BYTES 512  /* a group's unpacked weights of one panel: QUADS x 16 x 4 */

#ifdef HAVE_X86
#include <immintrin.h>

#define TG __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")))
#define INLG static inline __attribute__((always_inline, \
    target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")))

static int has_vnni(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && cpu_feature_allowed("avx512_vnni");
}

/* outputs [o0, o0 + n) (n <= 16; the rest zeros) -> pw [groups][PANEL_BYTES], ps and pm
 * [groups][16] fp32 */
TG static void pack_panel(const uint8_t *q, const uint16_t *scale, const uint16_t *mn,
                          int groups, int o0, int n, uint8_t *pw, float *ps, float *pm) {
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    const __mmask16 live = n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
    /* byte offset of output l's group 0 */
    const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                                               11, 12, 13, 14, 15),
                                            _mm512_set1_epi32(groups * 16));
    const uint8_t *base = q + (int64_t)o0 * groups * 16;
    for (int g = 0; g < groups; g++) {
        uint8_t *dst = pw + (size_t)g * PANEL_BYTES;
        for (int k = 0; k < 4; k++) {  /* dword k of each output's 16 bytes: 8 nibbles */
            __m512i at = _mm512_add_epi32(rows, _mm512_set1_epi32(g * 16 + 4 * k));
            __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, at, base, 1);
            _mm512_store_si512((void *)(dst + 64 * k), _mm512_and_si512(v, low4));  /* j */
            _mm512_store_si512((void *)(dst + 64 * (k + 4)),                        /* j + 16 */
                               _mm512_and_si512(_mm512_srli_epi32(v, 4), low4));
        }
        for (int l = 0; l < 16; l++) {
            int64_t at = (int64_t)(o0 + l) * groups + g;
            ps[g * 16 + l] = l < n ? _cvtsh_ss(scale[at]) : 0.0f;
            pm[g * 16 + l] = l < n ? _cvtsh_ss(mn[at]) : 0.0f;
        }
    }
}

static inline uint16_t round_bf16(float f) {  /* round to nearest even */
    union { float f; uint32_t u; } v = {.f = f};
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40);  /* NaN */
    return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}

/* nr (1..RB) rows from t0 over one unpacked panel; their 16 sums stored at outputs o0.. */
INLG void panel_rows(const uint8_t *pw, const float *ps, const float *pm, int groups,
                     const int8_t *xq, const float *d, const float *ds, int t0, const int nr,
                     int o0, int n, int out, void *y, int y_bf16, const void *residual) {
    __m512 acc[RB];
    for (int r = 0; r < nr; r++) acc[r] = _mm512_setzero_ps();
    for (int g = 0; g < groups; g++) {
        __m512i sums[RB];
        for (int r = 0; r < nr; r++) sums[r] = _mm512_setzero_si512();
        const uint8_t *wg = pw + (size_t)g * PANEL_BYTES;
        for (int k = 0; k < QUADS; k++) {
            __m512i wv = _mm512_load_si512((const void *)(wg + 64 * k));
            for (int r = 0; r < nr; r++) {  /* inputs 4k..4k+3 of the group, broadcast */
                const int8_t *xr = xq + ((size_t)(t0 + r) * groups + g) * 32 + 4 * k;
                sums[r] = _mm512_dpbusd_epi32(sums[r], wv, _mm512_set1_epi32(*(const int32_t *)xr));
            }
        }
        __m512 s = _mm512_load_ps(ps + g * 16), m = _mm512_load_ps(pm + g * 16);
        for (int r = 0; r < nr; r++) {
            size_t at = (size_t)(t0 + r) * groups + g;
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[r]),
                                     _mm512_mul_ps(s, _mm512_set1_ps(d[at])), acc[r]);
            acc[r] = _mm512_fmadd_ps(m, _mm512_set1_ps(ds[at]), acc[r]);
        }
    }
    const __mmask16 live = n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
    for (int r = 0; r < nr; r++) {
        int64_t at = (int64_t)(t0 + r) * out + o0;
        if (y_bf16) {
            float v[16];
            _mm512_storeu_ps(v, acc[r]);
            uint16_t *yr = (uint16_t *)y + at;
            const uint16_t *rr = residual ? (const uint16_t *)residual + at : NULL;
            for (int l = 0; l < n; l++) {
                float f = v[l];
                if (rr) {
                    union { uint32_t u; float f; } b = {.u = (uint32_t)rr[l] << 16};
                    f += b.f;
                }
                yr[l] = round_bf16(f);
            }
        } else {
            __m512 v = acc[r];
            if (residual)
                v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(live, (const float *)residual + at));
            _mm512_mask_storeu_ps((float *)y + at, live, v);
        }
    }
}

/* wo_gemm_int4_q8 once the CPU is known to run it (no AVX-512 instruction may run before) */
TG static int gemm(const void *x, int x_bf16, int T, int in, const uint8_t *q,
                   const uint16_t *scale, const uint16_t *mn, int out, void *y, int y_bf16,
                   const void *residual, int threads) {
    int groups = (in + GROUP - 1) / GROUP, panels = (out + 15) / 16;
    size_t n = (size_t)T * groups;
    int8_t *xq = malloc(n * 32);
    float *d = malloc(n * sizeof(float)), *ds = malloc(n * sizeof(float));
    int failed = xq == NULL || d == NULL || ds == NULL;
    if (!failed) wo_q8_prep_rows(x, x_bf16, T, in, groups, xq, d, ds);
#pragma omp parallel num_threads(threads) reduction(| : failed)
    {
        /* a panel's unpacked weights, scales and mins: this thread's, reused panel after panel */
        size_t wbytes = (size_t)groups * PANEL_BYTES, fbytes = (size_t)groups * 16 * sizeof(float);
        uint8_t *pw = failed ? NULL : aligned_alloc(64, wbytes + 2 * fbytes);
        if (pw == NULL) failed = 1;
#pragma omp for schedule(static)
        for (int p = 0; p < panels; p++) {
            if (pw == NULL) continue;
            int o0 = 16 * p, cols = out - o0 < 16 ? out - o0 : 16;
            float *ps = (float *)(pw + wbytes), *pm = (float *)(pw + wbytes + fbytes);
            pack_panel(q, scale, mn, groups, o0, cols, pw, ps, pm);
            for (int t0 = 0; t0 < T; t0 += RB) {
                switch (T - t0 < RB ? T - t0 : RB) {  /* a constant row count at each call */
#define ROWS(k) case k: panel_rows(pw, ps, pm, groups, xq, d, ds, t0, k, o0, cols, out, y, \
                                   y_bf16, residual); break;
                ROWS(1) ROWS(2) ROWS(3) ROWS(4) ROWS(5) ROWS(6) ROWS(7)
                default: panel_rows(pw, ps, pm, groups, xq, d, ds, t0, RB, o0, cols, out, y,
                                    y_bf16, residual);
#undef ROWS
                }
            }
        }
        free(pw);
    }
    free(xq); free(d); free(ds);
    return failed ? -1 : 0;
}

int wo_gemm_int4_q8(const void *x, int x_bf16, int T, int in, const uint8_t *q,
                    const uint16_t *scale, const uint16_t *mn, int out, void *y, int y_bf16,
                    const void *residual, int threads) {
    static int has = -1;
    if (has < 0) has = has_vnni();
    return has ? gemm(x, x_bf16, T, in, q, scale, mn, out, y, y_bf16, residual, threads) : -1;
}
#else
int wo_gemm_int4_q8(const void *x, int x_bf16, int T, int in, const uint8_t *q,
                    const uint16_t *scale, const uint16_t *mn, int out, void *y, int y_bf16,
                    const void *residual, int threads) {
    (void)x; (void)x_bf16; (void)T; (void)in; (void)q; (void)scale; (void)mn; (void)out;
    (void)y; (void)y_bf16; (void)residual; (void)threads;
    return -1;
}
#endif
