/* The decoder layer's elementwise steps between the matmuls, one pass each, for the eager step
 * (a prefill chunk; a compiled graph fuses them itself): RMSNorm, the rotary embedding of q and
 * k, and SwiGLU's silu(gate) * up. torch runs each as several ops, each a pass over memory with
 * a tensor of its own (RMSNorm at bf16: a fp32 copy, the squares, their sum, the scaling twice
 * and the rounding back), and rounds to bf16 between them; here each value is read once,
 * computed in fp32 and rounded once. Rows go to OpenMP threads; isa: 0 plain C, 1 AVX2+FMA,
 * 2 AVX-512 (the same loops, vectorized by the compiler for each).
 */
#include "minisgl_kernels.h"
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
/* libmvec's vector expf (see paged_attention.c) */
__attribute__((__simd__("notinbranch"))) extern float expf(float);
#endif

#define AI static inline __attribute__((always_inline))
#define MIN_PARALLEL 16384  /* elements: fewer run on one thread (a fork costs more) */

AI float load(const void *p, int64_t i, int bf16) {
    if (!bf16) return ((const float *)p)[i];
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

AI void store(void *p, int64_t i, float f, int bf16) {
    if (!bf16) {
        ((float *)p)[i] = f;
        return;
    }
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    ((uint16_t *)p)[i] = (u & 0x7fffffffu) > 0x7f800000u
        ? (uint16_t)((u >> 16) | 0x40)  /* NaN stays NaN */
        : (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  /* to nearest even */
}

/* y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w, x's row t at x + t * stride */
#define RMS_BODY                                                                               \
    _Pragma("omp parallel for num_threads(threads) if(T * H >= MIN_PARALLEL)")                 \
    for (int t = 0; t < T; t++) {                                                              \
        int64_t at = (int64_t)t * stride, to = (int64_t)t * H;                                 \
        float ss = 0.0f;                                                                       \
        _Pragma("omp simd reduction(+ : ss)")                                                  \
        for (int j = 0; j < H; j++) {                                                          \
            float v = load(x, at + j, B);                                                   \
            ss += v * v;                                                                       \
        }                                                                                      \
        float r = 1.0f / sqrtf(ss / (float)H + eps);                                           \
        _Pragma("omp simd")                                                                    \
        for (int j = 0; j < H; j++) store(y, to + j, load(x, at + j, B) * r * w[j], B);  \
    }

/* y[t, h] = x[t, h] * cos[p_t] + rotate_half(x[t, h]) * sin[p_t] for H heads of D, with sin's
 * first half negated in the table (the decoder's layout): rotate_half(x) = (x2, x1) */
#define ROPE_BODY                                                                              \
    _Pragma("omp parallel for num_threads(threads) if(T * H * D >= MIN_PARALLEL)")             \
    for (int t = 0; t < T; t++) {                                                              \
        int half = D / 2;                                                                      \
        int64_t c0 = (int64_t)t * D;                                                           \
        for (int h = 0; h < H; h++) {                                                          \
            int64_t at = (int64_t)t * stride + (int64_t)h * D, to = ((int64_t)t * H + h) * D;  \
            _Pragma("omp simd")                                                                \
            for (int j = 0; j < half; j++) {                                                   \
                float a = load(x, at + j, B), b = load(x, at + half + j, B);             \
                store(y, to + j, a * load(cos, c0 + j, B) + b * load(sin, c0 + j, B),    \
                      B);                                                                   \
                store(y, to + half + j, b * load(cos, c0 + half + j, B) +                   \
                      a * load(sin, c0 + half + j, B), B);                               \
            }                                                                                  \
        }                                                                                      \
    }

/* y[t, j] = silu(g) * u of gate_up's row t = (g [I], u [I]) */
#define SWIGLU_BODY                                                                            \
    _Pragma("omp parallel for num_threads(threads) if(T * I >= MIN_PARALLEL)")                 \
    for (int t = 0; t < T; t++) {                                                              \
        int64_t at = (int64_t)t * 2 * I, to = (int64_t)t * I;                                  \
        _Pragma("omp simd")                                                                    \
        for (int j = 0; j < I; j++) {                                                          \
            float g = load(gu, at + j, B);                                                  \
            store(y, to + j, g / (1.0f + expf(-g)) * load(gu, at + I + j, B), B);        \
        }                                                                                      \
    }

#define RMS_ARGS const void *x, int stride, int T, int H, const float *w, float eps, \
                 void *y, int bf16, int threads
#define ROPE_ARGS const void *x, int stride, int T, int H, int D, const void *cos, \
                  const void *sin, void *y, int bf16, int threads
#define SWIGLU_ARGS const void *gu, int T, int I, void *y, int bf16, int threads

/* each body twice, for fp32 and for bf16: B a constant, so the loops carry no dtype test */
#define BOTH(body) if (bf16) { const int B = 1; body } else { const int B = 0; body }
static void rms_c(RMS_ARGS) { BOTH(RMS_BODY) }
static void rope_c(ROPE_ARGS) { BOTH(ROPE_BODY) }
static void swiglu_c(SWIGLU_ARGS) { BOTH(SWIGLU_BODY) }
#if defined(__x86_64__)
#define AVX2 __attribute__((target("avx2,fma")))
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))
AVX2 static void rms_avx2(RMS_ARGS) { BOTH(RMS_BODY) }
AVX512 static void rms_avx512(RMS_ARGS) { BOTH(RMS_BODY) }
AVX2 static void rope_avx2(ROPE_ARGS) { BOTH(ROPE_BODY) }
AVX512 static void rope_avx512(ROPE_ARGS) { BOTH(ROPE_BODY) }
AVX2 static void swiglu_avx2(SWIGLU_ARGS) { BOTH(SWIGLU_BODY) }
AVX512 static void swiglu_avx512(SWIGLU_ARGS) { BOTH(SWIGLU_BODY) }
#define PICK(name, ...)                                                                        \
    do {                                                                                       \
        if (isa >= 2) name##_avx512(__VA_ARGS__);                                              \
        else if (isa >= 1) name##_avx2(__VA_ARGS__);                                           \
        else name##_c(__VA_ARGS__);                                                            \
    } while (0)
#else
#define PICK(name, ...) name##_c(__VA_ARGS__)
#endif

int rms_norm_rows(const void *x, int stride, int T, int H, const float *w, float eps,
                  void *y, int bf16, int threads, int isa) {
    if (T < 0 || H < 1 || stride < H) return -1;
    PICK(rms, x, stride, T, H, w, eps, y, bf16, threads);
    return 0;
}

int rope_rows(const void *x, int stride, int T, int H, int D, const void *cos,
              const void *sin, void *y, int bf16, int threads, int isa) {
    if (T < 0 || H < 1 || D < 2 || D % 2 || stride < (int64_t)H * D) return -1;
    PICK(rope, x, stride, T, H, D, cos, sin, y, bf16, threads);
    return 0;
}

int swiglu_rows(const void *gu, int T, int I, void *y, int bf16, int threads, int isa) {
    if (T < 0 || I < 1) return -1;
    PICK(swiglu, gu, T, I, y, bf16, threads);
    return 0;
}
