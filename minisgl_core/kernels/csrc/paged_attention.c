/* Decode attention over the paged KV cache, read in place: one query token per sequence.
 *
 * q [B, Hq, D]; k_cache, v_cache [slots, Hkv, D]; index [B, L] int64: the slot of each key of
 * each sequence; valid [B, L] uint8 (1 = attend) or NULL (all); out [B, Hq, D]. Query head h
 * reads KV head h / (Hq / Hkv) (grouped-query attention). q, the caches and out are all fp32
 * (bf16 = 0) or all bf16 (bf16 = 1); scores, softmax and sums are fp32. pa_decode_int8 reads
 * caches of packed int8 rows instead, [slots, Hkv, D + 2] bytes: D int8 values then their fp16
 * scale (kernels/kv_int8.py); the scale multiplies each key's dot product and each value's
 * softmax weight, so the values are only widened, never rescaled one by one.
 *
 * The gather-then-SDPA path reads each key and value three times (gather read, gather write,
 * attention read); here each is read once, straight from its page. Work is split over the
 * (sequence, KV head) pairs with OpenMP; each pair scores its keys for all G query heads in one
 * pass over K, then sums V in one pass. isa: 0 plain C, 1 AVX2+FMA, 2 AVX-512 (the same loops,
 * vectorized by the compiler for each; on AVX-512, for head sizes 64, 128 and 256, the two
 * passes are the intrinsics of score_fn and sum_fn: 16 keys' dot products reduced at once, and
 * the sums of 4 query heads kept in registers).
 */
#if defined(__GNUC__) && !defined(__clang__)
/* sums may be reordered (vectorized), as -ffast-math would, but infinities stay meaningful:
 * masked keys score -inf. 1.27x faster than without at 32 x 512 keys in fp32 (1147 vs 1462 us,
 * a 2-core AMX Xeon; docs/design/kernels.md, 11. Decode attention read in place) */
#pragma GCC optimize("associative-math", "no-signed-zeros", "no-trapping-math", "reciprocal-math")
#endif
#include "minisgl_kernels.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
/* glibc has vector expf (libmvec) but declares it only under -ffast-math, which would also let
 * the compiler assume away the -inf scores of masked keys: declared here instead, so the softmax
 * loop below calls it 8 or 16 lanes at a time (needs -fno-math-errno, in native.FLAGS) */
__attribute__((__simd__("notinbranch"))) extern float expf(float);
#endif

#define MAX_GROUP 16  /* query heads per KV head handled (Hq / Hkv) */
#define MAX_DIM 256   /* head_dim handled */

static inline float bf16_to_float(uint16_t h) {
    union { uint32_t u; float f; } v;
    v.u = (uint32_t)h << 16;
    return v.f;
}

static inline uint16_t float_to_bf16(float f) {  /* round to nearest even, as torch does */
    union { uint32_t u; float f; } v;
    v.f = f;
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40);  /* NaN */
    return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1)) >> 16);
}

static inline float fp16_to_float(uint16_t h) {
    union { uint32_t u; float f; } v;
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0) {  /* zero or subnormal: man * 2^-24 */
        float f = (float)man * 5.9604645e-8f;
        return sign ? -f : f;
    }
    v.u = sign | (exp == 31 ? 0x7f800000u | (man << 13) : ((exp + 112) << 23) | (man << 13));
    return v.f;
}

/* row r of a [*, D] tensor as fp32: in place when it is fp32, else converted into buf */
static inline const float *load_row(const void *base, int64_t r, int D, int bf16, float *buf) {
    if (!bf16) return (const float *)base + r * D;
    const uint16_t *p = (const uint16_t *)base + r * D;
    for (int d = 0; d < D; d++) buf[d] = bf16_to_float(p[d]);
    return buf;
}

/* row r of a KV cache as fp32 and its scale: kv_int8 0 as load_row (scale 1); 1 a packed int8
 * row of D + 2 bytes, its D values widened into buf (not yet scaled) */
static inline const float *load_kv_row(const void *base, int64_t r, int D, int bf16,
                                       int kv_int8, float *buf, float *scale) {
    if (!kv_int8) {
        *scale = 1.0f;
        return load_row(base, r, D, bf16, buf);
    }
    const int8_t *p = (const int8_t *)base + r * (D + 2);
    for (int d = 0; d < D; d++) buf[d] = (float)p[d];
    *scale = fp16_to_float((uint16_t)((uint8_t)p[D] | ((uint16_t)(uint8_t)p[D + 1] << 8)));
    return buf;
}

/* the first byte of row r of a KV cache (load_kv_row's layouts) */
static inline const void *kv_row_at(const void *base, int64_t r, int D, int bf16, int kv_int8) {
    return (const char *)base + r * (kv_int8 ? D + 2 : bf16 ? 2 * D : 4 * D);
}

/* rows a few keys ahead are fetched while this one is summed: their slots come from the index,
 * which the hardware prefetcher cannot follow */
#define AHEAD_KEYS 8

/* every cache line of a row (a bf16 row of 64 is two lines; prefetching its first alone left
 * the second to a miss) */
static inline void prefetch_row(const void *row, int D, int bf16, int kv_int8) {
    int bytes = kv_int8 ? D + 2 : bf16 ? 2 * D : 4 * D;
    for (int off = 0; off < bytes; off += 64) __builtin_prefetch((const char *)row + off);
}

/* Scores of one (sequence, KV head) pair's keys, scores[g * L + l] = q_g . k_l * scale (-inf
 * where ok[l] is 0): qraw, its G query rows as given (fp32 or bf16), qf the same in fp32 */
typedef void (*score_fn)(const void *qraw, const float *qf, const void *k_cache,
                         const int64_t *slots, const uint8_t *ok, int L, int Hkv, int h, int G,
                         float scale, float *scores);
/* acc[g * D + d] = sum over the visible keys l of w[g * L + l] * v_l[d] (masked keys unread) */
typedef void (*sum_fn)(const void *v_cache, const int64_t *slots, const uint8_t *ok, int L,
                       int Hkv, int h, int G, const float *w, float *acc);

#if defined(__x86_64__)
#include <immintrin.h>

static score_fn scorer_avx2(int D, int bf16) {  /* none: BODY's loop scores each key */
    (void)D, (void)bf16;
    return NULL;
}

static sum_fn summer_avx2(int D, int bf16) {
    (void)D, (void)bf16;
    return NULL;
}

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#define T512BF __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))

/* 16 vectors -> one, lane j the sum of v[j]'s lanes: 45 shuffles and adds for 16 dot products,
 * where reducing each on its own takes about 8 dependent steps */
T512 static inline __m512 sum16(const __m512 *v) {
    __m512 four[4];
    for (int i = 0; i < 4; i++) {  /* v[4i..4i+3] -> 128-bit lane k: their sums over lane k */
        const __m512 *w = v + 4 * i;
        __m512 a = _mm512_add_ps(_mm512_unpacklo_ps(w[0], w[1]), _mm512_unpackhi_ps(w[0], w[1]));
        __m512 c = _mm512_add_ps(_mm512_unpacklo_ps(w[2], w[3]), _mm512_unpackhi_ps(w[2], w[3]));
        __m512d ad = _mm512_castps_pd(a), cd = _mm512_castps_pd(c);
        four[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(ad, cd)),
                                _mm512_castpd_ps(_mm512_unpackhi_pd(ad, cd)));
    }
    /* four[i] lane k = (sum over 128-bit lane k of v[4i], v[4i+1], v[4i+2], v[4i+3]) */
    __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(four[0], four[1], 0x44),
                              _mm512_shuffle_f32x4(four[0], four[1], 0xEE));
    __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(four[2], four[3], 0x44),
                              _mm512_shuffle_f32x4(four[2], four[3], 0xEE));
    return _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
}

/* one key's 16 partial sums of q_g . k over D (D a multiple of 32): fp32 rows; bf16 rows widened
 * to fp32 against qf; bf16 rows against the bf16 query by AVX512-BF16's pair products (each
 * product of two bf16 values is exact in fp32, as when widened) */
T512 static inline __m512 dot_f32(const float *q, const float *k, int D) {
    __m512 a = _mm512_mul_ps(_mm512_loadu_ps(q), _mm512_loadu_ps(k));
    for (int i = 16; i < D; i += 16)
        a = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), _mm512_loadu_ps(k + i), a);
    return a;
}

T512 static inline __m512 widen_bf16(const uint16_t *p) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

T512 static inline __m512 dot_widened(const float *q, const uint16_t *k, int D) {
    __m512 a = _mm512_mul_ps(_mm512_loadu_ps(q), widen_bf16(k));
    for (int i = 16; i < D; i += 16)
        a = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), widen_bf16(k + i), a);
    return a;
}

T512BF static inline __m512 dot_bf16(const uint16_t *q, const uint16_t *k, int D) {
    __m512 a = _mm512_setzero_ps();
    for (int i = 0; i < D; i += 32)
        a = _mm512_dpbf16_ps(a, (__m512bh)_mm512_loadu_si512(q + i),
                             (__m512bh)_mm512_loadu_si512(k + i));
    return a;
}

/* A scorer for head size DD: blocks of 16 keys, each key's sums for every query head of the
 * pair, reduced 16 at a time (sum16); the next block's rows fetched meanwhile. A masked key
 * reads row 0 (its slot may be padding: never followed) and scores -inf. */
#define SCORER(target, name, DD, ELEM, DOT, QROW)                                              \
    target static void name(const void *qraw, const float *qf, const void *k_cache,           \
                            const int64_t *slots, const uint8_t *ok, int L, int Hkv, int h,    \
                            int G, float scale, float *scores) {                               \
        const int D = DD;                                                                      \
        const ELEM *kc = (const ELEM *)k_cache;                                                \
        (void)qraw, (void)qf;                                                                  \
        int l0 = 0;                                                                            \
        for (; l0 + 16 <= L; l0 += 16) {                                                       \
            const ELEM *rows[16];                                                              \
            for (int j = 0; j < 16; j++) {                                                     \
                int l = l0 + j;                                                                \
                rows[j] = kc + ((ok && !ok[l]) ? 0 : slots[l] * Hkv + h) * D;                  \
                if (l + 16 < L && !(ok && !ok[l + 16]))                                        \
                    prefetch_row(kc + (slots[l + 16] * Hkv + h) * D, D, sizeof(ELEM) == 2, 0); \
            }                                                                                  \
            for (int g = 0; g < G; g++) {                                                      \
                __m512 v[16];                                                                  \
                for (int j = 0; j < 16; j++) v[j] = DOT(QROW(g), rows[j], D);                  \
                _mm512_storeu_ps(scores + g * L + l0,                                          \
                                 _mm512_mul_ps(sum16(v), _mm512_set1_ps(scale)));              \
            }                                                                                  \
        }                                                                                      \
        for (; l0 < L; l0++) {                                                                 \
            const ELEM *row = kc + ((ok && !ok[l0]) ? 0 : slots[l0] * Hkv + h) * D;            \
            for (int g = 0; g < G; g++)                                                        \
                scores[g * L + l0] = _mm512_reduce_add_ps(DOT(QROW(g), row, D)) * scale;       \
        }                                                                                      \
        for (int l = 0; ok && l < L; l++)                                                      \
            if (!ok[l])                                                                        \
                for (int g = 0; g < G; g++) scores[g * L + l] = -INFINITY;                     \
    }
#define Q_FP32(g) (qf + (g) * D)
#define Q_BF16(g) ((const uint16_t *)qraw + (g) * D)
#define SCORERS(size)                                                                          \
    SCORER(T512, score_f32_##size, size, float, dot_f32, Q_FP32)                               \
    SCORER(T512, score_widened_##size, size, uint16_t, dot_widened, Q_FP32)                    \
    SCORER(T512BF, score_bf16_##size, size, uint16_t, dot_bf16, Q_BF16)
SCORERS(64)
SCORERS(128)
SCORERS(256)

/* A sum_fn for head size DD: 4 query heads and 64 of D at a time in 16 registers, each visible
 * key's row read (and widened) once per such block, rows 16 keys ahead fetched meanwhile */
#define SUMMER(name, DD, ELEM, LOAD)                                                           \
    T512 static void name(const void *v_cache, const int64_t *slots, const uint8_t *ok, int L, \
                          int Hkv, int h, int G, const float *w, float *acc) {                 \
        const int D = DD;                                                                      \
        const ELEM *vc = (const ELEM *)v_cache;                                                \
        for (int g0 = 0; g0 < G; g0 += 4) {                                                    \
            const int n = G - g0 < 4 ? G - g0 : 4;                                             \
            for (int c = 0; c < D; c += 64) {                                                  \
                __m512 a[4][4];                                                                \
                for (int i = 0; i < 4; i++)                                                    \
                    for (int k = 0; k < 4; k++) a[i][k] = _mm512_setzero_ps();                 \
                for (int l = 0; l < L; l++) {                                                  \
                    if (l + 16 < L && c == 0 && g0 == 0 && !(ok && !ok[l + 16]))               \
                        prefetch_row(vc + (slots[l + 16] * Hkv + h) * D, D,                    \
                                     sizeof(ELEM) == 2, 0);                                    \
                    if (ok && !ok[l]) continue;                                                \
                    const ELEM *row = vc + (slots[l] * Hkv + h) * D + c;                       \
                    __m512 v0 = LOAD(row), v1 = LOAD(row + 16), v2 = LOAD(row + 32),           \
                           v3 = LOAD(row + 48);                                                \
                    for (int i = 0; i < n; i++) {                                              \
                        __m512 p = _mm512_set1_ps(w[(g0 + i) * L + l]);                        \
                        a[i][0] = _mm512_fmadd_ps(p, v0, a[i][0]);                             \
                        a[i][1] = _mm512_fmadd_ps(p, v1, a[i][1]);                             \
                        a[i][2] = _mm512_fmadd_ps(p, v2, a[i][2]);                             \
                        a[i][3] = _mm512_fmadd_ps(p, v3, a[i][3]);                             \
                    }                                                                          \
                }                                                                              \
                for (int i = 0; i < n; i++)                                                    \
                    for (int k = 0; k < 4; k++)                                                \
                        _mm512_storeu_ps(acc + (g0 + i) * D + c + 16 * k, a[i][k]);            \
            }                                                                                  \
        }                                                                                      \
    }
SUMMER(sum_f32_64, 64, float, _mm512_loadu_ps)
SUMMER(sum_f32_128, 128, float, _mm512_loadu_ps)
SUMMER(sum_f32_256, 256, float, _mm512_loadu_ps)
SUMMER(sum_bf16_64, 64, uint16_t, widen_bf16)
SUMMER(sum_bf16_128, 128, uint16_t, widen_bf16)
SUMMER(sum_bf16_256, 256, uint16_t, widen_bf16)

static sum_fn summer_avx512(int D, int bf16) {
    if (D == 64) return bf16 ? sum_bf16_64 : sum_f32_64;
    if (D == 128) return bf16 ? sum_bf16_128 : sum_f32_128;
    if (D == 256) return bf16 ? sum_bf16_256 : sum_f32_256;
    return NULL;
}

/* the AVX-512 scorer for head size D (none for other sizes: BODY's loop) */
static score_fn scorer_avx512(int D, int bf16) {
    static int has_bf16 = -1;
    if (has_bf16 < 0) has_bf16 = wo_has_bf16();
#define PICK(size)                                                                             \
    if (D == size) return !bf16 ? score_f32_##size : has_bf16 ? score_bf16_##size            \
                                                              : score_widened_##size;
    PICK(64) PICK(128) PICK(256)
#undef PICK
    return NULL;
}
#endif

/* SCORE, SUM: a score_fn and a sum_fn for this call (NULL: the loops below, a key at a time) */
#define BODY(SCORE, SUM)                                                                       \
    const int G = G_FIXED ? G_FIXED : Hq / Hkv;                                                \
    const score_fn score = kv_int8 ? NULL : (SCORE);                                           \
    const sum_fn sum = kv_int8 ? NULL : (SUM);                                                 \
    _Pragma("omp parallel")                                                                    \
    {                                                                                          \
        float *scores = malloc(sizeof(float) * (size_t)G * (size_t)L);                         \
        float qf[MAX_GROUP * MAX_DIM], acc[MAX_GROUP * MAX_DIM], row[MAX_DIM];                 \
        _Pragma("omp for schedule(static)")                                                    \
        for (int64_t pair = 0; pair < (int64_t)B * Hkv; pair++) {                              \
            int64_t b = pair / Hkv, h = pair % Hkv;                                            \
            const int64_t *slots = index + b * L;                                              \
            const uint8_t *ok = valid ? valid + b * L : NULL;                                  \
            for (int g = 0; g < G; g++)                                                        \
                memcpy(qf + g * D, load_row(q, b * Hq + h * G + g, D, bf16, row),              \
                       sizeof(float) * (size_t)D);                                             \
            if (score)                                                                         \
                score((const char *)q + (b * Hq + h * G) * D * (bf16 ? 2 : 4), qf, k_cache,    \
                      slots, ok, L, Hkv, h, G, scale, scores);                                 \
            for (int l = 0; !score && l < L; l++) {                                            \
                if (ok && !ok[l]) {                                                            \
                    for (int g = 0; g < G; g++) scores[g * L + l] = -INFINITY;                 \
                    continue;                                                                  \
                }                                                                              \
                if (l + AHEAD_KEYS < L)                                                        \
                    prefetch_row(kv_row_at(k_cache, slots[l + AHEAD_KEYS] * Hkv + h, D,        \
                                           bf16, kv_int8), D, bf16, kv_int8);                  \
                float ks;                                                                      \
                const float *kr = load_kv_row(k_cache, slots[l] * Hkv + h, D, bf16, kv_int8,   \
                                              row, &ks);                                       \
                for (int g = 0; g < G; g++) {                                                  \
                    const float *qg = qf + g * D;                                              \
                    float s = 0.0f;                                                            \
                    _Pragma("omp simd reduction(+:s)")                                         \
                    for (int d = 0; d < D; d++) s += qg[d] * kr[d];                            \
                    scores[g * L + l] = s * ks * scale;                                        \
                }                                                                              \
            }                                                                                  \
            /* softmax weights of each query head's row, vectorized (libmvec's expf) */         \
            float total[MAX_GROUP];                                                            \
            for (int g = 0; g < G; g++) {                                                      \
                float *sg = scores + (int64_t)g * L, best = -INFINITY, sum = 0.0f;             \
                _Pragma("omp simd reduction(max:best)")                                        \
                for (int l = 0; l < L; l++) best = sg[l] > best ? sg[l] : best;                \
                _Pragma("omp simd reduction(+:sum)")                                           \
                for (int l = 0; l < L; l++) {                                                  \
                    sg[l] = expf(sg[l] - best);                                                \
                    sum += sg[l];                                                              \
                }                                                                              \
                total[g] = sum;                                                                \
            }                                                                                  \
            if (sum) sum(v_cache, slots, ok, L, Hkv, h, G, scores, acc);                       \
            else memset(acc, 0, sizeof(float) * (size_t)G * (size_t)D);                        \
            for (int l = 0; !sum && l < L; l++) {                                              \
                if (ok && !ok[l]) continue;                                                    \
                if (l + AHEAD_KEYS < L)                                                        \
                    prefetch_row(kv_row_at(v_cache, slots[l + AHEAD_KEYS] * Hkv + h, D,        \
                                           bf16, kv_int8), D, bf16, kv_int8);                  \
                float vs;                                                                      \
                const float *vr = load_kv_row(v_cache, slots[l] * Hkv + h, D, bf16, kv_int8,   \
                                              row, &vs);                                       \
                for (int g = 0; g < G; g++) {                                                  \
                    float p = scores[g * L + l] * vs;                                          \
                    float *ag = acc + g * D;                                                   \
                    _Pragma("omp simd")                                                        \
                    for (int d = 0; d < D; d++) ag[d] += p * vr[d];                            \
                }                                                                              \
            }                                                                                  \
            for (int g = 0; g < G; g++) {                                                      \
                float inv = total[g] > 0.0f ? 1.0f / total[g] : 0.0f;                          \
                int64_t o = (b * Hq + h * G + g) * D;                                          \
                for (int d = 0; d < D; d++) {                                                  \
                    float x = acc[g * D + d] * inv;                                            \
                    if (bf16) ((uint16_t *)out)[o + d] = float_to_bf16(x);                     \
                    else ((float *)out)[o + d] = x;                                            \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
        free(scores);                                                                          \
    }

#define ARGS                                                                                   \
    const void *q, const void *k_cache, const void *v_cache, const int64_t *index,            \
        const uint8_t *valid, int B, int L, int Hq, int Hkv, int D, float scale, int bf16,     \
        void *out

static void decode_c(ARGS, int kv_int8) {
    const int G_FIXED = 0;  /* the group from the arguments */
    BODY(NULL, NULL)
}

typedef void (*decode_fn)(ARGS, int kv_int8);

/* The body again with the head size D and the query heads per KV head (G_FIXED) as constants,
 * shadowing the arguments: every per-key loop over D then compiles to a fixed number of vector
 * operations (no trip-count checks, no remainder loops) and a fixed G keeps the sums of its
 * query heads in registers. The head sizes 64, 128 and 256, and with them the groups of the
 * models in use: (64, 3) SmolLM2, (64, 4) Llama 3.2, (128, 2) Qwen3, (256, 4) Gemma 3 270M.
 * 1.3-1.8x the generic body on the default model's shape (docs/design/kernels.md, 11.). */
#define SHAPED(target, name, size, group, isa)                                                 \
    target static void name(ARGS, int kv_int8) {                                               \
        (void)D;                                                                               \
        {                                                                                      \
            const int D = size, G_FIXED = group;                                               \
            BODY(scorer_##isa(size, bf16), summer_##isa(size, bf16))                           \
        }                                                                                      \
    }
#define ALL_SHAPES(target, isa)                                                                \
    target static void decode_##isa(ARGS, int kv_int8) {                                       \
        const int G_FIXED = 0;                                                                 \
        BODY(NULL, NULL)                                                                       \
    }                                                                                          \
    SHAPED(target, decode_##isa##_64, 64, 0, isa)                                              \
    SHAPED(target, decode_##isa##_64_3, 64, 3, isa)                                            \
    SHAPED(target, decode_##isa##_64_4, 64, 4, isa)                                            \
    SHAPED(target, decode_##isa##_128, 128, 0, isa)                                            \
    SHAPED(target, decode_##isa##_128_2, 128, 2, isa)                                          \
    SHAPED(target, decode_##isa##_256, 256, 0, isa)                                            \
    SHAPED(target, decode_##isa##_256_4, 256, 4, isa)                                          \
    static decode_fn pick_##isa(int D, int G) {                                                \
        if (D == 64) return G == 3 ? decode_##isa##_64_3 : G == 4 ? decode_##isa##_64_4       \
                                                                   : decode_##isa##_64;        \
        if (D == 128) return G == 2 ? decode_##isa##_128_2 : decode_##isa##_128;               \
        if (D == 256) return G == 4 ? decode_##isa##_256_4 : decode_##isa##_256;               \
        return decode_##isa;                                                                   \
    }

#if defined(__x86_64__)
ALL_SHAPES(__attribute__((target("avx2,fma"))), avx2)
ALL_SHAPES(__attribute__((target("avx512f,avx512bw,avx512vl,fma"))), avx512)
#endif

static int run(ARGS, int kv_int8, int isa) {
    if (Hkv < 1 || Hq % Hkv != 0 || Hq / Hkv > MAX_GROUP || D > MAX_DIM || L < 1) return -1;
#if defined(__x86_64__)
    if (isa >= 1) {
        decode_fn decode = isa >= 2 ? pick_avx512(D, Hq / Hkv) : pick_avx2(D, Hq / Hkv);
        decode(q, k_cache, v_cache, index, valid, B, L, Hq, Hkv, D, scale, bf16, out, kv_int8);
        return 0;
    }
#endif
    (void)isa;
    decode_c(q, k_cache, v_cache, index, valid, B, L, Hq, Hkv, D, scale, bf16, out, kv_int8);
    return 0;
}

/* 0 when done; -1 when a size is beyond what this kernel handles (the caller falls back) */
int pa_decode(ARGS, int isa) {
    return run(q, k_cache, v_cache, index, valid, B, L, Hq, Hkv, D, scale, bf16, out, 0, isa);
}

int pa_decode_int8(ARGS, int isa) {
    return run(q, k_cache, v_cache, index, valid, B, L, Hq, Hkv, D, scale, bf16, out, 1, isa);
}
