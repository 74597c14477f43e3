/* What the weight-only matmul's files share (internal: not part of the library's interface).
 *
 * portable/wo_matmul.c holds the entry points (wo_int8, wo_int4), the plain C rows and the
 * choice of ISA; avx2/ and avx512/ hold the rows for their instruction sets, declared here. Those
 * are defined with WO_HIDDEN first: not exported from the library, and not taken for an entry
 * point by the check that the sources define what minisgl_kernels.h declares.
 */
#ifndef MINISGL_WO_SHARED_H
#define MINISGL_WO_SHARED_H

#include <omp.h>
#include <stdint.h>

#define WO_HIDDEN __attribute__((visibility("hidden")))

#define TILE 4  /* rows of x a pass over one weight row (their sums stay in registers) */
#define GROUP 32
/* How far ahead of the weight being read the next is asked for: the row's end and the rows after
 * it, which the hardware prefetcher alone fetched too late (int8 at one row: 21-23 GB/s without,
 * 26-28 GB/s with, 2 threads, a 36 GB/s host; docs/design/kernels.md, 7. The native kernels
 * alone). 6 KiB, not 2: Qwen3-1.7B's int4 panels, 2 threads, a Zen 5 reading 80-85 GB/s, 1
 * row 66-73 -> 68-75 GB/s (AVX2 code: 56-59 -> 65-71), 8 rows 34 -> 43 GB/s (design/kernels.md,
 * 29) */
#ifndef PREFETCH_BYTES  /* benchmarks/panels_prefetch.py builds the library with others */
#define PREFETCH_BYTES 6144
#endif
#define BLOCK_FLOATS (9 * 16)  /* a block's inputs in lane order (8 x 16), then its lane x-sums */

/* one row of x rearranged for the AVX-512 int4 blocks: [blocks][BLOCK_FLOATS] */
typedef struct {
    const float *x;
    int blocks;  /* ceil(groups / 4): the last block may hold fewer than four groups */
    int groups;
} Blocked;

#if defined(__x86_64__)
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

/* n sums of one output row, v[0..n), stored at y[at..]: plus the residual (y's dtype, or NULL),
 * in fp32, or rounded once to bf16 (to nearest even, as torch does) */
static inline void wo_store_row(const float *v, int n, int64_t at, void *y, int y_bf16,
                                const void *residual) {
    for (int l = 0; l < n; l++) {
        union { float f; uint32_t u; } s = {.f = v[l]};
        if (!y_bf16) {
            ((float *)y)[at + l] = residual ? s.f + ((const float *)residual)[at + l] : s.f;
            continue;
        }
        if (residual) {
            uint16_t bits = ((const uint16_t *)residual)[at + l];
            union { uint32_t u; float f; } r = {.u = (uint32_t)bits << 16};
            s.f += r.f;
        }
        ((uint16_t *)y)[at + l] = (s.u & 0x7fffffffu) > 0x7f800000u
            ? (uint16_t)((s.u >> 16) | 0x40)  /* NaN stays NaN */
            : (uint16_t)((s.u + 0x7fffu + ((s.u >> 16) & 1u)) >> 16);
    }
}

static inline float nibble(const uint8_t *grp, int j) {
    return (float)(j < 16 ? grp[j] & 15 : grp[j - 16] >> 4);
}

#ifdef HAVE_X86
/* Ask for ``lines`` cache lines from ``at`` (weights PREFETCH_BYTES ahead of those being read),
 * into every level of cache. Not non-temporal, though a call at few rows reads each weight byte
 * once: on the 2-core Intel Xeon with AMX, whose L3 holds the default model's 95 MB, a
 * non-temporal hint kept them out of it and the one-request step took 1.9x as long; on the
 * 2-core Zen 5 it had gained 1.4% (docs/design/kernels.md, 29). Written in asm: GCC 12 dropped
 * the panels' ``_mm_prefetch`` calls where two of them differed in their hint alone. */
static inline void wo_fetch_ahead(const uint8_t *at, int lines) {
    for (int k = 0; k < lines; k++)
        __asm__ volatile("prefetcht0 %0" : : "m"(*(at + 64 * k)));
}

/* How a loop over output panels or blocks (``schedule(runtime)``) is split between the threads:
 * at one row in halves, in order; at more rows handed out as threads come free (guided), so that
 * a thread the service's other processes preempt holds up the step by one block, not by the rest
 * of its half. Guided at one row cost 2.5-5% of the panels' pass alone (its later chunks start
 * where nothing was fetched ahead) and gained nothing served; from 8 rows up, served, 1.01-1.09x
 * at 8 requests and 1.07x at 32 (docs/design/kernels.md, 31). Set before the parallel region,
 * whose threads inherit it. */
static inline void wo_schedule(int rows) {
    omp_set_schedule(rows == 1 ? omp_sched_static : omp_sched_guided, 0);
}

/* one output row: y[t * out] for every row t of x (avx2/wo_matmul_avx2.c) */
WO_HIDDEN void wo_i8_row_avx2(const float *x, int T, int in, const int8_t *w, float s, float *y,
                              int out);
WO_HIDDEN void wo_i4_row_avx2(const float *x, int T, int in, const uint8_t *w, const uint16_t *sc,
                              const uint16_t *mn, float *y, int out);

/* the same on AVX-512 (avx512/wo_matmul_avx512.c); at one row of x, i4 reads bx, the row laid
 * out in blocks by wo_i4_blocks_prep */
WO_HIDDEN void wo_i8_row_avx512(const float *x, int T, int in, const int8_t *w, float s, float *y,
                                int out);
WO_HIDDEN void wo_i4_row_avx512(const float *x, int T, int in, const Blocked *bx,
                                const uint8_t *w, const uint16_t *sc, const uint16_t *mn,
                                float *y, int out);
WO_HIDDEN void wo_i4_blocks_prep(const float *x, int in, int blocks, float *out);

/* wo_int4_panels on AVX2 (avx2/wo_panels_avx2.c): 0 done, -1 no AVX2 here (or no memory) */
WO_HIDDEN int wo_int4_panels_avx2(const void *x, int x_bf16, int T, int in, const uint8_t *q,
                                  const uint16_t *scale, const uint16_t *mn, int out, void *y,
                                  int y_bf16, const void *residual, int threads);
/* the rounding of the panels' inputs: T rows of x -> one buffer (the caller frees it) holding
 * q [T][groups][32] int8 in order, then each group's d and d sum(q), *d and *ds [T][groups];
 * NULL without memory (avx2/wo_panels_avx2.c) */
WO_HIDDEN int8_t *wo_q8_rows(const void *x, int x_bf16, int T, int in, int groups, float **d,
                             float **ds);
/* the same for inputs split in two rounded parts: 2T rows, row 2t x_t rounded and row 2t + 1
 * what that left rounded (avx2/wo_panels_avx2.c) */
WO_HIDDEN int8_t *wo_q8_rows_split(const void *x, int x_bf16, int T, int in, int groups,
                                   float **d, float **ds);
#endif

#endif
