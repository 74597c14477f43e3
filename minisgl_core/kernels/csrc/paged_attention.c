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
 * (sequence, KV head) pairs with OpenMP (and over chunks of their keys where the pairs do not
 * share evenly over the threads: key_chunks); each pair scores its keys for all G query heads in
 * one pass over K, then sums V in one pass. isa: 0 plain C, 1 AVX2+FMA, 2 AVX-512 (the same loops,
 * vectorized by the compiler for each; on AVX-512, for head sizes 64, 128 and 256, the two
 * passes are the intrinsics of avx512/attention_passes.c: 16 keys' dot products reduced at
 * once, and the sums of 4 query heads kept in registers).
 */
#if defined(__GNUC__) && !defined(__clang__)
/* sums may be reordered (vectorized), as -ffast-math would, but infinities stay meaningful:
 * masked keys score -inf. 1.27x faster than without at 32 x 512 keys in fp32 (1147 vs 1462 us,
 * a 2-core AMX Xeon; docs/design/kernels.md, 11. Decode attention read in place) */
#pragma GCC optimize("associative-math", "no-signed-zeros", "no-trapping-math", "reciprocal-math")
#endif
#include "avx512/attention_passes.h"
#include "minisgl_kernels.h"
#include <math.h>
#include <omp.h>
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

#if defined(__x86_64__)
/* each ISA's passes for a head size (ALL_SHAPES below): AVX2 has none (BODY's loops), AVX-512
 * those of avx512/attention_passes.c */
#define scorer_avx2(D, bf16) ((score_fn)NULL)
#define summer_avx2(D, bf16) ((sum_fn)NULL)
#define scorer_avx512 pa_scorer_avx512
#define summer_avx512 pa_summer_avx512
#endif

/* out's G query heads from o on: acc [G x D] / total[g] (0 where nothing was seen), fp32 or bf16 */
static inline void store_heads(void *out, int64_t o, int G, int D, int bf16, const float *acc,
                               const float *total) {
    for (int g = 0; g < G; g++) {
        float inv = total[g] > 0.0f ? 1.0f / total[g] : 0.0f;
        for (int d = 0; d < D; d++) {
            float x = acc[g * D + d] * inv;
            if (bf16) ((uint16_t *)out)[o + g * D + d] = float_to_bf16(x);
            else ((float *)out)[o + g * D + d] = x;
        }
    }
}

/* One pair's chunks ([chunks][G max, G sum, G x D values]) merged in chunk order, each rescaled
 * by exp(its max - the pair's): acc [G x D] the weighted values, total [G] the weights' sums */
static inline void merge_chunks(const float *kept, int chunks, int G, int D, float *acc,
                                float *total) {
    const int64_t stride = (int64_t)G * (D + 2);
    for (int g = 0; g < G; g++) {
        float top = -INFINITY;
        for (int c = 0; c < chunks; c++) {
            float m = kept[c * stride + g];
            top = m > top ? m : top;
        }
        float *ag = acc + g * D;
        memset(ag, 0, sizeof(float) * (size_t)D);
        total[g] = 0.0f;
        for (int c = 0; c < chunks; c++) {
            const float *kc = kept + c * stride;
            if (kc[g] == -INFINITY) continue;  /* padding alone */
            float f = expf(kc[g] - top);
            total[g] += f * kc[G + g];
            const float *vc = kc + 2 * G + g * D;
            for (int d = 0; d < D; d++) ag[d] += f * vc[d];
        }
    }
}

/* Fewest keys a chunk of a pair's keys holds. The work items are the (sequence, KV head) pairs,
 * which the threads may not share evenly (one sequence's 3 KV heads at the default model on 2
 * threads: 2/3 and 1/3 of the work; Gemma 3 270M's one KV head: one thread). Then each pair's
 * keys are split into chunks, each chunk's softmax and weighted values kept apart and merged per
 * pair once all are done (flash-decoding's split). Not below this many keys a chunk: a chunk
 * costs its own setup and merge (at 128 keys a chunk, one sequence of 3,000 keys ran no faster
 * than unsplit). */
#define MIN_CHUNK_KEYS 256

/* chunks per pair: the count, from 1 up to the threads, whose items the threads finish
 * soonest (rounds of items x keys an item), the fewest of equals: 1 where the pairs already
 * share evenly; 2 for one sequence of 3 KV heads on 2 threads */
static inline int key_chunks(int64_t pairs, int L) {
    const int64_t threads = omp_get_max_threads();
    int best = 1;
    int64_t soonest = (pairs + threads - 1) / threads * L;
    /* at most 64: with L / c >= 256 keys, every chunk of ceil(L / c) then holds some */
    for (int c = 2; c <= threads && c <= 64 && L / c >= MIN_CHUNK_KEYS; c++) {
        int64_t t = (pairs * c + threads - 1) / threads * ((L + c - 1) / c);
        if (t < soonest) {
            best = c;
            soonest = t;
        }
    }
    return best;
}

/* SCORE, SUM: a score_fn and a sum_fn for this call (NULL: the loops below, a key at a time).
 * Work items are (sequence, KV head, chunk of keys); with one chunk (key_chunks) each item
 * writes its pair's output itself, else its softmax's max and sum and its weighted values go to
 * ``part`` [pairs][chunks][G x (D + 2)] and a second pass merges them, rescaled to the pair's
 * max. */
#define BODY(SCORE, SUM)                                                                       \
    const int G = G_FIXED ? G_FIXED : Hq / Hkv;                                                \
    const score_fn score = kv_int8 ? NULL : (SCORE);                                           \
    const sum_fn sum = kv_int8 ? NULL : (SUM);                                                 \
    const int64_t pairs = (int64_t)B * Hkv, stride = (int64_t)G * (D + 2);                     \
    int chunks = key_chunks(pairs, L);                                                         \
    float *part = chunks > 1 ? malloc(sizeof(float) * (size_t)(pairs * chunks * stride)) : NULL; \
    if (part == NULL) chunks = 1;  /* (or out of memory: the pairs whole, as one chunk) */     \
    const int CL = (L + chunks - 1) / chunks;  /* keys a chunk (the last may hold fewer) */     \
    _Pragma("omp parallel")                                                                    \
    {                                                                                          \
        float *scores = malloc(sizeof(float) * (size_t)G * (size_t)CL);                        \
        float qf[MAX_GROUP * MAX_DIM], acc[MAX_GROUP * MAX_DIM], row[MAX_DIM];                 \
        _Pragma("omp for schedule(static)")                                                    \
        for (int64_t item = 0; item < pairs * chunks; item++) {                                \
            int64_t pair = item / chunks, b = pair / Hkv, h = pair % Hkv;                      \
            const int l0 = (int)(item % chunks) * CL, Lc = L - l0 < CL ? L - l0 : CL;          \
            const int64_t *slots = index + b * L + l0;                                         \
            const uint8_t *ok = valid ? valid + b * L + l0 : NULL;                             \
            for (int g = 0; g < G; g++)                                                        \
                memcpy(qf + g * D, load_row(q, b * Hq + h * G + g, D, bf16, row),              \
                       sizeof(float) * (size_t)D);                                             \
            if (score)                                                                         \
                score((const char *)q + (b * Hq + h * G) * D * (bf16 ? 2 : 4), qf, k_cache,    \
                      slots, ok, Lc, Hkv, h, G, scale, scores);                                \
            for (int l = 0; !score && l < Lc; l++) {                                           \
                if (ok && !ok[l]) {                                                            \
                    for (int g = 0; g < G; g++) scores[g * Lc + l] = -INFINITY;                \
                    continue;                                                                  \
                }                                                                              \
                if (l + AHEAD_KEYS < Lc)                                                       \
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
                    scores[g * Lc + l] = s * ks * scale;                                       \
                }                                                                              \
            }                                                                                  \
            /* softmax weights of each query head's row, vectorized (libmvec's expf); a chunk  \
             * of padding alone (every key masked) weighs nothing */                           \
            float total[MAX_GROUP], most[MAX_GROUP];                                           \
            int seen = 0;                                                                      \
            for (int g = 0; g < G; g++) {                                                      \
                float *sg = scores + (int64_t)g * Lc, best = -INFINITY, sum = 0.0f;            \
                _Pragma("omp simd reduction(max:best)")                                        \
                for (int l = 0; l < Lc; l++) best = sg[l] > best ? sg[l] : best;               \
                seen = best != -INFINITY;  /* the same for every head: the mask is per key */  \
                if (seen) {                                                                    \
                    _Pragma("omp simd reduction(+:sum)")                                       \
                    for (int l = 0; l < Lc; l++) {                                             \
                        sg[l] = expf(sg[l] - best);                                            \
                        sum += sg[l];                                                          \
                    }                                                                          \
                }                                                                              \
                total[g] = sum;                                                                \
                most[g] = best;                                                                \
            }                                                                                  \
            if (sum && seen) sum(v_cache, slots, ok, Lc, Hkv, h, G, scores, acc);              \
            else memset(acc, 0, sizeof(float) * (size_t)G * (size_t)D);                        \
            for (int l = 0; !sum && seen && l < Lc; l++) {                                     \
                if (ok && !ok[l]) continue;                                                    \
                if (l + AHEAD_KEYS < Lc)                                                       \
                    prefetch_row(kv_row_at(v_cache, slots[l + AHEAD_KEYS] * Hkv + h, D,        \
                                           bf16, kv_int8), D, bf16, kv_int8);                  \
                float vs;                                                                      \
                const float *vr = load_kv_row(v_cache, slots[l] * Hkv + h, D, bf16, kv_int8,   \
                                              row, &vs);                                       \
                for (int g = 0; g < G; g++) {                                                  \
                    float p = scores[g * Lc + l] * vs;                                         \
                    float *ag = acc + g * D;                                                   \
                    _Pragma("omp simd")                                                        \
                    for (int d = 0; d < D; d++) ag[d] += p * vr[d];                            \
                }                                                                              \
            }                                                                                  \
            if (chunks == 1) {                                                                 \
                store_heads(out, (b * Hq + h * G) * D, G, D, bf16, acc, total);                \
                continue;                                                                      \
            }                                                                                  \
            float *kept = part + item * stride;  /* [G] max, [G] sum, [G x D] values */        \
            memcpy(kept, most, sizeof(float) * (size_t)G);                                     \
            memcpy(kept + G, total, sizeof(float) * (size_t)G);                                \
            memcpy(kept + 2 * G, acc, sizeof(float) * (size_t)G * (size_t)D);                  \
        }                                                                                      \
        if (chunks > 1) {  /* after the loop's barrier: every chunk is in */                   \
            _Pragma("omp for schedule(static)")                                                \
            for (int64_t pair = 0; pair < pairs; pair++) {                                     \
                float total[MAX_GROUP];                                                        \
                merge_chunks(part + pair * chunks * stride, chunks, G, D, acc, total);         \
                store_heads(out, pair * G * D, G, D, bf16, acc, total);                        \
            }                                                                                  \
        }                                                                                      \
        free(scores);                                                                          \
    }                                                                                          \
    free(part);

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
