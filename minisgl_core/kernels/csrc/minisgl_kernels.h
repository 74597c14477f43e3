/* Every entry point of the native library and the constants it shares with Python: the one list.
 *
 * Each C source includes it (the compiler checks each definition against its declaration), the
 * C++ operators (torch_ops.cpp) include it, and the ctypes bindings are read from it
 * (kernels/native/library.py): a new kernel is declared here once. Types: pointers, int, float,
 * void only; one declaration per prototype, ending in ");".
 * isa: 0 plain C, 1 AVX2+FMA, 2 AVX-512 (wo_best_isa: the widest allowed here).
 */
#ifndef MINISGL_KERNELS_H
#define MINISGL_KERNELS_H

#include <stdint.h>

/* Row buckets: rows <= 2 run bucket 0, <= 16 bucket 1, <= 64 bucket 2, <= 256 bucket 3, else
 * bucket 4 (kernels/matmul/base.py's BUCKETS and _BUCKET_TOP; a test checks they agree) */
#define MINISGL_BUCKETS 5
#define MINISGL_BUCKET_TOP {2, 16, 64, 256}
/* weights dequantized at a time by the *-dequant kernels (matmul/weight_only.py's TILE_ELEMS) */
#define MINISGL_TILE_ELEMS (1 << 20)

#ifdef __cplusplus
extern "C" {
#endif

/* what the CPU runs, narrowed by MINISGL_CPU_FEATURES (cpu_features.h) */
int wo_best_isa(void);
int wo_has_bf16(void);
int wo_has_amx(void);

/* weight-only matmuls, fp32 x and y (wo_matmul.c) */
void wo_int8(const float *x, int T, int in, const int8_t *q, const float *scale, int out,
             float *y, int threads, int isa);
void wo_int4(const float *x, int T, int in, const uint8_t *q, const uint16_t *scale,
             const uint16_t *mn, int out, float *y, int threads, int isa);

/* int4 against bf16 inputs on AVX512-BF16's dot product, and its tile dequantizer
 * (wo_int4_bf16.c); 0 done, -1 not on this CPU */
int wo_int4_bf16(const uint16_t *x, int T, int in, const uint8_t *q, const uint16_t *scale,
                 const uint16_t *mn, int out, float *y, int threads);
int wo_int4_dequant_bf16(const uint8_t *q, const uint16_t *scale, const uint16_t *mn, int in,
                         int a, int b, uint16_t *out, int threads);
/* the same from int4 weights in 16-output panels (wo_int4_panels' q, scale and mn, mn NULL
 * there too) */
int wo_int4_panels_dequant_bf16(const uint8_t *q, const uint16_t *scale, const uint16_t *mn,
                                int in, int a, int b, uint16_t *out, int threads);

/* int4 weights repacked at load into 16-output panels (q [panels][groups][4][16][4] bytes,
 * scale and mn fp16 [panels][groups][16]; mn NULL: Q4_0's symmetric weights, min = -8 scale)
 * against int8 inputs (each row rounded in groups of 32 inputs), any row count, on
 * AVX512-VNNI's dot product or AVX2's (wo_panels.c); x, y and residual (or NULL) fp32, or bf16
 * with x_bf16 / y_bf16; 0 done, -1 not on this CPU */
int wo_int4_panels(const void *x, int x_bf16, int T, int in, const uint8_t *q,
                   const uint16_t *scale, const uint16_t *mn, int out, void *y, int y_bf16,
                   const void *residual, int threads);
/* int8 weights the same way (AVX512-VNNI only): q [panels][groups x 8][16][4] bytes, w + 128,
 * scale fp32 [panels][16] (one per output) */
int wo_int8_panels(const void *x, int x_bf16, int T, int in, const uint8_t *q,
                   const float *scale, int out, void *y, int y_bf16, const void *residual,
                   int threads);
/* the same with each row split in two int8 rows, x rounded and what that left rounded, their
 * products summed: inputs within max|x| / 64516 a group of 32 (finer than bf16), for twice the
 * dot products */
int wo_int8_panels_split(const void *x, int x_bf16, int T, int in, const uint8_t *q,
                         const float *scale, int out, void *y, int y_bf16,
                         const void *residual, int threads);

/* int4, int8 and bf16 weights on AMX's tile multiply, bf16 inputs (wo_amx.c); 0 done, -1 not
 * on this CPU */
int wo_amx_int4(const uint16_t *x, int T, int in, const uint8_t *q, const uint16_t *scale,
                const uint16_t *mn, int out, void *y, int y_bf16, const void *residual,
                int threads);
/* int4 in 16-output panels (wo_int4_panels' layout, mn NULL there too) the same way */
int wo_amx_int4_panels(const uint16_t *x, int T, int in, const uint8_t *q,
                       const uint16_t *scale, const uint16_t *mn, int out, void *y, int y_bf16,
                       const void *residual, int threads);
int wo_amx_int8(const uint16_t *x, int T, int in, const int8_t *q, const float *scale, int out,
                void *y, int y_bf16, const void *residual, int threads);
int wo_amx_bf16(const uint16_t *x, int T, int in, const uint16_t *w, int out, void *y,
                int y_bf16, const void *residual, int threads);

/* int4 and int8 weights against bf16 inputs as a GEMM on AVX512-BF16: weight panels
 * dequantized once into bf16 for every row (wo_gemm_bf16.c); y and residual (or NULL) fp32, or
 * bf16 with y_bf16; 0 done, -1 not on this CPU */
int wo_gemm_int4_bf16(const uint16_t *x, int T, int in, const uint8_t *q, const uint16_t *scale,
                      const uint16_t *mn, int out, void *y, int y_bf16, const void *residual,
                      int threads);
int wo_gemm_int8_bf16(const uint16_t *x, int T, int in, const int8_t *q, const float *scale,
                      int out, void *y, int y_bf16, const void *residual, int threads);

/* decode attention read from the KV pages in place (paged_attention.c); 0 done, else the caller
 * falls back to SDPA */
int pa_decode(const void *q, const void *k_cache, const void *v_cache, const int64_t *index,
              const uint8_t *valid, int B, int L, int Hq, int Hkv, int D, float scale, int bf16,
              void *out, int isa);
/* the same over caches of packed int8 rows, [slots, Hkv, D + 2]: D values then their fp16
 * scale (kernels/kv_int8.py); q and out as pa_decode's */
int pa_decode_int8(const void *q, const void *k_cache, const void *v_cache,
                   const int64_t *index, const uint8_t *valid, int B, int L, int Hq, int Hkv,
                   int D, float scale, int bf16, void *out, int isa);

/* the sampler's full-vocabulary passes (sampling.c), logits [N, V]: one token per row drawn
 * from softmax(logits / temperature[r]) cut by top_k[r] (0: none), top_p[r] (1: none) and
 * min_p[r] (0: none) by inverse CDF at u[r] in [0, 1) (logits fp32; 0 done, -1 out of memory);
 * and each row's argmax, the first of equal values (logits fp32, or bf16 with bf16 = 1) */
int sample_rows(const float *logits, int N, int V, const float *temperature, const int *top_k,
                const float *top_p, const float *min_p, const double *u, int64_t *out,
                int isa);
int argmax_rows(const void *logits, int N, int V, int bf16, int64_t *out, int isa);

/* the decoder layer's elementwise steps in one pass each (elementwise.c), x fp32, or bf16 with
 * bf16 = 1 (y the same), fp32 arithmetic rounded once; x's rows ``stride`` elements apart, y
 * contiguous; 0 done, -1 bad sizes. RMSNorm of T rows of H times w (fp32 [H]); the rotary
 * embedding of T rows of H heads of D (cos and sin [T][D] in x's dtype, sin's first half
 * negated); silu(gate) * up of gate_up [T][2I] -> [T][I] */
int rms_norm_rows(const void *x, int stride, int T, int H, const float *w, float eps, void *y,
                  int bf16, int threads, int isa);
int rope_rows(const void *x, int stride, int T, int H, int D, const void *cos, const void *sin,
              void *y, int bf16, int threads, int isa);
int swiglu_rows(const void *gu, int T, int I, void *y, int bf16, int threads, int isa);

/* causal attention of one sequence's n new rows (prefill_attention.c): q [n] rows of Hq x D
 * bf16 (heads contiguous, rows q_row elements apart) at positions S - n .. S - 1 against keys and
 * values [S] rows of Hkv x D (k_row, v_row apart) -> out [n][Hq][D] bf16; 0 done, -1 not here
 * (no AVX512-BF16, D not a multiple of 64 up to 256, out of memory) */
int prefill_attention(const void *q, int q_row, const void *k, int k_row, const void *v,
                      int v_row, int n, int S, int Hq, int Hkv, int D, float scale, void *out,
                      int threads);

/* batch-invariant kernels (batch_invariant/): a row's result does not depend on the other rows
 * of the call (--deterministic); 0 done, -1 sizes not handled */
int bi_matmul(const void *x, int T, int in, const void *w, int out, const void *bias,
              const void *residual, void *y, int bf16, int isa);
int bi_attention(const void *q, const void *k_cache, const void *v_cache, const int64_t *slots,
                 int L, const int64_t *row_seq, const int64_t *positions, int T, int Hq, int Hkv,
                 int D, float scale, int window, int bf16, void *out, int isa);

#ifdef __cplusplus
}
#endif

#endif
