/* What the batch-invariant kernels share: bf16 conversion, a dot product in one fixed order,
 * and the per-ISA copies of a function.
 *
 * A result of these kernels depends only on its own row's inputs, never on how many rows the
 * call has or where the row sits: every sum runs over its inner dimension in one order (LANES
 * partial sums by index modulo LANES, each taken in index order, then one fixed tree), with
 * fmaf (exactly rounded, so the plain C, AVX2 and AVX-512 copies agree) and no reassociation
 * (this file is built without -ffast-math's associative-math, unlike paged_attention.c). Work
 * is split over rows and output columns, never over a sum.
 */
#ifndef MINISGL_BI_COMMON_H
#define MINISGL_BI_COMMON_H

#include <math.h>
#include <stdint.h>

#define BI_LANES 16 /* partial sums of a dot product: one AVX-512 register, two AVX2 ones */
#define BI_INLINE static inline __attribute__((always_inline))

BI_INLINE float bi_bf16_to_float(uint16_t h) {
    union { uint32_t u; float f; } v;
    v.u = (uint32_t)h << 16;
    return v.f;
}

BI_INLINE uint16_t bi_float_to_bf16(float f) { /* round to nearest even, as torch does */
    union { uint32_t u; float f; } v;
    v.f = f;
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40); /* NaN */
    return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1)) >> 16);
}

/* the BI_LANES partial sums added in a fixed tree (16 -> 8 -> 4 -> 2 -> 1) */
BI_INLINE float bi_tree_sum(float *acc) {
    for (int half = BI_LANES / 2; half > 0; half /= 2)
        for (int j = 0; j < half; j++) acc[j] += acc[j + half];
    return acc[0];
}

/* sum over d < n of a[d] * b[d], both fp32, in the fixed order above */
BI_INLINE float bi_dot(const float *a, const float *b, int n) {
    float acc[BI_LANES] = {0};
    int full = n / BI_LANES * BI_LANES;
    for (int i = 0; i < full; i += BI_LANES)
        for (int j = 0; j < BI_LANES; j++) acc[j] = fmaf(a[i + j], b[i + j], acc[j]);
    for (int i = full; i < n; i++) acc[i - full] = fmaf(a[i], b[i], acc[i - full]);
    return bi_tree_sum(acc);
}

/* row r of a [*, n] fp32 or bf16 tensor into fp32 ``dst`` (a copy either way: exact) */
BI_INLINE void bi_load_row(const void *base, int64_t r, int n, int bf16, float *dst) {
    if (bf16) {
        const uint16_t *p = (const uint16_t *)base + r * n;
        for (int i = 0; i < n; i++) dst[i] = bi_bf16_to_float(p[i]);
    } else {
        const float *p = (const float *)base + r * n;
        for (int i = 0; i < n; i++) dst[i] = p[i];
    }
}

/* the plain C, AVX2 and AVX-512 copies of a function whose body is the always-inline NAME##_body
 * (same arithmetic in each: fmaf, no reassociation; the wider ones only run it faster) */
#if defined(__x86_64__)
#define BI_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define BI_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))
#endif

#endif
