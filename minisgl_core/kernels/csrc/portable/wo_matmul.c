/* Weight-only int8 / int4 matmul on the CPU: y[T, out] = x[T, in] @ dequant(W)^T, fp32 x and y.
 *
 * int8: W[o, i] = q[o, i] * scale[o]     (q int8 [out, in], scale fp32 [out]).
 * int4: groups of 32 inputs per output row; W[o, 32 g + j] = nib * scale[o, g] + min[o, g], where
 *       byte j (0..15) of a group's 16 bytes holds element j in its low nibble and element j + 16
 *       in its high one (ggml's Q4_1 order); scale and min are fp16 [out, groups].
 * Each output row's weights are read from memory once per call: every TILE rows of x pass over
 * that row while it sits in L1. Output rows are split across threads with OpenMP. isa: 0 plain C,
 * 1 AVX2+FMA, 2 AVX-512; the caller picks (wo_best_isa says what the CPU runs). This file holds
 * the entry points, the plain C rows and the choice; the AVX2 and AVX-512 rows are in avx2/ and
 * avx512/ (wo_shared.h declares them).
 */
#include "../minisgl_kernels.h"
#include "wo_shared.h"
#include <stdint.h>
#include <stdlib.h>

#include "../cpu_features.h"

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
        if (isa == 2) { wo_i8_row_avx512(x, T, in, w, scale[o], y + o, out); continue; }
        if (isa == 1) { wo_i8_row_avx2(x, T, in, w, scale[o], y + o, out); continue; }
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
        else wo_i4_blocks_prep(x, in, bx.blocks, buf);
#endif
        bx.x = buf;
    }
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int o = 0; o < out; o++) {
        const uint8_t *w = q + (int64_t)o * groups * 16;
        const uint16_t *s = scale + (int64_t)o * groups, *m = mn + (int64_t)o * groups;
#ifdef HAVE_X86
        if (isa == 2) { wo_i4_row_avx512(x, T, in, &bx, w, s, m, y + o, out); continue; }
        if (isa == 1) { wo_i4_row_avx2(x, T, in, w, s, m, y + o, out); continue; }
#endif
        i4_row_c(x, T, in, w, s, m, y + o, out);
    }
    free(buf);
}
